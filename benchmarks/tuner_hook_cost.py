"""The tuner's own time per call, as its report measures it.

Fits a small MLP (32 -> 64 -> 1, batches of 32) `--fits` times, each a
`--steps`-step epoch under a fresh `XLATuner(baseline=False,
analyze_hlo=False)`, and prints each fit's `tuner_ms_median` (the
tuner's work in its hooks per step) and `dispatch_ms_median` in
microseconds. Run it once per version (`PYTHONPATH=<other checkout>`)
to compare what the tuner does per call where whole-fit ratios are too
noisy to tell versions apart.

Run: KERAS_BACKEND=jax python benchmarks/tuner_hook_cost.py [--fits 5]
"""

import argparse
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402

import keras_xla  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--fits", type=int, default=5)
    parser.add_argument("--steps", type=int, default=400)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    x = rng.random((32 * args.steps, 32), np.float32)
    y = rng.random((32 * args.steps, 1), np.float32)
    model = keras.Sequential(
        [
            keras.Input((32,)),
            keras.layers.Dense(64, activation="relu"),
            keras.layers.Dense(1),
        ]
    )
    model.compile("adam", "mse")
    print(f"{keras.backend.backend()}, keras_xla from {keras_xla.__file__}")
    for _ in range(args.fits):
        tuner = keras_xla.XLATuner(verbose=0, baseline=False, analyze_hlo=False)
        model.fit(x, y, batch_size=32, epochs=1, verbose=0, callbacks=[tuner])
        epoch = tuner.report.epochs[0]
        # An earlier version kept both in `step_time_ms`, named otherwise.
        times = epoch.step_time_ms
        tuner_ms = getattr(epoch, "tuner_ms_median", times.get("tuner_median"))
        tuner_us = (tuner_ms or 0.0) * 1000.0
        dispatch = getattr(
            epoch, "dispatch_ms_median", times.get("dispatch_median")
        )
        dispatch_us = "-" if dispatch is None else f"{dispatch * 1000:.1f}"
        print(f"tuner per step {tuner_us:.1f} us, dispatch {dispatch_us} us")


if __name__ == "__main__":
    main()
