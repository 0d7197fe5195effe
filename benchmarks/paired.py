"""Side-by-side timing of training configurations in one process.

Step times on a small shared CPU drift by tens of percent over seconds, so
configurations are timed in rounds of short `fit` calls, one per
configuration per round, the order running through every permutation, and
compared by the median of the per-round ratios (drift that hits a whole
round cancels) and by the ratio of their 25th percentiles.

Each fit is measured two ways. Its steady-state step time is the median
interval between consecutive train batch begins, taken by a `StepClock`
callback that every configuration carries: it holds the train function,
Keras's loop and every callback's batch hooks, and nothing that happens
once per fit. Its wall time per step (whole fit over steps) adds the
per-fit work: building the iterator, train begin and end hooks, and the
iterator's teardown.

That teardown can stall. With tf.data autotuning on (the default),
dropping the last reference to an iterator can wait for the autotune
thread's next wake-up; its period starts at 10 ms and doubles, so it
wakes about 10, 30, 70, 150, 310, 630 ms ... after the iterator started.
Keras drops its iterator when `fit` returns, so a fit of about 250 ms
returns, at random, either at once or at about 300 ms; its steps are
untouched. CPU work in callbacks at the end of training makes the stall
more likely (`tfdata_teardown.py`). The clock stamps the train end, so
each fit's teardown time (train end to return) is measured, and
`conv_dataset` turns autotuning off unless asked, which removes the
stall.
"""

import itertools
import math
import os
import platform
import statistics
import time

import keras
import numpy as np
import tensorflow as tf

# A teardown longer than this is counted as a stall.
STALL_MS = 5.0


def conv_dataset(batch_size, seed=0, autotune=False):
    """A repeated, cached dataset of (64, 16) sequences and scalar targets;
    tf.data autotuning off unless `autotune` (see the module docstring)."""
    rng = np.random.default_rng(seed)
    n = 64 * batch_size
    x = rng.random((n, 64, 16), dtype=np.float32)
    y = rng.random((n, 1), dtype=np.float32)
    options = tf.data.Options()
    options.autotune.enabled = autotune
    return (
        tf.data.Dataset.from_tensor_slices((x, y))
        .batch(batch_size, drop_remainder=True)
        .cache()
        .repeat()
        .prefetch(2)
        .with_options(options)
    )


class StepClock(keras.callbacks.Callback):
    """Stamps every train batch begin and the train end. It has no batch
    end hook: one would make Keras run every callback's batch end on the
    main thread, logs converted to Python numbers, instead of on its
    background thread, which changes the step being measured."""

    def on_train_begin(self, logs=None):
        self.stamps = []
        self.train_end = None

    def on_train_batch_begin(self, batch, logs=None):
        self.stamps.append(time.perf_counter())

    def on_train_end(self, logs=None):
        self.train_end = time.perf_counter()

    def step_ms(self):
        """Median interval between batch begins, in ms."""
        return 1e3 * statistics.median(np.diff(self.stamps))


def time_pairs(runs, rounds):
    """`runs` maps a name to a callable that trains once with the callbacks
    it is given. Each is called once to warm up, then `rounds` times, one
    call of each per round, in every order in turn. Returns name -> {"wall":
    seconds, "step_ms": steady-state step ms, "teardown_ms": train end to
    return} lists, index = round. Use a multiple of the number of orders
    (2 for two configurations, 6 for three) as `rounds`."""
    names = list(runs)
    for run in runs.values():
        run([StepClock()])
    times = {
        name: {"wall": [], "step_ms": [], "teardown_ms": []} for name in names
    }
    # Every order in turn: each configuration runs in every position and
    # after every other one equally often (the previous fit's threads and
    # caches are still settling when the next one starts).
    orders = list(itertools.permutations(names))
    for i in range(rounds):
        for name in orders[i % len(orders)]:
            clock = StepClock()
            start = time.perf_counter()
            runs[name]([clock])
            end = time.perf_counter()
            record = times[name]
            record["wall"].append(end - start)
            record["step_ms"].append(clock.step_ms())
            record["teardown_ms"].append(1e3 * (end - clock.train_end))
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


def _ratios(values, base):
    """(median per-round ratio, p25 ratio) of `values` against `base`."""
    per_round = statistics.median(v / b for v, b in zip(values, base))
    p25 = sorted(values)[len(values) // 4] / sorted(base)[len(base) // 4]
    return per_round, p25


def report(times, steps, baseline, candidates):
    """Prints each configuration's step and wall times, teardown stalls,
    and each candidate/baseline ratio; returns {candidate: (steady-state
    step ratio, whole-fit wall ratio)}, both medians of per-round ratios."""
    if isinstance(candidates, str):
        candidates = [candidates]
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} cores, "
        f"{platform.processor() or 'cpu'}"
    )
    stalls = {}
    for name, record in times.items():
        wall = [w / steps * 1e3 for w in record["wall"]]
        stalls[name] = sum(t > STALL_MS for t in record["teardown_ms"])
        print(
            f"{name:12} steady-state step ms: median "
            f"{statistics.median(record['step_ms']):.3f}; wall ms per step: "
            f"median {statistics.median(wall):.3f}; teardown stalls "
            f"(> {STALL_MS:.0f} ms) {stalls[name]}/{len(wall)}"
        )
    results = {}
    base = times[baseline]
    for name in candidates:
        record = times[name]
        step = _ratios(record["step_ms"], base["step_ms"])
        wall = _ratios(record["wall"], base["wall"])
        n = len(record["wall"])
        p_stall = fisher_exact(stalls[name], n, stalls[baseline], n)
        results[name] = (step[0], wall[0])
        print(
            f"{name} / {baseline}: steady-state step time {step[0]:.4f} "
            f"(median per-round ratio; p25 ratio {step[1]:.4f}); whole-fit "
            f"wall time {wall[0]:.4f} (p25 ratio {wall[1]:.4f}); teardown "
            f"stall counts differ with p = {p_stall:.2f} (Fisher)"
        )
    return results
