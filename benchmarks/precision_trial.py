"""ResNet-50: each fixed XLA/precision candidate against the live trial.

Trains a fresh ResNet-50 (synthetic images, fixed-size slices, so one
input shape) for the same number of steps under each fixed candidate
(XLA off/on x float32/mixed_bfloat16; XLA off and float32 is Keras's
default on a CPU) and then under `XLATuner(jit_compile="auto",
mixed_precision="auto")`, one after the other in one process, and prints:

- whole-run throughput (images over the wall time of `fit`, compiling and,
  for auto, the trial included), as a ratio to Keras's default;
- steady-state throughput over the same late steps of every run (after
  the trial's budget), as a ratio to the best fixed candidate;
- the trial's decision.

Run: python benchmarks/precision_trial.py [--steps 300] [--budget 0.25]
"""

import argparse
import os
import platform
import statistics
import sys
import time
import warnings

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "examples", "resnet50"))

import keras  # noqa: E402
import train  # noqa: E402

import keras_xla  # noqa: E402
from keras_xla.core.render import decision_markdown, format_table  # noqa: E402

FIXED = (
    ("keras default", None, None),  # XLA "auto" (off on CPU), float32
    ("xla/float32", True, None),
    ("no_xla/mixed_bfloat16", False, "mixed_bfloat16"),
    ("xla/mixed_bfloat16", True, "mixed_bfloat16"),
)


class StepClock(keras.callbacks.Callback):
    """Start time of every train step (one clock read per step)."""

    async_safe = True

    def on_train_begin(self, logs=None):
        self.starts = []

    def on_train_batch_begin(self, batch, logs=None):
        self.starts.append(time.perf_counter())

    def on_train_end(self, logs=None):
        self.starts.append(time.perf_counter())


def fit_steps(model, tuner, args, ds):
    """Fits `args.steps` steps of `ds` under `tuner`, quietly; returns
    the start time of every step and the fit's end."""
    clock = StepClock()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.fit(
            ds,
            epochs=1,
            steps_per_epoch=args.steps,
            callbacks=[tuner, clock],
            verbose=0,
        )
    return clock.starts


def run(name, jit, precision, args, ds):
    keras.utils.set_random_seed(args.seed)
    model = train.build_model(10)
    model.compile(
        keras.optimizers.SGD(0.01, momentum=0.9),
        "sparse_categorical_crossentropy",
    )
    tuner = keras_xla.XLATuner(
        jit_compile=jit,
        mixed_precision=precision,
        trial_budget=args.budget,
        analyze_hlo=False,
        verbose=0,
    )
    start = time.perf_counter()
    starts = fit_steps(model, tuner, args, ds)
    wall = time.perf_counter() - start
    steps = [b - a for a, b in zip(starts, starts[1:])]
    late = steps[int(args.steps * max(args.budget, 0.5)) :]
    report = tuner.report
    print(
        f"  {name}: {wall:.1f} s, {report.total_compilations} XLA "
        f"compilations, steady {statistics.median(late) * 1000:.1f} ms/step",
        flush=True,
    )
    return {
        "name": name,
        "wall": wall,
        "overall": args.steps * args.batch_size / wall,
        "steady": args.batch_size / statistics.median(late),
        "compilations": report.total_compilations,
        "decision": report.decision,
        "starts": starts,
        # The first call's time beyond a median step: its trace (and XLA
        # compile), and the fit's start.
        "first_excess": steps[0] - statistics.median(steps[1:]),
    }


def add_resnet_args(parser, steps):
    """The ResNet-50 benchmarks' arguments: image size, batch, steps."""
    parser.add_argument("--image-size", type=int, default=96)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--steps", type=int, default=steps)
    parser.add_argument("--seed", type=int, default=0)


def cached_batches(args):
    """32 batches of synthetic images through the fixed slice, made once:
    the input pipeline costs no CPU while timing."""
    source = train.synthetic_images(args.image_size).repeat()
    ds = train.fixed_pipeline(source, args.image_size, args.batch_size)
    return ds.take(32).cache().repeat().prefetch(2)


def machine_line(args, per):
    """The machine and the ResNet-50 setup, for the output's first line."""
    return (
        f"machine: {platform.machine()}, {os.cpu_count()} cores; ResNet-50 "
        f"{args.image_size}x{args.image_size}, batch {args.batch_size}, "
        f"{args.steps} steps per {per}"
    )


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    add_resnet_args(parser, steps=300)
    parser.add_argument("--budget", type=float, default=0.25)
    args = parser.parse_args()
    ds = cached_batches(args)
    print(f"{machine_line(args, 'run')}, trial budget {args.budget}")
    rows = [run(name, j, p, args, ds) for name, j, p in FIXED]
    rows.append(run("auto", "auto", "auto", args, ds))
    default = rows[0]
    best = max(rows[:-1], key=lambda r: r["steady"])
    table = [
        (
            "config",
            "compiles",
            "wall s",
            "img/s whole run",
            "vs default",
            "img/s steady",
            "vs best fixed",
        )
    ]
    for r in rows:
        table.append(
            (
                r["name"],
                str(r["compilations"]),
                f"{r['wall']:.1f}",
                f"{r['overall']:.2f}",
                f"{r['overall'] / default['overall']:.2f}",
                f"{r['steady']:.2f}",
                f"{r['steady'] / best['steady']:.2f}",
            )
        )
    print("\n".join(format_table(table)))
    print(f"best fixed candidate (steady state): {best['name']}")
    print("\nauto's decision:\n" + decision_markdown(rows[-1]["decision"]))


if __name__ == "__main__":
    main()
