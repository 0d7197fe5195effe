"""The persistent cache's entry files: checked, set aside, copied.

TensorFlow loads a cache entry lazily, when a compilation's key matches
its file name, and trusts it. Measured on TF 2.21: an entry of random
bytes fails that step with `DataLossError`; an empty one with
`InvalidArgumentError` ("Serialized cache key does not match"); a
truncated one makes Keras's `fit` return having trained no step (the
loader's OUT_OF_RANGE reads as the end of the data). So entries are read
before TensorFlow can: one that does not parse as an entry (`compile_ledger.
read_modules`) is renamed `<name>.corrupt`, which the cache's file
pattern no longer matches.

Copying lets a cache directory serve a process whose TensorFlow already
read its flags (the usual script order: build the model, then create the
tuner): TensorFlow reads the directory it was started with at every
compilation, so entries copied into it now are hits, and new entries are
copied back out. Copies are written to a temporary name and renamed, so
a reader never sees half a file.
"""

from __future__ import annotations

import os
import shutil
import tempfile

from keras_xla.tf_backend import compile_ledger

CORRUPT_SUFFIX = ".corrupt"
# Entries already read in this process: path -> (size, mtime).
_CHECKED: dict[str, tuple[int, float]] = {}


def is_entry(path: str) -> bool:
    """Whether the file parses as an XLA cache entry (both modules)."""
    try:
        compile_ledger.read_modules(path)
    except (OSError, ValueError):
        return False
    return True


def corrupt_entries(directory: str) -> list[str]:
    """The entries of `directory` that are not valid; each file is read
    once per process unless it changed."""
    bad = []
    for path in sorted(compile_ledger.entries(directory)):
        try:
            stamp = (os.path.getsize(path), os.path.getmtime(path))
        except OSError:
            continue  # removed meanwhile
        if _CHECKED.get(path) == stamp:
            continue
        if is_entry(path):
            _CHECKED[path] = stamp
        else:
            bad.append(path)
    return bad


def set_aside(directory: str) -> list[str]:
    """Renames the directory's corrupt entries `<name>.corrupt`; returns
    the names set aside (a file that cannot be renamed is left, and not
    listed)."""
    moved = []
    for path in corrupt_entries(directory):
        try:
            os.replace(path, path + CORRUPT_SUFFIX)
        except OSError:
            continue
        moved.append(os.path.basename(path))
    return moved


def writable(directory: str) -> bool:
    """Whether a file can be created in `directory`."""
    try:
        with tempfile.NamedTemporaryFile(dir=directory, prefix=".keras_xla_"):
            return True
    except OSError:
        return False


def copy_entries(source: str, target: str) -> list[str]:
    """Copies the valid entries of `source` that `target` lacks; returns
    the names copied. Never raises: a file that cannot be copied is
    skipped."""
    have = {os.path.basename(p) for p in compile_ledger.entries(target)}
    copied = []
    for path in sorted(compile_ledger.entries(source)):
        name = os.path.basename(path)
        if name in have or not is_entry(path):
            continue
        partial = os.path.join(target, f".{name}.{os.getpid()}.partial")
        try:
            shutil.copy2(path, partial)
            os.replace(partial, os.path.join(target, name))
        except OSError:
            try:
                os.remove(partial)
            except OSError:
                pass
            continue
        copied.append(name)
    return copied
