"""Reading report JSON that a newer, older, damaged or hostile writer
produced.

A report is read as far as it can be: a field an earlier writer named
otherwise is read under its name now (`RENAMED`), a key this version
does not know is skipped, an optional field that is null or of the
wrong type takes its default, and a row or section missing a required
field (or holding a bad one) is left out. A number field holds a
finite number no longer than a 64-bit integer (NaN, Infinity or a
400-digit number is a bad value), and the lists and dicts the renderers
read into hold items of the types they expect (`_CONTENTS`). Each of
these is noted in `skipped` with where it was (`epochs[2].steps`), so
`keras-xla report` can say what it did not show. JSON nested deeper
than any report is refused (`parse`).

Pure logic: nothing here imports TensorFlow or Keras.
"""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any

_TYPES: dict[str, tuple[type, ...]] = {
    "int": (int,),
    "float": (int, float),
    "str": (str,),
    "bool": (bool,),
    "dict": (dict,),
    "list": (list, tuple),
}

# The largest integer a report holds: a writer's counters and NumPy
# scalars stay within int64. A longer number is no measurement, and
# formatting it as a float overflows.
MAX_INT = 2**63 - 1
# A report is nested about 5 levels deep; JSON nested deeper than this is
# refused before anything walks it.
MAX_DEPTH = 64
# The longest repr of a bad value quoted in a `skipped` note.
SHOWN_CHARS = 80

# What the renderers read inside a list or dict field, by dataclass and
# field name: the annotation each item (or dict value) must fit, or for
# items that are objects, the annotation of each key they must hold, or
# for a list of a fixed length (a window's first and last step), each
# item's annotation: one bad item makes the whole field bad.
_CONTENTS: dict[tuple[str, str], Any] = {
    ("EpochStats", "step_time_ms"): "float | None",
    ("ClusteringSection", "clusters"): "int",
    ("HloSection", "largest_unfused"): "str",
    ("ProfileSection", "steps"): ("int", "int"),
    ("EpochStats", "spikes"): {
        "step": "int",
        "ms": "float",
        "seconds": "float",
        "kind": "str",
    },
    ("Verdict", "next_steps"): {
        "code": "str",
        "seconds": "float | None",
        "fix": "str",
    },
}

_BAD = object()  # A field value that cannot be read.

# Fields an earlier writer of this schema kept under another name, by
# dataclass: where it was (`outer.inner`, a key of the dict field
# `outer`) and the field it is now. The value moves to its field unless
# that holds one too.
RENAMED: dict[str, dict[str, str]] = {
    "EpochStats": {
        "step_time_ms.dispatch_median": "dispatch_ms_median",
        "step_time_ms.input_median": "input_ms_median",
        "step_time_ms.input_share": "input_share",
        "step_time_ms.tuner_median": "tuner_ms_median",
    },
}


def parse(text: str) -> Any:
    """JSON text as Python values; `ValueError` for text that is not JSON
    (`json.JSONDecodeError`) or JSON nested more than `MAX_DEPTH` levels
    deep (which Python's parser may not even read: a `RecursionError`)."""
    too_deep = f"JSON nested more than {MAX_DEPTH} levels deep"
    try:
        data = json.loads(text)
    except RecursionError:
        raise ValueError(too_deep) from None
    if nesting_depth(data, MAX_DEPTH) > MAX_DEPTH:
        raise ValueError(too_deep)
    return data


def nesting_depth(value: Any, limit: int = MAX_DEPTH) -> int:
    """How many lists and dicts deep `value` is (a scalar: 0), walked
    without recursion; stops counting once past `limit`."""
    deepest = 0
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children = item.values()
        elif isinstance(item, (list, tuple)):
            children = item
        else:
            continue
        deepest = max(deepest, depth)
        if deepest > limit:
            return deepest
        stack.extend((child, depth + 1) for child in children)
    return deepest


def fits(annotation: str, value: Any) -> bool:
    """Whether a JSON value fits a field's annotation (as written:
    `"float | None"`); unknown names accept anything. A number fits only
    if it is finite and within `MAX_INT`."""
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
    if not isinstance(value, allowed):
        return False
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, int):
        return abs(value) <= MAX_INT
    return True


def shown(value: Any) -> str:
    """`repr(value)`, cut to `SHOWN_CHARS` for a note."""
    text = repr(value)
    if len(text) > SHOWN_CHARS:
        return text[: SHOWN_CHARS - 3] + "..."
    return text


def read(cls: type, data: Any, where: str, skipped: list[str]):
    """`cls` (a dataclass) from `data`, or None if it cannot be read;
    notes in `skipped` what was left out."""
    if data is None:
        return None
    if not isinstance(data, dict):
        skipped.append(f"{where} (not an object)")
        return None
    data = _renamed(cls, data)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    skipped += [f"{where}.{key} (unknown)" for key in data if key not in fields]
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
        value = _BAD
        if fits(field.type, data[name]):
            value = _read_contents(
                (cls.__name__, name), data[name], f"{where}.{name}", skipped
            )
        if value is not _BAD:
            kwargs[name] = value
        elif required:
            skipped.append(f"{where} (bad `{name}`: {shown(data[name])})")
            return None
        else:
            skipped.append(f"{where}.{name} (bad value {shown(data[name])})")
    return cls(**kwargs)


def _renamed(cls: type, data: dict) -> dict:
    """`data` with the fields `RENAMED` for `cls` under their names now."""
    data = dict(data)
    for old, new in RENAMED.get(cls.__name__, {}).items():
        outer, _, inner = old.partition(".")
        holder = data.get(outer)
        if isinstance(holder, dict) and inner in holder:
            data[outer] = {k: v for k, v in holder.items() if k != inner}
            if data.get(new) is None:
                data[new] = holder[inner]
    return data


def _read_contents(
    key: tuple[str, str], value: Any, where: str, skipped: list[str]
) -> Any:
    """The items of a list or dict field that fit `_CONTENTS[key]` (all
    of `value` if the field has no entry there); notes the others. A
    fixed-length list with a bad item is `_BAD`."""
    spec = _CONTENTS.get(key)
    if spec is None or not isinstance(value, (dict, list, tuple)):
        return value
    if isinstance(spec, tuple):
        good = len(value) == len(spec) and all(map(fits, spec, value))
        return list(value) if good else _BAD
    is_dict = isinstance(value, dict)
    kept = {}
    for k, item in value.items() if is_dict else enumerate(value):
        if _item_fits(spec, item):
            kept[k] = item
        else:
            at = f".{k}" if is_dict else f"[{k}]"
            skipped.append(f"{where}{at} (bad value {shown(item)})")
    return kept if is_dict else list(kept.values())


def _item_fits(spec: str | dict[str, str], item: Any) -> bool:
    if isinstance(spec, str):
        return fits(spec, item)
    return isinstance(item, dict) and all(
        name in item and fits(annotation, item[name])
        for name, annotation in spec.items()
    )


def read_rows(cls: type, rows: Any, where: str, skipped: list[str]) -> list:
    """The rows of a list that can be read (see `read`)."""
    if rows is None:
        return []
    if not isinstance(rows, list):
        skipped.append(f"{where} (not a list)")
        return []
    found = (
        read(cls, row, f"{where}[{i}]", skipped) for i, row in enumerate(rows)
    )
    return [row for row in found if row is not None]
