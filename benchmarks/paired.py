"""Side-by-side timing of two training configurations in one process.

Step times on a small shared CPU drift by tens of percent over seconds, so
configurations are timed in pairs of short `fit` calls, the order
alternating within each pair, and compared three ways: the median of the
per-pair ratios (drift that hits both halves of a pair cancels), the ratio
of their 25th percentiles, and the ratio of their fastest fits (noise only
ever adds time). On a 2-core machine some whole fits run in a slow mode of
about 6 ms per step, with any configuration, when XLA's worker threads,
tf.data and Python contend for two cores; the script counts them.
"""

import os
import platform
import statistics
import time

import numpy as np
import tensorflow as tf


def conv_dataset(batch_size, seed=0):
    """A repeated, cached dataset of (64, 16) sequences and scalar targets."""
    rng = np.random.default_rng(seed)
    n = 64 * batch_size
    x = rng.random((n, 64, 16), dtype=np.float32)
    y = rng.random((n, 1), dtype=np.float32)
    return (
        tf.data.Dataset.from_tensor_slices((x, y))
        .batch(batch_size, drop_remainder=True)
        .cache()
        .repeat()
        .prefetch(2)
    )


def time_pairs(runs, pairs):
    """Calls each of the two `runs` (name -> callable) once to warm up,
    then `pairs` times each, alternating the order; returns name -> list of
    seconds."""
    names = list(runs)
    for run in runs.values():
        run()
    times = {name: [] for name in names}
    for i in range(pairs):
        for name in names if i % 2 == 0 else reversed(names):
            start = time.perf_counter()
            runs[name]()
            times[name].append(time.perf_counter() - start)
    return times


def report(times, steps, baseline, candidate):
    """Prints per-config ms/step and the candidate/baseline ratios."""
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} cores, "
        f"{platform.processor() or 'cpu'}"
    )
    fastest = min(min(v) for v in times.values())
    for name, values in times.items():
        ms = sorted(v / steps * 1000 for v in values)
        slow = sum(v > 1.7 * fastest for v in values)
        print(
            f"{name:12} ms/step: p25 {ms[len(ms) // 4]:.3f}, median "
            f"{statistics.median(ms):.3f}; slow-mode fits {slow}/{len(ms)}"
        )
    ratios = [c / b for c, b in zip(times[candidate], times[baseline])]
    p25 = {k: sorted(v)[len(v) // 4] for k, v in times.items()}
    median_ratio = statistics.median(ratios)
    p25_ratio = p25[candidate] / p25[baseline]
    min_ratio = min(times[candidate]) / min(times[baseline])
    print(
        f"{candidate} / {baseline}: median per-pair ratio "
        f"{median_ratio:.4f}; p25 ratio {p25_ratio:.4f}; best-fit ratio "
        f"{min_ratio:.4f}"
    )
    return median_ratio, p25_ratio, min_ratio
