"""ResNet-50 under XLA: drifting random-size crops vs a fixed slice.

Runs the example's three ways one after the other in one process (random
crops without XLA, random crops with XLA, the fixed slice with XLA), each
on a fresh ResNet-50 with XLATuner, and prints the example's table and
conclusion, time to N steps, and throughput ratios including compile
time (time to N steps) and excluding it (the steady-state steps only).

Run: python benchmarks/resnet50_crops.py [--image-size 64] [--steps 12]
"""

import os
import platform
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "examples", "resnet50"))

import train  # noqa: E402

from keras_xla.core.hardware import cpu_model  # noqa: E402


def main(argv=None):
    args = train.parse_args(argv if argv is not None else sys.argv[1:])
    rows = [
        train.run_config(crop, jit, args)
        for crop, jit in train.selected_runs(args.crop, args.jit)
    ]
    print(
        f"\nmachine: {cpu_model() or platform.machine()}, {os.cpu_count()} "
        f"cores; ResNet-50 {args.image_size}x{args.image_size}, batch "
        f"{args.batch_size}, {args.steps * args.epochs} steps, "
        f"{args.precision}"
    )
    print(train.render(rows))
    print(train.conclusion(rows))
    for r in rows:
        print(
            f"time to {args.steps * args.epochs} steps, {r['label']}: "
            f"{r['wall_seconds']:.1f} s"
        )
    by = {r["label"]: r for r in rows}
    fixed, drift = by.get("fixed-xla"), by.get("random-xla")
    if fixed and drift:
        incl = train.ratio(fixed, drift)
        excl = train.ratio(fixed, drift, "images_per_second")
        print(
            f"fixed/random with XLA, img/s including compile: {incl}, "
            f"steady: {excl}"
        )


if __name__ == "__main__":
    main()
