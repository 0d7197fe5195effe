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
    """Keeps each miss's compile seconds per signature (function and
    input shapes) in `directory`'s `TIMES_FILE`, beside the cache's
    entries; returns `seconds_saved` (over the hits, the signature's miss
    time less the hit's), `miss_median_seconds` and `hit_median_seconds`."""
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
    """Labels the compilations of the epoch of `stats` (an `EpochStats`)
    hit or miss from the entries where TensorFlow writes, sets the epoch's
    counts and adds them to the report's `compile_cache` section, with
    what the hits saved where the cache is persisted (compile times kept
    in its directory); a mirrored cache's new entries are then saved to
    its directory. Returns why they could not all be saved (a full disk),
    or None."""
    section = report.compile_cache
    compiled = [c for c in report.compile_log if c.epoch == stats.epoch]
    label_cache_use(compiled, before, status.live_directory)
    stats.compile_cache_hits = sum(c.cache == "hit" for c in compiled)
    stats.compile_cache_misses = sum(c.cache == "miss" for c in compiled)
    section.hits += stats.compile_cache_hits
    section.misses += stats.compile_cache_misses
    if status.persist:
        times = record_compile_times(status.directory, report.compile_log)
        for key, value in times.items():
            setattr(section, key, value)
    if status.live and status.persist:
        return entries_lib.copy_out(status.live, status.directory)[1]
    return None
