"""Which compilations the persistent cache served, and what that saved.

A miss writes a new entry while its step runs; a hit reads one and writes
nothing. Each miss's compile seconds are kept per signature beside the
cache, so a restarted run can compare its hits with the compilations they
replaced.
"""

from __future__ import annotations

import json
import os

from keras_xla.core import cache_home, json_files
from keras_xla.core.report import CompileCacheSection
from keras_xla.core.timing import median_seconds
from keras_xla.tf_backend import cache_entries as entries_lib
from keras_xla.tf_backend.compile_cache import cache_entries


def label_cache_use(compilations, before: dict[str, float], directory: str):
    """Marks each compilation as a cache `"hit"` or `"miss"`.

    `compilations` are report `Compilation`s with `started_at` and
    `finished_at` (Unix times); `before` is `cache_entries()` from before
    they ran. A new entry is matched to the compilation whose step window
    holds its modification time: that one missed.
    """
    new_times = sorted(
        mtime
        for name, mtime in cache_entries(directory).items()
        if name not in before or mtime > before[name]
    )
    for c in compilations:
        window = (c.started_at - 0.05, c.finished_at + 0.5)
        new = next((t for t in new_times if window[0] <= t <= window[1]), None)
        c.cache = "hit" if new is None else "miss"
        if new is not None:
            new_times.remove(new)
    return compilations


TIMES_FILE = "keras_xla_compile_times.json"


def record_compile_times(directory: str, compile_log) -> dict:
    """Remembers each signature's compile time on a miss, and says what
    the hits saved.

    Misses' compile seconds are kept per signature (function and input
    shapes) in `<directory>/keras_xla_compile_times.json`, beside the
    cache's entries.

    Returns:
        `seconds_saved` (sum over hits of the signature's miss time minus
        the hit's time), `miss_median_seconds` and `hit_median_seconds`.
    """
    path = os.path.join(directory, TIMES_FILE)
    known = json_files.read_object(path)
    fresh = {
        _signature_key(c): c.compile_seconds
        for c in compile_log
        if c.cache == "miss"
    }
    if fresh:
        # Under the file's lock: the workers of a run share it.
        try:
            known = json_files.update(path, lambda data: data.update(fresh))
        except OSError as error:  # Kept in memory for this process.
            cache_home.cannot_keep("the compile times", error, home=False)
            known = json_files.read_object(path)
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
        "miss_median_seconds": median_seconds(miss_times),
        "hit_median_seconds": median_seconds([c.compile_seconds for c in hits]),
    }


def _signature_key(compilation) -> str:
    return json.dumps(
        [compilation.function, compilation.shapes], sort_keys=True
    )


def label_stats(report, stats, before: dict[str, float], status) -> str | None:
    """`label_epoch` for the epoch of `stats` (an `EpochStats`), whose
    hit and miss counts it sets; a mirrored cache's new entries are then
    saved to its directory. Returns why they could not all be saved (a
    full disk), or None."""
    stats.compile_cache_hits, stats.compile_cache_misses = label_epoch(
        report.compile_cache,
        stats.epoch,
        report.compile_log,
        before,
        status.live_directory,
        status.directory if status.persist else None,
    )
    if status.live and status.persist:
        return entries_lib.copy_out(status.live, status.directory)[1]
    return None


def label_epoch(
    section: CompileCacheSection,
    epoch: int,
    compile_log: list,
    before: dict[str, float],
    directory: str,
    times_directory: str | None,
) -> tuple[int, int]:
    """Labels the compilations of `epoch` in `compile_log` (the fit's)
    hit or miss from the entries of `directory` (where TensorFlow writes),
    adds them to `section` with what the hits saved (compile times kept in
    `times_directory`; none kept if None); returns the
    epoch's `(hits, misses)`."""
    compiled = [c for c in compile_log if c.epoch == epoch]
    label_cache_use(compiled, before, directory)
    hits = sum(c.cache == "hit" for c in compiled)
    misses = sum(c.cache == "miss" for c in compiled)
    section.hits += hits
    section.misses += misses
    if times_directory is not None:
        times = record_compile_times(times_directory, compile_log)
        for key, value in times.items():
            setattr(section, key, value)
    return hits, misses
