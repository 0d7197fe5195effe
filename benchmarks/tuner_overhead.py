"""XLATuner's overhead on steady-state step time, side by side.

Two identical models with `jit_compile=True`, one trained plainly and one
with `XLATuner`, after a warm-up fit that compiles both. Then pairs of short
`fit` calls (one epoch of `--steps` steps from a repeated dataset), the
order alternating within each pair, each timed around `fit`. Step times on
a small shared CPU drift by tens of percent over seconds, so the figure is
the median of the per-pair ratios: drift that hits both halves of a pair
cancels. It covers all the tuner costs: the probe ops inside the step, the
per-step variable read, per-epoch statistics and summaries.

On a 2-core machine some whole fits run in a slow mode (about 6.2 ms per
step instead of 2.5-3 ms, with or without the tuner: a scheduler tick lost
per step while XLA's worker threads, tf.data and Python share two cores).
The script prints how many fits of each kind hit it, and the ratio of the
25th percentiles, which compares the fast-mode fits.

Run: python benchmarks/tuner_overhead.py [--pairs 40] [--steps 100]
"""

import argparse
import os
import platform
import statistics
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from keras_xla import XLATuner  # noqa: E402


def make_model():
    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [
            keras.Input((64, 16)),
            keras.layers.Conv1D(64, 3, activation="relu"),
            keras.layers.Conv1D(64, 3, activation="relu"),
            keras.layers.GlobalAveragePooling1D(),
            keras.layers.Dense(64, activation="relu"),
            keras.layers.Dense(1),
        ]
    )
    model.compile("adam", "mse", jit_compile=True)
    return model


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--pairs", type=int, default=40)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--batch-size", type=int, default=32)
    args = parser.parse_args()

    rng = np.random.default_rng(0)
    n = 64 * args.batch_size
    x = rng.random((n, 64, 16), dtype=np.float32)
    y = rng.random((n, 1), dtype=np.float32)
    ds = (
        tf.data.Dataset.from_tensor_slices((x, y))
        .batch(args.batch_size, drop_remainder=True)
        .cache()
        .repeat()
        .prefetch(2)
    )

    plain, tuned = make_model(), make_model()
    tuner = XLATuner(verbose=0)
    common = dict(
        epochs=1, steps_per_epoch=args.steps, verbose=0, shuffle=False
    )
    runs = {
        "plain": lambda: plain.fit(ds, **common),
        "tuner": lambda: tuned.fit(ds, callbacks=[tuner], **common),
    }
    for run in runs.values():  # warm-up: compile both
        run()
    times = {name: [] for name in runs}
    for i in range(args.pairs):
        order = list(runs) if i % 2 == 0 else list(reversed(list(runs)))
        for name in order:
            start = time.perf_counter()
            runs[name]()
            times[name].append(time.perf_counter() - start)

    ratios = [t / p for t, p in zip(times["tuner"], times["plain"])]
    fastest = min(min(v) for v in times.values())
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} cores, "
        f"{platform.processor() or 'cpu'}"
    )
    print(
        f"steps per fit: {args.steps}, pairs: {args.pairs}, "
        f"batch size: {args.batch_size}"
    )
    for name, values in times.items():
        ms = sorted(v / args.steps * 1000 for v in values)
        slow = sum(v > 1.7 * fastest for v in values)
        print(
            f"{name:6} ms/step: p25 {ms[len(ms) // 4]:.3f}, median "
            f"{statistics.median(ms):.3f}; slow-mode fits {slow}/{len(ms)}"
        )
    p25 = {k: sorted(v)[len(v) // 4] for k, v in times.items()}
    print(
        "tuner compilations in the timed fits: "
        f"{tuner.report.total_compilations}"
    )
    print(
        "overhead: median per-pair ratio (tuner / plain) "
        f"{statistics.median(ratios):.4f}; p25 ratio "
        f"{p25['tuner'] / p25['plain']:.4f}"
    )


if __name__ == "__main__":
    main()
