"""The persistent cache's entry files: trusted, checked, set aside, copied.

TensorFlow loads a cache entry lazily, when a compilation's key matches
its file name, and trusts it: an entry planted under the key of the
user's step runs in place of the user's program. So an entry is used only
if this user could have written it alone: a regular file (not a link),
owned by this user, writable by no one else, in a directory with the same
properties (`core.cache_directory.untrusted`), unless the user said they
trust a shared directory. TensorFlow also fails the step that loads a
damaged entry (random bytes: `DataLossError`; empty:
`InvalidArgumentError`; truncated: Keras's `fit` returns having trained no
step), so entries are read before TensorFlow can, and one that does not
parse is renamed `<name>.corrupt`.

A cache directory serves the process through the in-memory compile
ledger: its entries are copied in (hits) and the entries this process
compiled are copied back out at every epoch end. Copies out go to a
temporary name no other process can predict, created without following
links, and are renamed in place; a copy that fails (a full disk) leaves
nothing behind and costs the cache, never a step.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import tempfile

from keras_xla.core import files
from keras_xla.core.cache_directory import untrusted
from keras_xla.tf_backend import cache_entry, compile_ledger

CORRUPT_SUFFIX = ".corrupt"
# A copy out is skipped unless the disk keeps this much free beside it.
MIN_FREE_BYTES = 256 << 20
# Entries already read in this process: path -> (size, mtime).
_CHECKED: dict[str, tuple[int, float]] = {}
# Entry names copied into the ledger from a cache directory: never copied
# out again (to that directory or another).
_IMPORTED: set[str] = set()
# The cache directory in force (the one enabled last in this process),
# and the entries compiled while an earlier one was: each cache gets only
# what was compiled under it (`claim`).
_CURRENT: str | None = None
_OWNER: dict[str, str] = {}


def claim(directory: str, ledger: str) -> None:
    """`directory` is the cache in force from now on: the ledger's
    entries compiled so far belong to the cache that was in force (none
    before the first: those go to the first, a late enable), so a later
    cache never gets them."""
    global _CURRENT
    directory = os.path.abspath(directory)
    if _CURRENT is not None and _CURRENT != directory:
        for path in compile_ledger.entries(ledger):
            name = os.path.basename(path)
            if name not in _IMPORTED:
                _OWNER.setdefault(name, _CURRENT)
    _CURRENT = directory


def _regular(path: str) -> bool:
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


def set_aside(directory: str) -> list[str]:
    """Renames the directory's entries that do not parse `<name>.corrupt`
    (a rename moves a link itself, never its target); returns the names
    set aside (a file that cannot be renamed is left, and not listed).
    Each file is read once per process unless it changed."""
    moved = []
    for path in sorted(compile_ledger.entries(directory)):
        try:
            info = os.lstat(path)
        except OSError:
            continue  # removed meanwhile
        stamp = (info.st_size, info.st_mtime)
        if _CHECKED.get(path) == stamp:
            continue
        try:
            cache_entry.read_modules(path)
            _CHECKED[path] = stamp
        except (OSError, ValueError):
            with contextlib.suppress(OSError):
                os.replace(path, path + CORRUPT_SUFFIX)
                moved.append(os.path.basename(path))
    return moved


def writable(directory: str) -> bool:
    """Whether a file can be created in `directory`."""
    try:
        with tempfile.NamedTemporaryFile(dir=directory, prefix=".keras_xla_"):
            return True
    except OSError:
        return False


def copy_in(directory: str, ledger: str, trust: bool) -> tuple[list, list]:
    """Copies the entries of the cache `directory` into the in-memory
    `ledger`, newest first, up to half its budget (entries and bytes);
    returns `(names copied, (name, why) of entries left out)`: untrusted
    files (unless `trust`) and damaged ones. Never raises."""
    have = {os.path.basename(p) for p in compile_ledger.entries(ledger)}
    copied, left_out, room = [], [], compile_ledger.BUDGET_BYTES // 2
    found = compile_ledger.entries(directory)
    for path in sorted(found, key=found.get, reverse=True):
        name = os.path.basename(path)
        if name in have:
            continue
        if len(copied) >= compile_ledger.MAX_ENTRIES // 2:
            break
        why = None if _regular(path) else "it is a link or not a file"
        why = why or (None if trust else untrusted(path))
        if why is not None:
            left_out.append((name, why))
            continue
        try:
            data = cache_entry.read_bytes(path)
            cache_entry.parse_modules(data, path)
            if len(data) > room:
                break
            cache_entry.write_bytes(f"{ledger.rstrip('/')}/{name}", data)
        except (OSError, ValueError) as error:
            left_out.append((name, str(error)))
            continue
        room -= len(data)
        _IMPORTED.add(name)
        copied.append(name)
    return copied, left_out


def copy_out(ledger: str, directory: str) -> tuple[list[str], str | None]:
    """Copies the entries this process compiled (not those copied in)
    while `directory` was the cache in force (`claim`) from the
    in-memory `ledger` to that directory, where it lacks them; returns
    `(names copied, why copying stopped or None)`. Never raises: a full
    disk stops the copy, and no partial file is left."""
    have = {os.path.basename(p) for p in compile_ledger.entries(directory)}
    copied, target = [], os.path.abspath(directory)
    for path in sorted(compile_ledger.entries(ledger)):
        name = os.path.basename(path)
        owner = _OWNER.get(name, _CURRENT)  # None: before any cache.
        if name in have or name in _IMPORTED or owner not in (None, target):
            continue
        try:
            data = cache_entry.read_bytes(path)
            cache_entry.parse_modules(data, path)
        except (OSError, ValueError):
            continue  # removed meanwhile (the ledger's budget)
        problem = _write_entry(directory, name, data)
        if problem is not None:
            return copied, problem
        copied.append(name)
    return copied, None


def _write_entry(directory: str, name: str, data: bytes) -> str | None:
    """Writes one entry whole (`files.write_whole`); returns why it could
    not, or None."""
    try:
        free = shutil.disk_usage(directory).free
    except OSError as error:
        return f"{directory} cannot be read ({error.strerror})"
    if free < len(data) + MIN_FREE_BYTES:
        return (
            f"the disk of {directory} has {free >> 20} MiB free, under the "
            f"{MIN_FREE_BYTES >> 20} MiB keras_xla keeps free"
        )
    try:  # Private (0o600): a cache entry is the user's alone.
        files.write_whole(os.path.join(directory, name), data, mode=0o600)
    except OSError as error:
        return f"writing {name} failed ({error.strerror or error})"
    return None
