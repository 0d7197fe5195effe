"""Short runs: does `jit_compile="auto"` cost more than the best fixed
choice when the run is too short for XLA to pay back?

The residual MLP of `verdict_truth.py` (XLA about 1.4x faster per step on
the project's CPU, but its compile takes a second or two) trains runs of
each length, one after the other in one process, four ways: no XLA, XLA,
`XLATuner(jit_compile="auto")`, and "auto" with the trial's pay-back
rule off (every XLA candidate compiled, as before the rule). Printed per
length: each way's seconds from `fit`'s start to the end of its last
callback hook (`on_train_end`, after the tuner's; median over the
rounds), whether auto compiled XLA, auto's time against the best fixed
way's, and the truth of the trial's cost: what the decision reports
(`trial_cost_seconds`, beyond a run on the winner alone) beside what auto
took beyond that run: the fixed way that matches its winner, under a
tuner too (`jit_compile=True` or `False`, `baseline=False`; two more
fits a round).
`fit`'s return after its last hook can wait for tf.data's teardown
(`tfdata_teardown.py`): that wait is printed apart, the longest of the
length's fits.

Run: python benchmarks/auto_short.py [--lengths 60 300 1500] [--rounds 2]
"""

import argparse
import dataclasses
import os
import platform
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import verdict_truth as vt  # noqa: E402, I001  (keras_xla first)
import keras  # noqa: E402
import tensorflow as tf  # noqa: E402

import keras_xla  # noqa: E402
from keras_xla.auto import policy  # noqa: E402
from keras_xla.core.render import format_table  # noqa: E402

WAYS = ("no XLA", "XLA", "auto", "auto, rule off")
# The same fixed ways under a tuner: what a run on auto's winner alone
# takes, for the truth of the trial's reported cost.
TUNED = ("tuner, no XLA", "tuner, XLA")


class EndClock(keras.callbacks.Callback):
    """When the last callback hook of the fit ended."""

    def on_train_end(self, logs=None):
        self.at = time.perf_counter()


def fit(way, x, y):
    """Seconds to the fit's last hook, seconds from it to `fit`'s return,
    the XLA compilations and the trial's decision (None for a fixed
    way)."""
    xla = way in ("XLA", "tuner, XLA")
    model = vt.compiled(vt.residual_mlp, xla)
    callbacks = []
    tunables = policy.TUNABLES
    if way.startswith(("auto", "tuner")):
        tuner = keras_xla.XLATuner(
            jit_compile="auto" if way.startswith("auto") else xla,
            baseline=False,  # (a run on the winner alone: no windows)
            verbose=0,
            analyze_hlo=False,
            trial_memory=False,
        )
        callbacks = [tuner]
        if way == "auto, rule off":
            policy.TUNABLES = dataclasses.replace(tunables, payback=False)
    clock = EndClock()
    start = time.perf_counter()
    try:
        vt.quiet_fit(model, x, y, [*callbacks, clock])
    finally:
        policy.TUNABLES = tunables
    returned = time.perf_counter()
    if not callbacks:
        return clock.at - start, returned - clock.at, None, None
    report = callbacks[0].report
    return (
        clock.at - start,
        returned - clock.at,
        report.total_compilations,
        report.decision,
    )


def cost_truth(decisions, seconds, median):
    """(reported trial cost, auto's seconds beyond the fixed way of its
    winner), medians over the rounds that decided."""
    way = {"no_xla/float32": TUNED[0], "xla/float32": TUNED[1]}
    reported, measured = [], []
    for decision, took in zip(decisions, seconds):
        winner = way.get((decision or {}).get("winner"))
        if winner is None:
            continue
        reported.append(decision["trial_cost_seconds"])
        measured.append(took - median[winner])
    if not reported:
        return "-", "-"
    return (
        f"{round(statistics.median(reported), 2) + 0.0:.2f}",
        f"{round(statistics.median(measured), 2) + 0.0:.2f}",
    )


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
        "auto winners",
        "trial cost reported s",
        "auto beyond its winner's way, tuned s",
        "longest teardown s",
    )
    rows = [header]
    for steps in args.lengths:
        x, y = vt.data(steps)
        took = {w: [] for w in WAYS + TUNED}
        compiled, decisions, teardown = [], [], 0.0
        for _ in range(args.rounds):
            for way in WAYS + TUNED:
                seconds, wait, compiles, decision = fit(way, x, y)
                took[way].append(seconds)
                teardown = max(teardown, wait)
                if way == "auto":
                    compiled.append(compiles)
                    decisions.append(decision)
        median = {w: statistics.median(took[w]) for w in took}
        best = min(median["no XLA"], median["XLA"])
        winners = [(d or {}).get("winner") or "-" for d in decisions]
        rows.append(
            (
                str(steps),
                *[f"{median[w]:.2f}" for w in WAYS],
                "/".join(str(c) for c in compiled),
                f"{best / median['auto']:.2f}",
                "/".join(w.split("/")[0] for w in winners),
                *cost_truth(decisions, took["auto"], median),
                f"{teardown:.2f}",
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
