"""Short runs: does `jit_compile="auto"` cost more than the best fixed
choice when the run is too short for XLA to pay back?

The residual MLP of `verdict_truth.py` (XLA about 1.4x faster per step on
the project's CPU, but its compile takes a second or two) trains runs of
each length, one after the other in one process, four ways: no XLA, XLA,
`XLATuner(jit_compile="auto")`, and "auto" with the trial's pay-back
rule off (every XLA candidate compiled, as before the rule). Printed per
length: each way's wall time of `fit` (median over the rounds), whether
auto compiled XLA, and auto's time against the best fixed way's.

Run: python benchmarks/auto_short.py [--lengths 60 300 1500] [--rounds 2]
"""

import argparse
import os
import platform
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import verdict_truth as vt  # noqa: E402, I001  (keras_xla first)
import tensorflow as tf  # noqa: E402

import keras_xla  # noqa: E402
from keras_xla.core import trial as trial_lib  # noqa: E402
from keras_xla.core.render import format_table  # noqa: E402

WAYS = ("no XLA", "XLA", "auto", "auto, rule off")


def _tries_every_candidate(self, live, best, medians):
    return {}


def fit(way, x, y):
    """Wall seconds of one fit, and the XLA compilations it made."""
    model = vt.compiled(vt.residual_mlp, way == "XLA")
    callbacks = []
    rule = trial_lib.Trial.cannot_pay_back
    if way.startswith("auto"):
        tuner = keras_xla.XLATuner(
            jit_compile="auto",
            verbose=0,
            analyze_hlo=False,
            trial_memory=False,
        )
        callbacks = [tuner]
        if way == "auto, rule off":
            trial_lib.Trial.cannot_pay_back = _tries_every_candidate
    start = time.perf_counter()
    try:
        vt.quiet_fit(model, x, y, callbacks)
    finally:
        trial_lib.Trial.cannot_pay_back = rule
    wall = time.perf_counter() - start
    compiles = callbacks[0].report.total_compilations if callbacks else None
    return wall, compiles


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--lengths", type=int, nargs="+", default=[60, 300, 1500]
    )
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    header = (
        "steps",
        *[f"{w} s" for w in WAYS],
        "auto compiled",
        "auto speed vs best",
    )
    rows = [header]
    for steps in args.lengths:
        x, y = vt.data(steps)
        walls = {w: [] for w in WAYS}
        compiled = []
        for _ in range(args.rounds):
            for way in WAYS:
                wall, compiles = fit(way, x, y)
                walls[way].append(wall)
                if way == "auto":
                    compiled.append(compiles)
        median = {w: statistics.median(walls[w]) for w in WAYS}
        best = min(median["no XLA"], median["XLA"])
        rows.append(
            (
                str(steps),
                *[f"{median[w]:.2f}" for w in WAYS],
                "/".join(str(c) for c in compiled),
                f"{best / median['auto']:.2f}",
            )
        )
    print(
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} "
        f"cores, TensorFlow {tf.__version__}; batch {vt.BATCH}, medians "
        f"of {args.rounds} rounds"
    )
    print("\n".join(format_table(rows)))


if __name__ == "__main__":
    main()
