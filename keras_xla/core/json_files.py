"""The small JSON files keras_xla keeps (measured peaks, flag tables,
compile times, remembered decisions): read leniently, written whole,
changed under a lock.

A file whose directory cannot be written is kept in memory for this
process instead (`update`), so a later read in the process still sees
what it would have kept. A directory keras_xla must not use at all (a
cache home that is another user's, or every user's, with no fallback)
is kept in memory from the start (`keep_in_memory`): its files are
never read or written on disk.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any

from keras_xla.core import files

# Path -> the object this process could not keep on disk.
_IN_MEMORY: dict[str, dict] = {}
# Directories whose files live in memory only (`keep_in_memory`).
_MEMORY_ONLY: set[str] = set()


def keep_in_memory(directory: str) -> None:
    """Keeps the files of `directory` in memory for this process: they
    are never read from disk (what is there may not be keras_xla's) nor
    written there."""
    _MEMORY_ONLY.add(os.path.abspath(directory))


def _memory_only(path: str) -> bool:
    return os.path.dirname(os.path.abspath(path)) in _MEMORY_ONLY


def read_object(path: str) -> dict:
    """The JSON object in `path`; `{}` if it is missing, unreadable, a
    link or not an object. What this process could not write there
    (`update`) is read from memory."""
    if path in _IN_MEMORY:
        return dict(_IN_MEMORY[path])
    return {} if _memory_only(path) else _read_disk(path)


def _read_disk(path: str) -> dict:
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
        with open(fd, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def write(path: str, data: Any) -> None:
    """Writes `data` as JSON to `path` whole (`core.files.write_whole`),
    so a reader (another worker) never sees half a file, and a failure
    leaves the earlier file. Raises `OSError` if it cannot be written."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    files.write_whole(path, json.dumps(data, indent=1, sort_keys=True))


def update(path: str, change: Callable[[dict], Any]) -> dict:
    """Applies `change` (it edits the dict in place) to the object in
    `path` and writes it back under a lock (`<path>.lock`): a concurrent
    `update` by another process waits, and neither loses the other's
    keys. Returns the new object. A file that cannot be written is kept
    in memory, and `OSError` raised for the caller to log; in a
    `keep_in_memory` directory without a word: its owner said so once."""
    if _memory_only(path):
        data = read_object(path)
        change(data)
        _IN_MEMORY[path] = data
        return data
    try:
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        with files.locked(path):
            # What an earlier failure kept in memory, under the file's.
            data = {**_IN_MEMORY.get(path, {}), **_read_disk(path)}
            change(data)
            write(path, data)
    except OSError:
        data = read_object(path)
        change(data)
        _IN_MEMORY[path] = data
        raise
    _IN_MEMORY.pop(path, None)
    return data
