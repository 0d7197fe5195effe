"""Pay XLA's compile time once: TensorFlow's persistent compile cache.

Every new process pays XLA's compile time again: a restarted job, each
worker of a multi-worker run, each hyperparameter trial. TensorFlow can
keep compiled executables on disk when `TF_XLA_FLAGS` holds
`--tf_xla_persistent_cache_directory=DIR`:

- Where: one file per compiled signature, named
  `xla_compile_cache__<key>__<key>__<DEVICE>_JIT.pb` (e.g. `XLA_CPU_JIT`),
  a few hundred KB to several MB each.
- Keyed by: the compiled cluster (its HLO, so the shapes and dtypes of the
  signature) and the device type; entries written by another TensorFlow
  version or machine are not reused.
- Clearing: delete the files (or the directory); `clear_compile_cache()`
  does that.
- Sharing: a directory readable and writable by several processes serves
  them all, e.g. the workers of a multi-worker run or parallel trials.

The cache serves the process through the in-memory compile ledger (set at
`import keras_xla`): its entries are copied in (hits), and the entries this
process compiled are copied back out at every epoch end and at exit.
TensorFlow itself never writes to the directory, so a full disk costs the
cache, never a step. Only a directory this user alone can write is used,
entry by entry the same (`core.cache_directory.untrusted`): TensorFlow runs
what an entry holds, so an entry planted by someone else would run in place
of the user's step. `trust_shared=True` uses a shared directory the user
trusts. Corrupt entries are set aside (`cache_entries`) before TensorFlow
can load them. With the ledger off (`KERAS_XLA_LEDGER=0`) and TensorFlow
not yet started, the flag names the directory itself; TensorFlow then
writes there, and fails a step it cannot write.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import os
import shutil

from keras_xla.core import cache_directory
from keras_xla.core.cache_directory import CacheStatus
from keras_xla.tf_backend import cache_entries as entries_lib
from keras_xla.tf_backend import cache_entry, compile_ledger
from keras_xla.tf_backend import flags as flags_lib


def cache_entries(directory: str) -> dict[str, float]:
    """The cache's entry file names and their modification times."""
    return {
        os.path.basename(path): mtime
        for path, mtime in compile_ledger.entries(directory).items()
    }


def clear_compile_cache(directory: str) -> int:
    """Deletes the cache's entries; returns how many were removed."""
    removed = 0
    for name in cache_entries(directory):
        with contextlib.suppress(FileNotFoundError):
            os.remove(os.path.join(directory, name))
            removed += 1
    return removed


def enable_compile_cache(
    directory: str, verify: bool = True, trust_shared: bool = False
) -> CacheStatus:
    """Turns on XLA's persistent compile cache for this process.

    Works in any script order once `keras_xla` was imported before
    TensorFlow ran an op: the cache is mirrored through the in-memory
    compile ledger (see the module docstring). With the ledger off and
    TensorFlow not yet started, it sets the flag in `TF_XLA_FLAGS`,
    keeping the user's other flags, then (with `verify=True`) compiles a
    tiny canary function and checks that a cache entry appears. Corrupt
    entries are renamed `<name>.corrupt` first.

    Args:
        directory: Where entries go; created (mode 700) if missing.
        verify: Run the canary check. Defaults to `True`.
        trust_shared: Use the directory even if another user owns it or
            can write it (a cache shared by a team). Defaults to `False`:
            such a directory is not used, since TensorFlow runs what its
            entries hold.

    Returns:
        A `CacheStatus`; `active=False` says why the cache is not in force
        (the directory cannot be created, others can write it, or
        TensorFlow started before keras_xla was imported and the ledger is
        off). Raises `ValueError` if `directory` is not a path or is a
        file.
    """
    directory, failed = cache_directory.open_directory(directory)
    if failed is not None:
        return failed
    why = None if trust_shared else cache_directory.untrusted(directory, True)
    if why is not None:
        return cache_directory.refused(directory, why, "TensorFlow")
    can_write = entries_lib.writable(directory)
    aside = tuple(entries_lib.set_aside(directory)) if can_write else ()
    existing = len(cache_entries(directory))
    ledger = compile_ledger.status()
    memory = ledger.directory
    if ledger.owned and cache_entry.in_memory(memory):
        # Served through the in-memory ledger: the cache's entries copied
        # in now, the ones this process compiles under it copied out later.
        entries_lib.claim(directory, memory)
        copied, left_out = entries_lib.copy_in(directory, memory, trust_shared)
        if can_write:
            atexit.register(_save_at_exit, memory, directory, os.getpid())
        saved = (
            "new ones are saved there at every epoch end"
            if can_write
            else "it cannot be written, so new compilations are not saved"
        )
        message = (
            f"XLA persistent compile cache active in {directory} "
            f"({len(copied)} of {existing} entries loaded; {saved})."
        )
        return CacheStatus(
            directory, True, existing, message, memory, can_write, aside,
            tuple(left_out),
        )  # fmt: skip
    status = functools.partial(_status, directory, existing, aside)
    if ledger.directory is not None:
        if os.path.abspath(ledger.directory) == directory:
            return status(
                f"XLA persistent compile cache active in {directory}.", True
            )
        return status(
            f"TF_XLA_FLAGS names another compile cache directory, "
            f"{ledger.directory}, and TensorFlow uses that one."
        )
    if can_write and not compile_ledger.tensorflow_started():
        return _set_flag(directory, existing, status, verify)
    return status(
        "The XLA compile cache flag came too late: TensorFlow reads "
        "TF_XLA_FLAGS once, at its first op, and had run one already in "
        "this process, and the compile ledger is off "
        f"({ledger.reason}). Import keras_xla before "
        "TensorFlow runs an op, or set TF_XLA_FLAGS before starting Python."
    )


