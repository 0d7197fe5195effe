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

TensorFlow reads `TF_XLA_FLAGS` once, when it first lists devices (at its
first op). Setting it later, even after `import tensorflow`, works until
then; after it the flag silently does nothing. `enable_compile_cache()`
therefore checks with a tiny canary compilation that entries appear.
"""

from __future__ import annotations

import dataclasses
import json
import os
import statistics

from keras_xla.core.report import CompileCacheSection
from keras_xla.tf_backend import compile_ledger

CACHE_FLAG = compile_ledger.CACHE_FLAG
ENTRY_PATTERN = compile_ledger.ENTRY_PATTERN


@dataclasses.dataclass(frozen=True)
class CacheStatus:
    """Whether the persistent cache is in force for this process.

    Attributes:
        directory: The cache directory.
        active: Whether a compilation now writes entries there.
        entries: Entries found when the cache was enabled.
        message: One sentence saying what was found and what to do.
    """

    directory: str
    active: bool
    entries: int
    message: str


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
        try:
            os.remove(os.path.join(directory, name))
            removed += 1
        except FileNotFoundError:
            continue
    return removed


def enable_compile_cache(directory: str, verify: bool = True) -> CacheStatus:
    """Turns on XLA's persistent compile cache for this process.

    Call it before TensorFlow's first op in the process (before the
    first `fit` with XLA). It sets the flag in `TF_XLA_FLAGS`, keeping the
    user's other flags, then (with `verify=True`) compiles a tiny canary
    function and checks that a cache entry appears; the canary's entry is
    removed again.

    Args:
        directory: Where entries go; created if missing.
        verify: Run the canary check. Defaults to `True`.

    Returns:
        A `CacheStatus`; `active=False` means XLA had already compiled in
        this process, so the flag came too late.
    """
    if not isinstance(directory, (str, os.PathLike)) or not str(directory):
        raise ValueError(
            f"Unsupported value `compile_cache={directory!r}`: pass a "
            "directory path."
        )
    from keras_xla.tf_backend.flags import with_flag

    directory = os.path.abspath(os.fspath(directory))
    os.makedirs(directory, exist_ok=True)
    previous = os.environ.get("TF_XLA_FLAGS")
    os.environ["TF_XLA_FLAGS"] = with_flag(
        previous or "", CACHE_FLAG, directory
    )
    existing = len(cache_entries(directory))
    if not verify:
        return CacheStatus(
            directory, True, existing, "Cache flag set (not verified)."
        )
    active = _canary_writes_entry(directory)
    if active:
        compile_ledger.use_directory(directory)
        message = (
            f"XLA persistent compile cache active in {directory} "
            f"({existing} entries found)."
        )
    else:
        message = (
            "The XLA compile cache flag came too late: TensorFlow reads "
            "TF_XLA_FLAGS once, at its first op, and had run one already "
            "in this process. Construct XLATuner(compile_cache=...) or call "
            "keras_xla.enable_compile_cache() before building the model, "
            "or set TF_XLA_FLAGS before starting Python."
        )
        # The flag is not in force: leave the variable as TensorFlow read
        # it, so it does not claim a cache this process does not have.
        if previous is None:
            del os.environ["TF_XLA_FLAGS"]
        else:
            os.environ["TF_XLA_FLAGS"] = previous
    return CacheStatus(directory, active, existing, message)


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
        try:
            os.remove(os.path.join(directory, name))
        except OSError:
            pass
    return bool(new)


def label_cache_use(compilations, before: dict[str, float], directory: str):
    """Marks each compilation as a cache `"hit"` or `"miss"`.

    A miss writes a new entry while its step runs; a hit reads one and
    writes nothing. `compilations` are report `Compilation`s with
    `started_at` and `finished_at` (Unix times); `before` is
    `cache_entries()` from before they ran. Entries are matched to the
    compilation whose step window holds their modification time.
    """
    new_times = sorted(
        mtime
        for name, mtime in cache_entries(directory).items()
        if name not in before or mtime > before[name]
    )
    for c in compilations:
        window = (c.started_at - 0.05, c.finished_at + 0.5)
        hit = next((t for t in new_times if window[0] <= t <= window[1]), None)
        if hit is None:
            c.cache = "hit"
        else:
            c.cache = "miss"
            new_times.remove(hit)
    return compilations


TIMES_FILE = "keras_xla_compile_times.json"


def record_compile_times(directory: str, compile_log) -> dict:
    """Remembers each signature's compile time on a miss, and says what
    the hits saved.

    Misses' compile seconds are kept per signature (function and input
    shapes) in `<directory>/keras_xla_compile_times.json`, beside the
    cache's entries, so a restarted run can compare its hits with the
    compilation they replaced.

    Returns:
        `seconds_saved` (sum over hits of the signature's miss time minus
        the hit's time), `miss_median_seconds` and `hit_median_seconds`.
    """
    path = os.path.join(directory, TIMES_FILE)
    known = _read_times(path)
    fresh = {
        _signature_key(c): c.compile_seconds
        for c in compile_log
        if c.cache == "miss"
    }
    if fresh:
        known = {**_read_times(path), **fresh}  # re-read: workers share it
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(known, f, indent=1, sort_keys=True)
        os.replace(tmp, path)
    hits = [c for c in compile_log if c.cache == "hit"]
    saved = sum(
        max(known[_signature_key(c)] - c.compile_seconds, 0.0)
        for c in hits
        if _signature_key(c) in known
    )
    miss_times = [
        known[k] for k in {_signature_key(c) for c in hits} if k in known
    ] or list(fresh.values())
    return {
        "seconds_saved": round(saved, 3),
        "miss_median_seconds": _median(miss_times),
        "hit_median_seconds": _median([c.compile_seconds for c in hits]),
    }


def _signature_key(compilation) -> str:
    return json.dumps(
        [compilation.function, compilation.shapes], sort_keys=True
    )


def _read_times(path: str) -> dict:
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def _median(values) -> float | None:
    return round(statistics.median(values), 4) if values else None


def start_section(status: CacheStatus) -> CompileCacheSection:
    """The report's `compile_cache` section at the start of a fit."""
    return CompileCacheSection(
        directory=status.directory,
        active=status.active,
        entries_at_start=status.entries,
    )


INACTIVE_FIX = (
    "Create the XLATuner (or call keras_xla.enable_compile_cache) before "
    "the first fit."
)


def label_stats(report, stats, before: dict[str, float], directory: str):
    """`label_epoch` for the epoch of `stats` (an `EpochStats`), whose
    hit and miss counts it sets."""
    stats.compile_cache_hits, stats.compile_cache_misses = label_epoch(
        report.compile_cache,
        stats.epoch,
        report.compile_log,
        before,
        directory,
    )


def label_epoch(
    section: CompileCacheSection,
    epoch: int,
    compile_log: list,
    before: dict[str, float],
    directory: str,
) -> tuple[int, int]:
    """Labels the compilations of `epoch` in `compile_log` (the fit's)
    hit or miss, adds them to `section` with what the hits saved; returns
    the epoch's `(hits, misses)`."""
    compiled = [c for c in compile_log if c.epoch == epoch]
    label_cache_use(compiled, before, directory)
    hits = sum(c.cache == "hit" for c in compiled)
    misses = sum(c.cache == "miss" for c in compiled)
    section.hits += hits
    section.misses += misses
    for key, value in record_compile_times(directory, compile_log).items():
        setattr(section, key, value)
    return hits, misses
