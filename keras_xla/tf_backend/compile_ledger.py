"""XLA's own record of the compilations of this process, kept in memory.

With `--tf_xla_persistent_cache_directory=DIR` in `TF_XLA_FLAGS`,
TensorFlow writes one entry file for every XLA compilation it runs, for
`jit_compile` steps and auto-clustering's clusters alike. An entry is an
`XlaSerializedCacheEntry`: field 2 the unoptimized `HloModuleProto`,
field 3 the serialized executable, whose field 1.1 is the optimized
`HloModuleProto` XLA ran. So the directory is a ledger that costs no
compilation: the optimized HLO of the train step is read from it, not
compiled again.

The ledger lives in TensorFlow's in-memory file system (`ram://`), never
on a disk: TensorFlow fails the step whose entry it cannot write (a full
disk trained no step), and a directory on disk could be read or planted
by others, inherited by children or left behind by a killed job. In
memory it belongs to this process alone, and a child that inherits the
flag writes to its own memory. Its size is held under `BUDGET_BYTES` by
removing the oldest entries (a removed entry only means TensorFlow
compiles that signature again, as it would without a ledger).

TensorFlow reads `TF_XLA_FLAGS` once, when it first lists devices (at its
first op). `install()` runs at `import keras_xla`: if TensorFlow has not
started, and no cache directory is set, it adds the flag; once TensorFlow
has read it (`release_environment()`, at a fit's start) the variable is
given back to the user, so subprocesses inherit the user's value. A
directory the user set in the flag serves as the ledger as it is.
`KERAS_XLA_LEDGER=0` turns this off.

The in-memory file system keeps no modification times, so an entry's
time is when this process first listed it (`stamp()`, called as each
step call ends).
"""

from __future__ import annotations

import contextlib
import dataclasses
import fnmatch
import glob
import os
import shutil
import sys
import tempfile
import time

from keras_xla.tf_backend import cache_entry
from keras_xla.tf_backend import flags as flags_lib
from keras_xla.tf_backend.cache_entry import MEMORY, in_memory, size

CACHE_FLAG = "tf_xla_persistent_cache_directory"
ENTRY_PATTERN = "xla_compile_cache__*.pb"
PREFIX = "keras_xla_ledger_"
OFF_VARIABLE = "KERAS_XLA_LEDGER"
# The most the in-memory ledger holds; the oldest entries go first.
BUDGET_BYTES = 256 << 20
MAX_ENTRIES = 64


@dataclasses.dataclass
class LedgerStatus:
    """Whether XLA's compilations are recorded, where, and why not."""

    directory: str | None
    owned: bool
    reason: str
    # What the user can do about `reason`.
    fix: str = ""
    # TF_XLA_FLAGS as the user set it, before `install()` added the flag.
    user_flags: str | None = None
    # TF_XLA_FLAGS as `install()` left it (None: not changed).
    set_flags: str | None = None


def _off(reason: str, fix: str = "") -> LedgerStatus:
    """No ledger, and why."""
    return LedgerStatus(None, False, reason, fix)


_STATUS = _off(
    "keras_xla was not imported with TensorFlow as the Keras backend"
)
# In-memory entries: path -> (first listed at, size in bytes).
_SEEN: dict[str, tuple[float, int]] = {}
# How many names the in-memory ledger held at the last `stamp()`.
_LISTED = -1
# How many entries `stamp()` has found in all (pruning never lowers it).
_WRITTEN = 0


def tensorflow_started() -> bool:
    """Whether TensorFlow has already read its flags (listed devices)."""
    if "tensorflow" not in sys.modules:
        return False
    from tensorflow.python.eager import context

    return bool(context.context()._initialized)


def install(environ=None) -> LedgerStatus:
    """Makes sure XLA's compilations are recorded; see the module
    docstring. Never raises."""
    global _STATUS
    environ = os.environ if environ is None else environ
    user_flags = environ.get("TF_XLA_FLAGS")
    try:
        _STATUS = _install(environ)
    except Exception as error:  # noqa: BLE001 - never break an import
        _STATUS = _off(
            f"it could not be set up ({type(error).__name__}: {error})",
            "Nothing to do: training is not affected.",
        )
    _STATUS.user_flags = user_flags
    return _STATUS


