"""ResNet-50 under XLA: drifting random-size crops vs a fixed slice.

Runs the example's two pipelines one after the other in one process, each
on a fresh ResNet-50 with XLATuner, and prints compilations and throughput
ratios, both including compile time (time to N steps) and excluding it
(the steady-state steps only).

Run: python benchmarks/resnet50_crops.py [--image-size 64] [--steps 10]
"""

import os
import platform
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "examples", "resnet50"))

import train  # noqa: E402


def main(argv=None):
    args = train.parse_args(
        (argv if argv is not None else sys.argv[1:]) + ["--verbose", "0"]
    )
    rows = {crop: train.run_config(crop, args) for crop in ("random", "fixed")}
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} cores; "
        f"ResNet-50 {args.image_size}x{args.image_size}, batch "
        f"{args.batch_size}, {args.steps * args.epochs} steps, XLA "
        f"{args.jit}, {args.precision}"
    )
    print(train.render(list(rows.values())))
    fixed, drift = rows["fixed"], rows["random"]
    incl = (
        fixed["images_per_second_overall"] / drift["images_per_second_overall"]
    )
    print(
        f"time to {args.steps * args.epochs} steps: random "
        f"{drift['wall_seconds']:.1f} s, fixed {fixed['wall_seconds']:.1f} s"
    )
    print(f"throughput ratio fixed/random including compile time: {incl:.2f}x")
    if fixed["images_per_second"] and drift["images_per_second"]:
        excl = fixed["images_per_second"] / drift["images_per_second"]
        print(
            "throughput ratio fixed/random excluding compile steps: "
            f"{excl:.2f}x"
        )


if __name__ == "__main__":
    main()
