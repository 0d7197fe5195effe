"""One fit, printed as the parity test compares it across backends.

Run with `KERAS_BACKEND` set: a small MLP on 200 samples in batches of 32
(a short last batch of 8), three epochs, validation on 70 samples (a
short last batch of 6), default `XLATuner()`: its no-XLA baseline runs
in the first epoch. Prints the report's compilations per function and
its recompilations as JSON on the last line.
"""

import json
import sys
import warnings

warnings.simplefilter("ignore")

import keras  # noqa: E402
import numpy as np  # noqa: E402

import keras_xla  # noqa: E402


def main(log_dir):
    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [
            keras.Input((8,)),
            keras.layers.Dense(16, activation="relu"),
            keras.layers.Dense(1),
        ]
    )
    model.compile("adam", "mse")
    rng = np.random.default_rng(0)
    x, y = rng.random((200, 8), np.float32), rng.random((200, 1), np.float32)
    xv, yv = rng.random((70, 8), np.float32), rng.random((70, 1), np.float32)
    tuner = keras_xla.XLATuner(log_dir=log_dir, verbose=0)
    model.fit(
        x,
        y,
        batch_size=32,
        epochs=3,
        validation_data=(xv, yv),
        verbose=0,
        callbacks=[tuner],
    )
    report = tuner.report
    per_function = {}
    for epoch in report.epochs:
        for function, figures in epoch.by_function.items():
            count = figures["compilations"]
            per_function[function] = per_function.get(function, 0) + count
    print(
        json.dumps(
            {
                "backend": keras.backend.backend(),
                "compilations": per_function,
                "recompilations": sorted(
                    [
                        r.function,
                        r.input,
                        r.dim,
                        r.before,
                        r.after,
                        r.cause,
                    ]
                    for r in report.recompilations
                ),
                "baseline_steps": report.baseline.steps,
            }
        )
    )


if __name__ == "__main__":
    main(sys.argv[1])
