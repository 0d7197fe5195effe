"""How many calls a step function takes to settle, without and with XLA.

For each model of `benchmarks/verdict_truth.py`: fresh copies, compiled
without and then with XLA (no tuner), each fit for `--steps` steps,
`--fits` times; each train batch timed from its begin to its end. Printed
per side: the median over the fits of each block of `--block` calls (the
first call, which traces or compiles, left out), and the first block
from which every later one stays within `--within` of the last blocks'
median: the calls the step took to settle (the no-XLA baseline's timed
windows begin at its tenth call; BENCHMARKS.md, "How long the no-XLA
step settles").

Run: python benchmarks/no_xla_settling.py [--steps 64] [--fits 3]
"""

import argparse
import os
import platform

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras_xla  # noqa: E402, F401, I001  (first: before TensorFlow starts)
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import verdict_truth as models  # noqa: E402


def per_call_ms(build, jit, steps):
    """Each call's begin-to-end ms in one fresh fit (first call left
    out)."""
    x, y = models.data(steps, build)
    model = models.compiled(build, jit)
    clock = models.StepClock()
    models.quiet_fit(model, x, y, [clock])
    return 1000.0 * np.array(clock.held[1:])


def settled_at(blocks, within):
    """The first block index from which every block stays within
    `within` of the median of the last quarter of the blocks."""
    tail = float(np.median(blocks[-max(len(blocks) // 4, 1) :]))
    for i in range(len(blocks)):
        if all(b <= tail * (1 + within) for b in blocks[i:]):
            return i
    return len(blocks)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=64)
    parser.add_argument("--fits", type=int, default=3)
    parser.add_argument("--block", type=int, default=4)
    parser.add_argument("--within", type=float, default=0.1)
    parser.add_argument("--models", default="residual,wide,conv1d,transformer")
    args = parser.parse_args()
    builds = {
        "residual": ("residual MLP", models.residual_mlp),
        "wide": ("wide Dense", models.wide_dense),
        "conv1d": ("Conv1D classifier", models.conv1d_classifier),
        "transformer": (
            "padded-text transformer",
            models.padded_text_transformer,
        ),
    }
    print(
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} "
        f"cores, TensorFlow {tf.__version__}; batch {models.BATCH}, "
        f"{args.fits} fits of {args.steps} steps a side; blocks of "
        f"{args.block} calls (ms, median over the fits)"
    )
    for key in args.models.split(","):
        name, build = builds[key]
        for jit in (False, True):
            runs = [
                per_call_ms(build, jit, args.steps) for _ in range(args.fits)
            ]
            calls = min(len(r) for r in runs)
            runs = np.array([r[:calls] for r in runs])
            blocks = [
                float(np.median(runs[:, i : i + args.block]))
                for i in range(0, calls - args.block + 1, args.block)
            ]
            # (Block 0 begins at the second call.)
            at = settled_at(blocks, args.within) * args.block + 2
            side = "XLA   " if jit else "no XLA"
            shown = " ".join(f"{b:.2f}" for b in blocks)
            print(f"{name}, {side}: {shown}; settled from call {at}")


if __name__ == "__main__":
    main()
