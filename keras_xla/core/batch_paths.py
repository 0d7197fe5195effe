"""A batch's inputs under readable paths, as signatures name them.

Both backends read a batch's signature from the same structure: Keras's
`(x, y, sample_weight)` tuple, with dicts, lists and tuples nested inside.
Each array-like leaf (anything with a `shape` and a `dtype`: a NumPy
array, a TensorFlow tensor, a JAX array) gets a path such as `x`,
`x/tokens` or `y/0`, so a recompilation names the input that changed.

Pure logic: nothing here imports TensorFlow, Keras or JAX.
"""

from __future__ import annotations

from typing import Any

_TOP_LEVEL_NAMES = ("x", "y", "sample_weight")


def flatten_with_paths(data: Any) -> list[tuple[str, Any]]:
    """A batch, as the step function receives it, as `(path, array)`
    pairs in a stable order: nested structures add `/key` (dict keys
    sorted) or `/index`; `None` entries are left out."""
    if isinstance(data, tuple) and 1 <= len(data) <= 3:
        top = list(zip(_TOP_LEVEL_NAMES, data))
    else:
        top = [("x", data)]
    out: list[tuple[str, Any]] = []
    for name, value in top:
        _walk(name, value, out)
    return out


def _walk(path: str, value: Any, out: list) -> None:
    if value is None:
        return
    if isinstance(value, dict):
        for key in sorted(value, key=str):
            _walk(f"{path}/{key}", value[key], out)
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            _walk(f"{path}/{i}", item, out)
    elif hasattr(value, "shape") and hasattr(value, "dtype"):
        out.append((path, value))
