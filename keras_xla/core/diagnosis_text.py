"""`keras-xla doctor`'s text: a diagnosis dict as aligned lines.

Each backend's doctor (`tf_backend.doctor`, `jax_backend.doctor`) collects
its own checks as a JSON-ready dict and names its rows (key -> label);
the rows, how a value reads and the closing status line are the same on
both.

Pure logic: nothing here imports TensorFlow, Keras or JAX.
"""

from __future__ import annotations

from typing import Any


def value_text(value: Any) -> str:
    """One diagnosis value as the doctor prints it."""
    if isinstance(value, dict):
        return ", ".join(f"{k}: {value_text(v)}" for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return " ".join(map(str, value)) or "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return "(unset)" if value is None else str(value) or '""'


def label_rows(labels: dict[str, str], diagnosis: dict[str, Any]) -> list:
    """`  label  value` lines, one per `labels` entry (key -> label), the
    values aligned; a key missing from `diagnosis` reads `(unset)`."""
    width = max(len(label) for label in labels.values())
    return [
        f"  {label.ljust(width)}  {value_text(diagnosis.get(key))}"
        for key, label in labels.items()
    ]


def status_line(problems: int) -> str:
    """The doctor's last line: how many problems it found."""
    if problems:
        return f"Status: {problems} problem(s) found"
    return "Status: healthy"
