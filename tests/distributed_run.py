"""Runs XLAModel under a tf.distribute strategy in its own process.

Logical devices must be configured before TensorFlow starts, so the
distributed tests run this script in a subprocess and read the JSON it
prints on its last line.

Usage:
    python distributed_run.py mirrored OUT_JSON PROFILE_DIR
    python distributed_run.py single OUT_JSON
    python distributed_run.py worker OUT_JSON   (TF_CONFIG set by caller)
"""

import json
import os
import sys
import warnings

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
warnings.simplefilter("ignore")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

MODE = sys.argv[1]
if MODE == "mirrored":
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration()] * 2
    )

import keras  # noqa: E402

import keras_xla  # noqa: E402
from keras_xla.tf_backend.profiler import read_compile_events  # noqa: E402


def data():
    rng = np.random.default_rng(0)
    x = rng.random((72, 16, 4), dtype=np.float32)
    y = rng.random((72, 1), dtype=np.float32)
    return x, y


def build(cls):
    keras.utils.set_random_seed(0)
    inputs = keras.Input((16, 4))
    h = keras.layers.Conv1D(8, 3, activation="relu")(inputs)
    h = keras.layers.GlobalAveragePooling1D()(h)
    outputs = keras.layers.Dense(1)(h)
    model = cls(inputs, outputs)
    model.compile(keras.optimizers.SGD(0.05), "mse", jit_compile=True)
    return model


def weights_equal_across_replicas(model, strategy):
    for w in model.weights:
        parts = [
            v.numpy() for v in strategy.experimental_local_results(w.value)
        ]
        if not all(np.array_equal(parts[0], p) for p in parts[1:]):
            return False
    return True


def main():
    out = {}
    x, y = data()
    if MODE == "single":
        model = build(keras_xla.XLAModel)
        hist = model.fit(
            x, y, batch_size=16, epochs=2, shuffle=False, verbose=0
        )
        out["loss"] = hist.history["loss"]
    elif MODE == "mirrored":
        strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
        with strategy.scope():
            model = build(keras_xla.XLAModel)
        # The default HLO analysis: it costs no compilation (the ledger).
        tuner = keras_xla.XLATuner(verbose=0, baseline=False)
        tf.profiler.experimental.start(sys.argv[3])
        hist = model.fit(
            x,
            y,
            batch_size=16,
            epochs=2,
            shuffle=False,
            verbose=0,
            callbacks=[tuner],
        )
        tf.profiler.experimental.stop()
        out["loss"] = hist.history["loss"]
        out["replicas"] = strategy.num_replicas_in_sync
        out["profiler_compilations"] = len(read_compile_events(sys.argv[3]))
        report = tuner.report
        out["jit"] = report.jit.enabled
        out["tuner_compilations"] = report.total_compilations
        out["compile_replicas"] = sorted(
            {c.replica for c in report.compile_log}
        )
        out["recompilations"] = [
            (r.input, r.after, r.cause) for r in report.recompilations
        ]
        out["weights_equal"] = weights_equal_across_replicas(model, strategy)
        out["codes"] = report.finding_codes()
        out["messages"] = [f.message for f in report.findings]
        out["hlo"] = report.hlo.to_dict() if report.hlo else None
        # Plain Keras with XLA on the same setup.
        with strategy.scope():
            plain = build(keras.Model)
        try:
            plain.fit(x, y, batch_size=16, epochs=1, verbose=0)
            out["plain_keras"] = "trained"
        except Exception as error:  # noqa: BLE001
            out["plain_keras"] = f"{type(error).__name__}: {error}"[:400]
    elif MODE == "worker":
        strategy = tf.distribute.MultiWorkerMirroredStrategy()
        with strategy.scope():
            model = build(keras_xla.XLAModel)
        ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(
            16, drop_remainder=True
        )
        initial = model.get_weights()
        hist = model.fit(ds, epochs=2, verbose=0)
        out["changed"] = float(
            max(
                np.abs(a - b).max()
                for a, b in zip(initial, model.get_weights())
            )
        )
        out["loss"] = hist.history["loss"]
        out["weights"] = [w.tolist() for w in model.get_weights()]
    print(json.dumps(out))


if __name__ == "__main__":
    main()
