"""XLA's own record of the compilations of this process.

With `--tf_xla_persistent_cache_directory=DIR` in `TF_XLA_FLAGS`,
TensorFlow writes one entry file for every XLA compilation it runs, for
`jit_compile` steps and auto-clustering's clusters alike (checked against
the profiler: 2 entries for 2 compilations, 5 for auto-clustering's 5). An
entry is an `XlaSerializedCacheEntry`: field 2 the unoptimized
`HloModuleProto`, field 3 the serialized executable, whose field 1.1 is
the optimized `HloModuleProto` XLA ran. So the directory is a ledger that
costs no compilation: the optimized HLO of the train step is read from
it, not compiled again.

TensorFlow reads `TF_XLA_FLAGS` once, when it first lists devices (at its
first op). `install()` runs at `import keras_xla`: if TensorFlow has not
started, and no cache directory is set, it points the flag at a fresh
directory of this process (removed at exit). A cache directory the user
set (`XLATuner(compile_cache=DIR)` before TensorFlow starts, or the flag
itself) serves as the ledger too; its entries are never removed here.
`KERAS_XLA_LEDGER=0` turns this off.
"""

from __future__ import annotations

import atexit
import dataclasses
import glob
import os
import shutil
import sys
import tempfile

from keras_xla.tf_backend import flags as flags_lib

CACHE_FLAG = "tf_xla_persistent_cache_directory"
ENTRY_PATTERN = "xla_compile_cache__*.pb"
PREFIX = "keras_xla_ledger_"
OFF_VARIABLE = "KERAS_XLA_LEDGER"


@dataclasses.dataclass
class LedgerStatus:
    """Whether XLA's compilations are recorded, where, and why not."""

    directory: str | None
    owned: bool
    reason: str
    # TF_XLA_FLAGS as the user set it, before `install()` added the flag.
    user_flags: str | None = None


_STATUS = LedgerStatus(None, False, "keras_xla was not imported")


def tensorflow_started() -> bool:
    """Whether TensorFlow has already read its flags (listed devices)."""
    if "tensorflow" not in sys.modules:
        return False
    from tensorflow.python.eager import context

    return bool(context.context()._initialized)


def flag_directory(environ=None) -> str | None:
    """The persistent cache directory `TF_XLA_FLAGS` names, if any."""
    environ = os.environ if environ is None else environ
    for flag in flags_lib.parse_flags(environ.get("TF_XLA_FLAGS", "")):
        if flag.name == CACHE_FLAG and flag.value:
            return flag.value
    return None


def install(environ=None) -> LedgerStatus:
    """Makes sure XLA's compilations are recorded in a directory; see the
    module docstring. Never raises."""
    global _STATUS
    environ = os.environ if environ is None else environ
    user_flags = environ.get("TF_XLA_FLAGS")
    try:
        _STATUS = _install(environ)
    except Exception as error:  # noqa: BLE001 - never break an import
        _STATUS = LedgerStatus(None, False, f"it could not be set up: {error}")
    _STATUS.user_flags = user_flags
    return _STATUS


def _install(environ) -> LedgerStatus:
    if environ.get(OFF_VARIABLE) == "0":
        return LedgerStatus(None, False, f"{OFF_VARIABLE}=0 turned it off")
    existing = flag_directory(environ)
    inherited = existing is not None and _is_other_process_ledger(existing)
    if tensorflow_started():
        if existing and not inherited:
            return LedgerStatus(existing, False, "")
        return LedgerStatus(
            None,
            False,
            "TensorFlow had started (run an op) before keras_xla was "
            "imported, so XLA's compilations are not recorded",
        )
    if existing and not inherited:
        return LedgerStatus(existing, False, "")
    directory = tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}_")
    environ["TF_XLA_FLAGS"] = flags_lib.with_flag(
        environ.get("TF_XLA_FLAGS", ""), CACHE_FLAG, directory
    )
    atexit.register(shutil.rmtree, directory, True)
    return LedgerStatus(directory, True, "")


def _is_other_process_ledger(directory: str) -> bool:
    name = os.path.basename(os.path.normpath(directory))
    return name.startswith(PREFIX) and not name.startswith(
        f"{PREFIX}{os.getpid()}_"
    )


def status() -> LedgerStatus:
    """The ledger of this process: its directory, or why there is none.

    A cache directory set later and verified in force
    (`enable_compile_cache`) replaces the import-time one.
    """
    return _STATUS


def use_directory(directory: str) -> None:
    """Records that `directory` is now the cache directory in force."""
    global _STATUS
    _STATUS = LedgerStatus(directory, False, "", _STATUS.user_flags)


def user_environment(environ=None) -> dict[str, str | None]:
    """`TF_XLA_FLAGS` and `XLA_FLAGS` as the user set them (without the
    ledger's own flag)."""
    environ = os.environ if environ is None else environ
    values = {v: environ.get(v) for v in flags_lib.VARIABLES}
    if _STATUS.owned:
        values["TF_XLA_FLAGS"] = _STATUS.user_flags
    return values


def entries(directory: str) -> dict[str, float]:
    """The ledger's entry files and their modification times."""
    out = {}
    for path in glob.glob(os.path.join(directory, ENTRY_PATTERN)):
        try:
            out[path] = os.path.getmtime(path)
        except OSError:
            continue  # removed meanwhile
    return out


def entries_between(
    directory: str, start: float, end: float, slack: float = 0.5
) -> list[str]:
    """Entries written between Unix times `start` and `end` (+`slack`:
    the file is closed just after the step that compiled), oldest first."""
    found = [
        (mtime, path)
        for path, mtime in entries(directory).items()
        if start - 0.05 <= mtime <= end + slack
    ]
    return [path for _, path in sorted(found)]


def _fields(data: bytes) -> dict[int, list]:
    """Top-level fields of a protobuf message: number -> values (bytes for
    length-delimited fields, ints for varints)."""
    out: dict[int, list] = {}
    i, n = 0, len(data)
    while i < n:
        key, i = _varint(data, i)
        number, kind = key >> 3, key & 7
        if kind == 0:
            value, i = _varint(data, i)
        elif kind == 2:
            size, i = _varint(data, i)
            value, i = data[i : i + size], i + size
            if i > n:
                raise ValueError("truncated protobuf message")
        elif kind == 1:
            value, i = data[i : i + 8], i + 8
        elif kind == 5:
            value, i = data[i : i + 4], i + 4
        else:
            raise ValueError(f"unsupported protobuf wire type {kind}")
        out.setdefault(number, []).append(value)
    return out


def _varint(data: bytes, i: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        if i >= len(data):
            raise ValueError("truncated varint")
        byte = data[i]
        i += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, i
        shift += 7


def read_modules(path: str) -> tuple[bytes, bytes]:
    """The serialized `(unoptimized, optimized)` `HloModuleProto`s of one
    entry; `ValueError` if the file is not an entry."""
    with open(path, "rb") as f:
        top = _fields(f.read())
    try:
        unoptimized = top[2][0]
        executable = _fields(top[3][0])
        optimized = _fields(executable[1][0])[1][0]
    except (KeyError, IndexError, TypeError) as error:
        raise ValueError(f"{path} is not an XLA cache entry") from error
    return unoptimized, optimized
