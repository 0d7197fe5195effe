"""The `keras-xla report` two-run comparison shown in the README.

Trains the same tiny Conv1D model (70 examples, batch 16, a validation set
of 20, two epochs) with XLA and without, each with `XLATuner(log_dir=...)`,
then prints `keras-xla report XLA_RUN NO_XLA_RUN`.

Run: python benchmarks/report_example.py [--log-dir runs/report_example]
"""

import argparse
import os
import platform
import warnings

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402

from keras_xla import XLATuner  # noqa: E402
from keras_xla.cli import main as cli_main  # noqa: E402


def tiny_model():
    """The small Conv1D model of the README's examples (seeded)."""
    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [
            keras.Input((16, 4)),
            keras.layers.Conv1D(8, 3),
            keras.layers.GlobalAveragePooling1D(),
            keras.layers.Dense(1),
        ]
    )
    model.compile("adam", "mse")
    return model


def train(log_dir, jit):
    model = tiny_model()
    rng = np.random.default_rng(0)
    x = rng.random((70, 16, 4), dtype=np.float32)
    y = rng.random((70, 1), dtype=np.float32)
    tuner = XLATuner(
        log_dir=log_dir, jit_compile=jit, verbose=0, analyze_hlo=False
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.fit(
            x,
            y,
            batch_size=16,
            epochs=2,
            verbose=0,
            validation_data=(x[:20], y[:20]),
            callbacks=[tuner],
        )


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--log-dir", default=os.path.join("runs", "report_example")
    )
    args = parser.parse_args()
    runs = [os.path.join(args.log_dir, name) for name in ("xla", "noxla")]
    train(runs[0], True)
    train(runs[1], False)
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores")
    cli_main(["report", *runs])


if __name__ == "__main__":
    main()
