"""ResNet-50: what sharing the traced train step saves an XLA first call,
and whether no-XLA steps through the shared step run as fast.

In a trial or baseline fit, the tuner's step functions that differ only
in XLA call one traced train step, so an XLA step function built after
the no-XLA one skips the Python trace; here `StepFunctions.share` forces
sharing on and off in plain fits. Here a fresh ResNet-50 (synthetic
images, fixed-size slices) trains N steps without XLA and then N steps
with XLA in a second fit, both under `XLATuner`, with sharing on and
with it off, in the order on, off, off, on (so a drift over the script
falls on both ways alike), all in one process. Printed per way: the XLA
fit's first call (its time beyond a median XLA step) and the no-XLA and
XLA steady step times (medians of each fit's second half), then the
ratios shared / unshared of the means of each way's two runs.

Run: python benchmarks/shared_trace.py [--steps 30]
"""

import argparse
import os
import statistics
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import keras  # noqa: E402
import precision_trial  # noqa: E402  (its fits; puts train on the path)
import train  # noqa: E402

import keras_xla  # noqa: E402
from keras_xla.core.render import format_table  # noqa: E402
from keras_xla.tf_backend.step_functions import StepFunctions  # noqa: E402


def timed_fit(model, jit, args, ds):
    """Step durations of one fit of `args.steps` steps."""
    tuner = keras_xla.XLATuner(
        jit_compile=jit, baseline=False, analyze_hlo=False, verbose=0
    )
    starts = precision_trial.fit_steps(model, tuner, args, ds)
    return [b - a for a, b in zip(starts, starts[1:])]


def run(share, args, ds):
    keras.utils.set_random_seed(args.seed)
    model = train.build_model(10)
    model.compile(
        keras.optimizers.SGD(0.01, momentum=0.9),
        "sparse_categorical_crossentropy",
        jit_compile=False,
    )
    StepFunctions.of(model).share = share
    no_xla = timed_fit(model, False, args, ds)
    xla = timed_fit(model, True, args, ds)
    half = args.steps // 2
    row = {
        "share": share,
        "no_xla_first": no_xla[0] - statistics.median(no_xla[1:]),
        "xla_first": xla[0] - statistics.median(xla[1:]),
        "no_xla_step": statistics.median(no_xla[half:]),
        "xla_step": statistics.median(xla[half:]),
    }
    print(
        f"  sharing {'on' if share else 'off'}: no-XLA first call "
        f"{row['no_xla_first']:.1f} s and XLA first call "
        f"{row['xla_first']:.1f} s beyond a step, no-XLA step "
        f"{row['no_xla_step'] * 1000:.0f} ms, XLA step "
        f"{row['xla_step'] * 1000:.0f} ms",
        flush=True,
    )
    return row


def mean(rows, share, key):
    return statistics.mean(r[key] for r in rows if r["share"] is share)


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    precision_trial.add_resnet_args(parser, steps=30)
    args = parser.parse_args()
    ds = precision_trial.cached_batches(args)
    print(precision_trial.machine_line(args, "fit"), flush=True)
    rows = [run(share, args, ds) for share in (True, False, False, True)]
    table = [("", "shared", "unshared", "shared / unshared")]
    for label, key in (
        ("no-XLA first call beyond a step (s)", "no_xla_first"),
        ("XLA first call beyond a step (s)", "xla_first"),
        ("no-XLA steady step (ms)", "no_xla_step"),
        ("XLA steady step (ms)", "xla_step"),
    ):
        on, off = mean(rows, True, key), mean(rows, False, key)
        scale = 1 if key.endswith("first") else 1000
        table.append(
            (
                label,
                f"{on * scale:.1f}",
                f"{off * scale:.1f}",
                f"{on / off:.2f}",
            )
        )
    print("\n".join(format_table(table)))
    firsts = ("no_xla_first", "xla_first")
    saved = [mean(rows, False, k) - mean(rows, True, k) for k in firsts]
    print(
        f"sharing saved the no-XLA first call {saved[0]:.1f} s, the XLA one "
        f"{saved[1]:.1f} s: {sum(saved):.1f} s in all"
    )


if __name__ == "__main__":
    main()
