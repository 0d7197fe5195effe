"""Writing keras_xla's files whole, safely, in directories others share.

`write_whole` writes a file under a temporary name no other process can
predict or collide with (created with `O_EXCL`, so never through a link
planted there), syncs it, then renames it onto the final name: a reader
sees the old file or the new one, never half of one, and a failure
(a full disk, a permission) leaves the old file and no temporary one.
`locked` serializes the read-modify-write of a file across processes.
`deferring` lets the owner of a fit hold large files until its report
is written (the report goes first: it is what must survive a full disk).
"""

from __future__ import annotations

import contextlib
import contextvars
import errno
import os
import stat
import tempfile
from collections.abc import Iterator

try:
    import fcntl
except ImportError:  # Not POSIX: files are written whole, not locked.
    fcntl = None

# Pending `(path, data)` of the stage running in this context, or None.
_DEFERRED: contextvars.ContextVar[list | None] = contextvars.ContextVar(
    "keras_xla_deferred_files", default=None
)


def write_whole(path: str, data: bytes | str, mode: int = 0o666) -> str:
    """Writes `data` (a `str` as UTF-8) to `path`, whose directory must
    exist, whole or not at all (see the module docstring); returns `path`.
    The final path is never opened, so a link there is replaced, not
    followed. `mode`, less the umask, defaults to what `open(path, "w")`
    creates. Raises `OSError` when it cannot be written: the temporary
    file is gone, an earlier file at `path` unchanged."""
    if isinstance(data, str):
        data = data.encode("utf-8")
    directory, name = os.path.split(path)
    fd, temporary = tempfile.mkstemp(dir=directory or ".", prefix=f".{name}.")
    try:
        os.fchmod(fd, mode & ~_umask())
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
        os.close(fd)
        fd = -1
        os.replace(temporary, path)
    except BaseException:
        if fd >= 0:
            os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
    return path


def own_directory(path: str) -> str:
    """Creates the directory `path` (and its parents) if needed; returns
    it. Raises `OSError` when `path` is a link or not a directory: a
    folder keras_xla writes into is never reached through a link."""
    os.makedirs(path, exist_ok=True)
    if not stat.S_ISDIR(os.lstat(path).st_mode):
        raise OSError(
            errno.ENOTDIR, "not a directory of its own (a link?)", path
        )
    return path


@contextlib.contextmanager
def locked(path: str) -> Iterator[None]:
    """Holds an exclusive lock on `path`'s `_lock_file` for the block, so
    concurrent read-modify-writes of `path` by other processes wait their
    turn. Raises `OSError` when it cannot be opened or locked."""
    fd = _lock_file(path)
    try:
        if fcntl is not None:
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # Releases the lock.


def hold(path: str) -> int | None:
    """Takes an exclusive lock on `path`'s `_lock_file` without waiting,
    held until `release` (or the process ends: the system drops a dead
    holder's lock). Returns its descriptor, or None when another holder
    has it (-1 where files cannot be locked). Raises `OSError` when it
    cannot be opened."""
    if fcntl is None:
        return -1
    fd = _lock_file(path)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    except BaseException:
        os.close(fd)
        raise
    return fd


def _lock_file(path: str) -> int:
    """`path`'s sibling `<path>.lock`, opened (created `0o600`, never
    through a link)."""
    flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0)
    return os.open(path + ".lock", flags | getattr(os, "O_CLOEXEC", 0), 0o600)


def release(fd: int | None) -> None:
    """Drops a lock `hold` took (nothing for None or -1)."""
    if fd is not None and fd >= 0:
        with contextlib.suppress(OSError):
            os.close(fd)


@contextlib.contextmanager
def deferring(pending: list) -> Iterator[list]:
    """Inside the block, `write_later` appends `(path, data)` to
    `pending` instead of writing; the caller writes them when it chooses
    (`write_into_own_directory`)."""
    token = _DEFERRED.set(pending)
    try:
        yield pending
    finally:
        _DEFERRED.reset(token)


def write_into_own_directory(path: str, data: bytes | str) -> str:
    """`write_whole(path, data)` after `own_directory` of its folder."""
    own_directory(os.path.dirname(path) or ".")
    return write_whole(path, data)


def write_later(path: str, data: bytes | str) -> str:
    """`write_into_own_directory(path, data)`, or queued when a
    `deferring` block is active in this context; returns `path`."""
    pending = _DEFERRED.get()
    if pending is None:
        return write_into_own_directory(path, data)
    pending.append((path, data))
    return path


def _umask() -> int:
    """The process's umask, read without changing it (Linux), else the
    usual `0o022`."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    return 0o022
