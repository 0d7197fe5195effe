"""Reading report JSON that a newer, older or damaged writer produced.

A report is read as far as it can be: a key this version does not know
is skipped, an optional field that is null or of the wrong type takes its
default, and a row or section missing a required field (or holding a bad
one) is left out. Each of these is noted in `skipped` with where it was
(`epochs[2].steps`), so `keras-xla report` can say what it did not show.

Pure logic: nothing here imports TensorFlow or Keras.
"""

from __future__ import annotations

import dataclasses
from typing import Any

_TYPES: dict[str, tuple[type, ...]] = {
    "int": (int,),
    "float": (int, float),
    "str": (str,),
    "bool": (bool,),
    "dict": (dict,),
    "list": (list, tuple),
    "tuple": (list, tuple),
}


def fits(annotation: str, value: Any) -> bool:
    """Whether a JSON value fits a field's annotation (as written:
    `"float | None"`); unknown names accept anything."""
    parts = [p.strip().split("[")[0] for p in str(annotation).split("|")]
    if value is None:
        return "None" in parts or "Any" in parts
    allowed: tuple[type, ...] = ()
    for part in parts:
        if part not in _TYPES and part != "None":
            return True  # a class or Any: not checked here
        allowed += _TYPES.get(part, ())
    if isinstance(value, bool) and bool not in allowed:
        return False  # JSON true is not a number here
    return isinstance(value, allowed)


def read(cls: type, data: Any, where: str, skipped: list[str]):
    """`cls` (a dataclass) from `data`, or None if it cannot be read;
    notes in `skipped` what was left out."""
    if data is None:
        return None
    if not isinstance(data, dict):
        skipped.append(f"{where} (not an object)")
        return None
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    for key in data:
        if key not in fields:
            skipped.append(f"{where}.{key} (unknown)")
    kwargs = {}
    for name, field in fields.items():
        required = (
            field.default is dataclasses.MISSING
            and field.default_factory is dataclasses.MISSING
        )
        if name not in data:
            if required:
                skipped.append(f"{where} (no `{name}`)")
                return None
            continue
        value = data[name]
        if fits(field.type, value):
            kwargs[name] = value
        elif required:
            skipped.append(f"{where} (bad `{name}`: {value!r})")
            return None
        else:
            skipped.append(f"{where}.{name} (bad value {value!r})")
    return cls(**kwargs)


def read_rows(cls: type, rows: Any, where: str, skipped: list[str]) -> list:
    """The rows of a list that can be read (see `read`)."""
    if rows is None:
        return []
    if not isinstance(rows, list):
        skipped.append(f"{where} (not a list)")
        return []
    out = []
    for i, row in enumerate(rows):
        value = read(cls, row, f"{where}[{i}]", skipped)
        if value is not None:
            out.append(value)
    return out
