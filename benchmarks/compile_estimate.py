"""XLATuner's compile-seconds estimates against the TF profiler.

Trains a small Conv1D model whose XLA compiles take a few tenths of a
second, with partial last batches in training and validation, under the TF
profiler. The tuner's compilations and the profiler's are lined up in time
order, and the estimate is compared
with the profiler's span of that compilation (from the XLA launch that
compiled to the end of code generation; lowering TF to HLO has no event of
its own, so the span of the named HLO-pass and backend events alone is also
shown).

Run: python benchmarks/compile_estimate.py [--steps-per-execution 1]
"""

import argparse
import os
import platform
import tempfile
import warnings

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from keras_xla import XLATuner  # noqa: E402
from keras_xla.tf_backend.profiler import read_compile_events  # noqa: E402


def make_model(steps_per_execution):
    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [
            keras.Input((32, 8)),
            keras.layers.Conv1D(32, 3, activation="relu"),
            keras.layers.Conv1D(32, 3, activation="relu"),
            keras.layers.LayerNormalization(),
            keras.layers.GlobalAveragePooling1D(),
            keras.layers.Dense(16, activation="relu"),
            keras.layers.Dense(1),
        ]
    )
    model.compile("adam", "mse", steps_per_execution=steps_per_execution)
    return model


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps-per-execution", type=int, default=1)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    x = rng.random((200, 32, 8), dtype=np.float32)
    y = rng.random((200, 1), dtype=np.float32)
    model = make_model(args.steps_per_execution)
    tuner = XLATuner(verbose=0, analyze_hlo=False)
    log_dir = tempfile.mkdtemp(prefix="keras_xla_profile_")
    warnings.simplefilter("ignore")
    tf.profiler.experimental.start(log_dir)
    model.fit(
        x,
        y,
        batch_size=16,
        epochs=2,
        verbose=0,
        callbacks=[tuner],
        validation_data=(x[:70], y[:70]),
    )
    tf.profiler.experimental.stop()
    events = read_compile_events(log_dir)
    log = sorted(tuner.report.compile_log, key=lambda c: c.started_at)
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores")
    print(f"compilations: tuner {len(log)}, profiler {len(events)}")
    print(
        f"{'function':8} {'step':>4} {'kind':>9} {'tuner s':>8} "
        f"{'profiler s':>10} {'named s':>8} {'ratio':>6}"
    )
    worst = 0.0
    # Profiler times count from the profiling session's start, so the two
    # lists are lined up by order (their counts must match).
    for c, e in zip(log, events):
        ratio = c.compile_seconds / e.seconds
        kind = "first" if c.first else "recompile"
        if not c.first and e.seconds > 0.2:
            worst = max(worst, abs(ratio - 1))
        print(
            f"{c.function:8} {c.step:>4} {kind:>9} "
            f"{c.compile_seconds:>8.3f} {e.seconds:>10.3f} "
            f"{e.named_seconds:>8.3f} {ratio:>6.2f}"
        )
    print(f"largest relative error on recompilations > 0.2 s: {worst:.1%}")


if __name__ == "__main__":
    main()