def _status(directory, existing, aside, message, active=False) -> CacheStatus:
    """A cache TensorFlow writes to itself where `active`; `aside`: the
    corrupt entries set aside."""
    return CacheStatus(directory, active, existing, message, "", True, aside)


def _save_at_exit(ledger: str, directory: str, pid: int) -> None:
    # A forked child inherits the handler; only the process that enabled
    # the cache saves to it.
    if os.getpid() == pid:
        entries_lib.copy_out(ledger, directory)


def _set_flag(directory, existing, status, verify) -> CacheStatus:
    """Before TensorFlow starts: the flag names `directory`; a canary
    compilation checks that entries appear there."""
    previous = os.environ.get("TF_XLA_FLAGS")
    problem = _flag_problem(directory, previous or "")
    if problem:
        return status(
            f"The XLA compile cache in {directory} is off: {problem}."
        )
    os.environ["TF_XLA_FLAGS"] = flags_lib.with_flag(
        previous or "", compile_ledger.CACHE_FLAG, directory
    )
    if not verify:
        return status("Cache flag set (not verified).", True)
    try:
        active, problem = _canary_writes_entry(directory), ""
    except Exception as error:  # noqa: BLE001 - never stop the user
        active, problem = False, f" ({type(error).__name__}: {error})"
    if active:
        compile_ledger.use_directory(directory)
        return status(
            f"XLA persistent compile cache active in {directory} "
            f"({existing} entries found).",
            True,
        )
    # The flag is not in force: leave the variable as TensorFlow read it,
    # so it does not claim a cache this process does not have.
    if previous is None:
        del os.environ["TF_XLA_FLAGS"]
    else:
        os.environ["TF_XLA_FLAGS"] = previous
    return status(
        f"The XLA compile cache in {directory} did not take effect: its "
        f"canary compilation wrote no entry{problem}."
    )


def _flag_problem(directory: str, flags: str) -> str | None:
    """Why the flag must not name `directory`: TensorFlow then writes
    there itself, and fails the step whose entry it cannot write."""
    if not flags_lib.extensible(flags):
        return "TF_XLA_FLAGS holds quotes keras_xla cannot extend safely"
    free = shutil.disk_usage(directory).free
    if free < entries_lib.MIN_FREE_BYTES:
        return (
            f"its disk has {free >> 20} MiB free; with the compile ledger "
            "off TensorFlow writes the cache itself and would fail a step "
            "on a full disk"
        )
    return None


def _canary_writes_entry(directory: str) -> bool:
    import tensorflow as tf

    before = set(cache_entries(directory))
    # A shape unique to this process, so the canary is never a cache hit.
    size = 1 + (os.getpid() % 9973) + 9973 * (hash(directory) % 7)
    canary = tf.function(lambda x: x * 2.0 + 1.0, jit_compile=True)
    with tf.init_scope():
        canary(tf.zeros([size], tf.float32)).numpy()
    new = set(cache_entries(directory)) - before
    for name in new:
        with contextlib.suppress(OSError):
            os.remove(os.path.join(directory, name))
    return bool(new)


INACTIVE_FIX = (
    "Create the XLATuner (or call keras_xla.enable_compile_cache) before "
    "the first fit."
)


def setup_findings(status: CacheStatus | None) -> list[tuple]:
    """`(code, message, fix, place)` for the cache at a fit's start: not
    in force, corrupt entries set aside, read only. Corrupt entries of a
    cache the user set in `TF_XLA_FLAGS` (the ledger's directory, not this
    module's) are set aside here too, before the fit's first compilation
    can load them."""
    from keras_xla.core import findings

    out, aside = [], []
    if status is not None:
        aside = [(status.directory, n) for n in status.set_aside]
        out += cache_directory.status_findings(status, INACTIVE_FIX)
    if status is not None and status.left_out:
        names = "; ".join(f"{n}: {why}" for n, why in status.left_out)
        out += [(
            findings.COMPILE_CACHE_UNTRUSTED,
            f"{len(status.left_out)} compile cache entries in "
            f"{status.directory} were not loaded ({names}); their "
            "signatures compile afresh.",
            "Delete those files, or pass "
            "XLATuner(trust_shared_cache=True) if you trust everyone "
            "who can write them (links are never followed).",
        )]  # fmt: skip
    ledger = compile_ledger.status()
    if ledger.directory is None:
        out += [(
            findings.COMPILE_LEDGER_OFF,
            f"XLA's compilations are not recorded: {ledger.reason}. The "
            "HLO analysis and auto-clustering's counts need them.",
            ledger.fix,
        )]  # fmt: skip
    if ledger.directory and not ledger.owned:
        moved = entries_lib.set_aside(ledger.directory)
        aside += [(ledger.directory, n) for n in moved]
    for directory, name in aside:
        out += [(
            findings.COMPILE_CACHE_CORRUPT,
            f"The compile cache entry {os.path.join(directory, name)} is "
            "not a valid XLA cache entry (a link, empty, truncated or "
            f"damaged), so it was renamed {name}{entries_lib.CORRUPT_SUFFIX}"
            ": TensorFlow would have failed the step that loads it.",
            "Nothing to do: the signature compiles again and its new entry "
            "replaces it. Delete the .corrupt file when done.",
        )]  # fmt: skip
    return [(*finding, (finding[1],)) for finding in out]
