"""Side-by-side timing of training configurations in one process.

Step times on a small shared CPU drift by tens of percent over seconds, so
configurations are timed in rounds of short `fit` calls, one per
configuration per round, the order rotating from round to round. They are
compared three ways: the median of the per-round ratios (drift that hits a
whole round cancels), the ratio of their 25th percentiles, and the ratio
of their fast-mode medians (below).

On a 2-core machine whole fits fall at random into a slow mode where every
step takes one scheduler tick (about 4.2 ms here, the same for every
configuration and every model, with the same CPU time per step as a fast
fit: threads wait for a core). Which fits fall into it is noise, and it
swamps a 2% difference, so each fit is classed as fast or slow, the fast
fits are compared on their own, so are the rounds whose fits ran in the
same mode, and the slow-mode counts are compared with Fisher's exact
test. An identical copy of the baseline (`control`) runs as a third
configuration: its ratios show the noise floor.
"""

import math
import os
import platform
import statistics
import time

import numpy as np
import tensorflow as tf

# A fit is in the slow mode when its steps take this much longer than the
# fastest fit's.
SLOW_FACTOR = 1.5


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


def time_pairs(runs, rounds):
    """Calls each of `runs` (name -> callable) once to warm up, then
    `rounds` times each, one call of each per round, the order rotating;
    returns name -> list of seconds, index = round."""
    names = list(runs)
    for run in runs.values():
        run()
    times = {name: [] for name in names}
    for i in range(rounds):
        shift = i % len(names)
        for name in names[shift:] + names[:shift]:
            start = time.perf_counter()
            runs[name]()
            times[name].append(time.perf_counter() - start)
    return times


def fisher_exact(a, n_a, b, n_b):
    """Two-sided p-value of Fisher's exact test for `a` of `n_a` against
    `b` of `n_b`."""
    k, n = a + b, n_a + n_b

    def probability(x):
        return math.comb(n_a, x) * math.comb(n_b, k - x) / math.comb(n, k)

    observed = probability(a)
    low, high = max(0, k - n_b), min(k, n_a)
    return min(
        1.0,
        sum(
            probability(x)
            for x in range(low, high + 1)
            if probability(x) <= observed * (1 + 1e-9)
        ),
    )


def report(times, steps, baseline, candidates):
    """Prints per-config ms/step and each candidate/baseline ratio; returns
    {candidate: (median per-round ratio, p25 ratio, fast-mode ratio)}."""
    if isinstance(candidates, str):
        candidates = [candidates]
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} cores, "
        f"{platform.processor() or 'cpu'}"
    )
    ms = {k: [v / steps * 1000 for v in vs] for k, vs in times.items()}
    limit = SLOW_FACTOR * min(min(v) for v in ms.values())
    fast = {k: [x for x in v if x <= limit] for k, v in ms.items()}
    for name, values in ms.items():
        ordered = sorted(values)
        fast_median = (
            f"{statistics.median(fast[name]):.3f}" if fast[name] else "-"
        )
        print(
            f"{name:12} ms/step: p25 {ordered[len(ordered) // 4]:.3f}, "
            f"median {statistics.median(ordered):.3f}, fast-mode median "
            f"{fast_median}; slow-mode fits "
            f"{len(values) - len(fast[name])}/{len(values)}"
        )
    results = {}
    base = ms[baseline]
    for name in candidates:
        values = ms[name]
        ratios = [c / b for c, b in zip(values, base)]
        p25 = sorted(values)[len(values) // 4] / sorted(base)[len(base) // 4]
        fast_ratio = (
            statistics.median(fast[name]) / statistics.median(fast[baseline])
            if fast[name] and fast[baseline]
            else float("nan")
        )
        p_slow = fisher_exact(
            len(values) - len(fast[name]),
            len(values),
            len(base) - len(fast[baseline]),
            len(base),
        )
        # Rounds where both fits ran in the same mode: a mode flip inside
        # a round is scheduling noise, not cost.
        matched = [
            c / b for c, b in zip(values, base) if (c <= limit) == (b <= limit)
        ]
        matched_ratio = statistics.median(matched) if matched else math.nan
        results[name] = (statistics.median(ratios), p25, fast_ratio)
        print(
            f"{name} / {baseline}: median per-round ratio "
            f"{results[name][0]:.4f}; same-mode rounds "
            f"{matched_ratio:.4f} ({len(matched)} of {len(ratios)}); p25 "
            f"ratio {p25:.4f}; fast-mode median ratio {fast_ratio:.4f}; "
            f"slow-mode count difference p = {p_slow:.2f} (Fisher)"
        )
    return results