def _install(environ) -> LedgerStatus:
    if environ.get(OFF_VARIABLE) == "0":
        return _off(
            f"{OFF_VARIABLE}=0 turned it off",
            f"Unset {OFF_VARIABLE} to record them.",
        )
    user = environ.get("TF_XLA_FLAGS", "")
    flags = flags_lib.parse_flags(user)
    existing = next(
        (f.value for f in flags if f.name == CACHE_FLAG and f.value), None
    )
    inherited = existing is not None and _is_other_process_ledger(existing)
    if existing and not inherited:
        return LedgerStatus(existing, False, "")
    if tensorflow_started():
        return _off(
            "TensorFlow had started (run an op) before keras_xla was "
            "imported, so XLA's compilations are not recorded",
            "Import keras_xla before TensorFlow runs its first op.",
        )
    if inherited:
        user = flags_lib.without_flag(user, f"--{CACHE_FLAG}={existing}")
    if not flags_lib.extensible(user):
        return _off(
            "TF_XLA_FLAGS holds quotes that keras_xla cannot extend "
            "without changing how TensorFlow reads them, so it is left "
            "as it is",
            "Remove the quotes from TF_XLA_FLAGS.",
        )
    directory = f"{MEMORY}{PREFIX}{os.getpid()}"
    value = f"{user.strip()} --{CACHE_FLAG}={directory}".strip()
    environ["TF_XLA_FLAGS"] = value
    return LedgerStatus(directory, True, "", set_flags=value)


def _is_other_process_ledger(directory: str) -> bool:
    name = os.path.basename(os.path.normpath(directory.removeprefix(MEMORY)))
    if not name.startswith(PREFIX):
        return False
    return name.removeprefix(PREFIX).split("_")[0] != str(os.getpid())


def release_environment(environ=None) -> bool:
    """Gives `TF_XLA_FLAGS` back as the user set it, once TensorFlow has
    read it, so subprocesses inherit the user's value; a value the user
    changed since is left alone. Returns whether it was given back."""
    environ = os.environ if environ is None else environ
    if _STATUS.set_flags is None or not tensorflow_started():
        return False
    if environ.get("TF_XLA_FLAGS") == _STATUS.set_flags:
        if _STATUS.user_flags is None:
            del environ["TF_XLA_FLAGS"]
        else:
            environ["TF_XLA_FLAGS"] = _STATUS.user_flags
    _STATUS.set_flags = None
    return True


def status() -> LedgerStatus:
    """The ledger of this process: its directory, or why there is none; a
    cache directory set before TensorFlow started and verified in force
    (`enable_compile_cache` with the ledger off) replaces it."""
    return _STATUS


def use_directory(directory: str) -> None:
    """Records that `directory` is now the cache directory in force."""
    global _STATUS
    _STATUS = dataclasses.replace(
        _STATUS, directory=directory, owned=False, reason="", fix=""
    )


def user_environment(environ=None) -> dict[str, str | None]:
    """`TF_XLA_FLAGS` and `XLA_FLAGS` as the user set them (without the
    ledger's own flag)."""
    environ = os.environ if environ is None else environ
    values = {v: environ.get(v) for v in flags_lib.VARIABLES}
    if _STATUS.owned:
        values["TF_XLA_FLAGS"] = _STATUS.user_flags
    return values


