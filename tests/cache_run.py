"""One training run with XLATuner(compile_cache=...), in its own process.

The persistent cache only shows across processes, so the tests run this
script twice and read the JSON it prints on its last line.

Usage: python cache_run.py CACHE_DIR LOG_DIR [late]
"""

import json
import os
import sys
import warnings

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
warnings.simplefilter("ignore")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import keras_xla  # noqa: E402


def main():
    cache_dir, log_dir = sys.argv[1], sys.argv[2]
    if len(sys.argv) > 3 and sys.argv[3] == "late":
        # Some XLA compilation before the tuner exists: too late for the
        # cache flag.
        tf.function(lambda v: v + 1.0, jit_compile=True)(tf.ones([2]))
    tuner = keras_xla.XLATuner(
        log_dir=log_dir, compile_cache=cache_dir, verbose=0, analyze_hlo=False
    )
    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [
            keras.Input((16, 16, 3)),
            keras.layers.Conv2D(8, 3, activation="relu"),
            keras.layers.Conv2D(8, 3, activation="relu"),
            keras.layers.GlobalAveragePooling2D(),
            keras.layers.Dense(4),
        ]
    )
    model.compile("adam", "mse")
    rng = np.random.default_rng(0)
    x = rng.random((40, 16, 16, 3), dtype=np.float32)
    y = rng.random((40, 4), dtype=np.float32)
    start = [w.numpy().copy() for w in model.trainable_weights]
    model.fit(x, y, batch_size=16, epochs=2, verbose=0, callbacks=[tuner])
    moved = any(
        not np.array_equal(a, w.numpy())
        for a, w in zip(start, model.trainable_weights)
    )
    report = tuner.report
    print(
        json.dumps(
            {
                "compile_cache": report.compile_cache.to_dict(),
                "compilations": report.total_compilations,
                "compile_seconds": report.total_compile_seconds,
                "cache": [c.cache for c in report.compile_log],
                "hits": [e.compile_cache_hits for e in report.epochs],
                "codes": report.finding_codes(),
                "messages": [f.message for f in report.findings],
                "steps": int(model.optimizer.iterations.numpy()),
                "weights_moved": moved,
            }
        )
    )


if __name__ == "__main__":
    main()
