"""The small JSON files keras_xla keeps (measured peaks, flag tables,
compile times, remembered decisions): read leniently, written whole.
"""

from __future__ import annotations

import json
import os
from typing import Any


def read_object(path: str) -> dict:
    """The JSON object in `path`; `{}` if it is missing, unreadable or
    not an object."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def write(path: str, data: Any) -> None:
    """Writes `data` as JSON to a temporary name beside `path`, then
    renames it, so a reader (another worker) never sees half a file.
    Raises `OSError` if the directory cannot be written."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=1, sort_keys=True)
    os.replace(tmp, path)
