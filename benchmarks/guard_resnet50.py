"""The recompilation guard on the ResNet-50 example's random crops.

Runs the example's random-crop pipeline five ways, one after the other
in one process, each on a fresh ResNet-50 with XLATuner: without XLA,
with XLA and no guard (`--max-recompilations none`), and with XLA under
the guard (the example's budget, or `--budget`) acting each way it can
(`fallback`, `per_shape`, `bucket`: refused on images, which have no
mask, so it runs per shape). Prints, per run, the time to its last step,
its median step, its compilations and compile seconds, and the guard's
lines (when it acted, what it had cost, what it did).

Run: python benchmarks/guard_resnet50.py [--steps 12] [--budget 2]
"""

import argparse
import os
import platform
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "examples", "resnet50"))

import train  # noqa: E402

from keras_xla.core.hardware import cpu_model  # noqa: E402
from keras_xla.core.render import guard_line  # noqa: E402


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--budget", type=int, default=2)
    parser.add_argument("--image-size", type=int, default=64)
    known = parser.parse_args()
    common = ["--steps", str(known.steps), "--crop", "random"]
    common += ["--image-size", str(known.image_size)]
    runs = (
        ("no XLA", ["--jit", "off"]),
        ("XLA, no guard", ["--jit", "on", "--max-recompilations", "none"]),
    ) + tuple(
        (
            f"guard {known.budget}, {action}",
            ["--jit", "on", "--max-recompilations", str(known.budget)]
            + ["--on-recompile-storm", action],
        )
        for action in ("fallback", "per_shape", "bucket")
    )
    rows = []
    for name, extra in runs:
        args = train.parse_args(common + extra)
        crop, jit = train.selected_runs(args.crop, args.jit)[0]
        row = train.run_config(crop, jit, args)
        rows.append((name, row))
    print(
        f"\nmachine: {cpu_model() or platform.machine()}, {os.cpu_count()} "
        f"cores; ResNet-50 {known.image_size}x{known.image_size}, batch 8, "
        f"{known.steps} steps of random-size crops"
    )
    base = rows[0][1]["wall_seconds"]
    for name, row in rows:
        print(
            f"{name:>21}: time to step {known.steps} "
            f"{row['wall_seconds']:.1f} s ({row['wall_seconds'] / base:.2f}x "
            f"the no-XLA run's), median step {row['median_step_ms']:.0f} ms, "
            f"{row['compilations']} compilations, "
            f"{row['compile_seconds']:.1f} s compiling"
        )
        for line in guard_line(row["guard"]):
            print(f"{'':>23}{line}")


if __name__ == "__main__":
    main()
