"""keras_xla's cache home: where it keeps what it measured on this
machine (flag tables, peak FLOP/s, remembered decisions).

`KERAS_XLA_CACHE_DIR`, else `$XDG_CACHE_HOME/keras_xla` (or
`~/.cache/keras_xla`). A home that cannot be used (a file, read-only,
owned by another user, writable by every user) is replaced for this
process by a private folder in the temporary directory (created `0o700`
and checked to be this user's own, never through a link), or, failing
that, by memory (`json_files` keeps its files there, never on disk in a
home it cannot use). The reason is warned once per machine, not per
process: the fallback remembers that it was said (`NOT_USED_FILE`), and
later processes log it at debug level; only memory, which remembers
nothing, says it in every process that needs the home. The next process
finds what this one measured in the fallback, so nothing slow (the
flag-table probe) runs again.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import stat
import tempfile

from keras_xla.core import json_files

logger = logging.getLogger(__name__)

VARIABLE = "KERAS_XLA_CACHE_DIR"
# In the fallback: each home it stands in for -> the reason warned.
NOT_USED_FILE = "homes_not_used.json"
# Configured home -> the directory used for it in this process.
_CHOSEN: dict[str, str] = {}
_HOME = "the cache home"
_said: set[str] = set()  # What this process logged it cannot keep.


def configured() -> str:
    """The home as configured, usable or not."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(
        os.path.expanduser("~"), ".cache"
    )
    return os.environ.get(VARIABLE) or os.path.join(base, "keras_xla")


def directory() -> str:
    """The directory to keep files in: the configured home if it can be
    used, else the fallback (see the module docstring), checked once per
    process and home."""
    home = configured()
    if home not in _CHOSEN:
        _CHOSEN[home] = _choose(home)
    return _CHOSEN[home]


def cannot_keep(what: str, error: BaseException, home: bool = True) -> None:
    """Logs that `what` could not be kept on disk (it stays in memory for
    this process): a warning once per process and `what`, none for a
    file of the home when its fallback was logged already (`home`)."""
    quiet = what in _said or (home and _HOME in _said)
    _said.add(what)
    (logger.debug if quiet else logger.warning)(
        "keras_xla: cannot keep %s (%s); kept for this process.", what, error
    )


def _choose(home: str) -> str:
    problem = unusable(home)
    if problem is None:
        return home
    fallback, why_not = _private_temporary()
    where = f"in memory for this process ({why_not})"
    warned = False
    if fallback is None:
        # Nowhere to keep files, nor that this was said: every process
        # that needs the home says it, and never touches it.
        json_files.keep_in_memory(home)
    else:
        said = os.path.join(fallback, NOT_USED_FILE)
        where = f"in {fallback} instead"
        warned = json_files.read_object(said).get(home) == problem
    (logger.debug if warned else logger.warning)(
        "keras_xla: its cache home %s cannot be used (%s); it keeps its "
        "measurements %s. Set %s to a directory of your own to choose "
        "another.",
        home,
        problem,
        where,
        VARIABLE,
    )
    if fallback is not None and not warned:
        try:  # So later processes do not warn again (else they will).
            json_files.update(said, lambda data: data.update({home: problem}))
        except OSError as error:
            logger.debug("keras_xla: cannot note %s (%s).", said, error)
    _said.add(_HOME)  # Failed writes there need no second warning.
    return fallback or home


def unusable(home: str) -> str | None:
    """Why `home` cannot be keras_xla's cache home, or None if it can
    (it is created if missing)."""
    try:
        os.makedirs(home, mode=0o700, exist_ok=True)
        info = os.stat(home)
    except FileExistsError:
        return "a file, not a directory"
    except OSError as error:
        return error.strerror or str(error)
    if not stat.S_ISDIR(info.st_mode):
        return "a file, not a directory"
    if hasattr(os, "getuid") and info.st_uid != os.getuid():
        return f"owned by user id {info.st_uid}, not this user"
    if info.st_mode & stat.S_IWOTH:
        return "writable by every user"
    if not os.access(home, os.W_OK | os.X_OK):
        return "not writable"
    return None


def _private_temporary() -> tuple[str | None, str]:
    """`<tmp>/keras_xla-<uid>`, made `0o700` if missing, if it is this
    user's own directory (not a link, no access for others); else None
    and why not."""
    if not hasattr(os, "getuid"):
        return None, "no user id on this system"
    uid = os.getuid()
    path = os.path.join(tempfile.gettempdir(), f"keras_xla-{uid}")
    try:
        with contextlib.suppress(FileExistsError):
            os.mkdir(path, 0o700)
        info = os.lstat(path)
    except OSError as error:
        return None, f"{path}: {error.strerror}"
    if not stat.S_ISDIR(info.st_mode):
        return None, f"{path} is not a directory (a link?)"
    if info.st_uid != uid or info.st_mode & 0o077:
        return None, f"{path} is not this user's private directory"
    if not os.access(path, os.W_OK | os.X_OK):
        return None, f"{path}: {os.strerror(errno.EACCES)}"
    return path, ""