def stamp(now: float | None = None) -> None:
    """Lists the in-memory ledger: entries not seen before are dated
    `now` (the end of the step call that wrote them); then the oldest
    entries are removed while the ledger holds more than `BUDGET_BYTES`
    or `MAX_ENTRIES`. Called after every step call, so its common case
    (nothing new: the listing has as many names as the last one) costs
    one listing of the directory and a length check; a no-op for a
    ledger on disk, whose files carry their own times."""
    global _LISTED, _WRITTEN
    directory = _STATUS.directory
    if not _STATUS.owned or not in_memory(directory):
        return
    if _STATUS.set_flags is not None:
        release_environment()  # a step ran: TensorFlow read its flags
    names = _listing(directory)
    if len(names) == _LISTED:
        return
    now = time.time() if now is None else now
    present = {
        _path(directory, n) for n in fnmatch.filter(names, ENTRY_PATTERN)
    }
    for path in [p for p in _SEEN if p not in present]:
        del _SEEN[path]  # removed by someone else (a cache's clear)
    for path in present.difference(_SEEN):
        _SEEN[path] = (now, size(path))
        _WRITTEN += 1
    total = sum(s for _, s in _SEEN.values())
    for path, (_, nbytes) in sorted(_SEEN.items(), key=lambda kv: kv[1]):
        if total <= BUDGET_BYTES and len(_SEEN) <= MAX_ENTRIES:
            break
        remove(path)
        total -= nbytes
    _LISTED = len(_listing(directory))


def written() -> int | None:
    """How many compilations the in-memory ledger has recorded in this
    process, listed now (one listing of its directory when nothing is
    new); None where there is no such ledger."""
    if not _STATUS.owned or not in_memory(_STATUS.directory):
        return None
    stamp()
    return _WRITTEN


def _listing(directory: str) -> list[str]:
    from tensorflow.python.lib.io import _pywrap_file_io

    try:
        return _pywrap_file_io.GetChildren(directory)
    except Exception:  # noqa: BLE001 - not created yet: no compilation
        return []


def _path(directory: str, name: str) -> str:
    return directory.rstrip("/") + "/" + name


def entries(directory: str) -> dict[str, float]:
    """The ledger's (or a cache directory's) entry files and their times:
    modification times on disk, first-listed times in memory."""
    if in_memory(directory):
        if directory == _STATUS.directory and _STATUS.owned:
            stamp()
            return {p: t for p, (t, _) in _SEEN.items()}
        now = time.time()
        names = fnmatch.filter(_listing(directory), ENTRY_PATTERN)
        return {_path(directory, n): now for n in names}
    out = {}
    for path in glob.glob(os.path.join(glob.escape(directory), ENTRY_PATTERN)):
        with contextlib.suppress(OSError):  # removed meanwhile
            out[path] = os.lstat(path).st_mtime
    return out


def entries_since(directory: str, start: float) -> list[str]:
    """Entries written from Unix time `start` on, oldest first."""
    found = [
        (t, path) for path, t in entries(directory).items() if t >= start - 0.05
    ]
    return [path for _, path in sorted(found)]


def remove(path: str) -> None:
    """Removes an entry (`cache_entry.remove`), keeping `stamp()`'s count
    true: a removal and a compilation between two stamps would otherwise
    look like no change."""
    global _LISTED
    cache_entry.remove(path)
    if in_memory(path) and _SEEN.pop(path, None) is not None:
        _LISTED -= 1


def remove_stale_ledgers(directory: str | None = None) -> list[str]:
    """Removes on-disk ledgers that earlier versions of keras_xla left in
    the temporary directory when their process was killed: directories
    named `keras_xla_ledger_<pid>_*` owned by this user, not links, whose
    process is gone. Returns the paths removed; never raises."""
    directory = directory or tempfile.gettempdir()
    removed = []
    # glob lists what it can read: an unreadable directory yields nothing.
    for path in glob.glob(os.path.join(glob.escape(directory), f"{PREFIX}*_*")):
        pid = os.path.basename(path).removeprefix(PREFIX).split("_")[0]
        try:
            info = os.lstat(path)
            if (
                not pid.isdigit()
                or not os.path.isdir(path)
                or os.path.islink(path)
                or info.st_uid != os.getuid()
                or _alive(int(pid))
            ):
                continue
            shutil.rmtree(path)
        except OSError:
            continue
        removed.append(path)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # exists, owned by someone else
    return True
