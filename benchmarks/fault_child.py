"""One fault of `fault_matrix.py`, in its own process (flags and the
compile cache act at process start). Prints one JSON line: steps trained
and expected, whether the report is valid, and the finding codes.

Run: python benchmarks/fault_child.py FAULT WORKDIR
"""

import json
import os
import sys
import warnings

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
warnings.simplefilter("ignore")

import keras_xla  # noqa: E402, I001  (first: before TensorFlow starts)
import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from keras_xla.core.report import XLAReport  # noqa: E402
from keras_xla.tf_backend.profiler import read_compile_events  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BATCH, SAMPLES, EPOCHS = 16, 40, 2  # 3 steps an epoch (16, 16, 8)


def conv_model():
    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [
            keras.Input((16, 4)),
            keras.layers.Conv1D(8, 3, activation="relu"),
            keras.layers.GlobalAveragePooling1D(),
            keras.layers.Dense(1),
        ]
    )
    model.compile("adam", "mse", jit_compile=True)
    return model


def data(n=SAMPLES):
    rng = np.random.default_rng(0)
    return rng.random((n, 16, 4), "float32"), rng.random((n, 1), "float32")


class Interrupt(keras.callbacks.Callback):
    def on_train_batch_begin(self, batch, logs=None):
        if batch == 2:
            raise KeyboardInterrupt


def run(fault, work):
    log_dir = os.path.join(work, "logs")
    kwargs = dict(verbose=0, log_dir=log_dir)
    model, x, y = conv_model(), *data()
    expected = -(-SAMPLES // BATCH) * EPOCHS
    callbacks, extra, fit_kwargs = [], {}, {}
    if fault.startswith("cache"):
        kwargs["compile_cache"] = os.path.join(work, "cache")
    if fault == "cache-usual-order":
        tf.ones([2]) + 1.0  # TensorFlow starts before the tuner exists
    if fault == "cache-uncreatable":
        blocker = os.path.join(work, "blocker")
        open(blocker, "w").close()
        kwargs["compile_cache"] = os.path.join(blocker, "cache")
    if fault == "log-dir-train-is-a-file":
        os.makedirs(log_dir, exist_ok=True)
        open(os.path.join(log_dir, "train"), "w").close()
    if fault == "log-dir-uncreatable":
        blocker = os.path.join(work, "blocker")
        open(blocker, "w").close()
        kwargs["log_dir"] = log_dir = os.path.join(blocker, "logs")
    if fault == "empty-dataset":
        x, y, expected = x[:0], y[:0], 0
    tuner = keras_xla.XLATuner(**kwargs)
    if fault == "two-tuners":
        callbacks.append(keras_xla.XLATuner(verbose=0))
        extra["second_codes"] = callbacks[0].report.finding_codes
    if fault == "interrupt-in-profile-window":
        tuner = keras_xla.XLATuner(profile_steps=(0, 5), **kwargs)
        callbacks.append(Interrupt())
        expected = 2
    if fault == "many-dynamic-dims":
        model, ds, expected = folded_case()
        x, y, fit_kwargs = ds, None, {}
    profile = os.path.join(work, "truth")
    tf.profiler.experimental.start(profile)
    try:
        model.fit(
            x,
            y,
            batch_size=BATCH if y is not None else None,
            epochs=EPOCHS if fault != "many-dynamic-dims" else 1,
            verbose=0,
            callbacks=[tuner, *callbacks],
            **fit_kwargs,
        )
    except KeyboardInterrupt:
        extra["interrupted"] = True
    finally:
        tf.profiler.experimental.stop()
    if fault == "interrupt-in-profile-window":
        tf.profiler.experimental.start(os.path.join(work, "mine"))
        tf.profiler.experimental.stop()  # raises if left running
        extra["own_profiler_starts"] = True
    if "second_codes" in extra:
        extra["second_codes"] = callbacks[0].report.finding_codes()
    report = tuner.report
    truth = len(read_compile_events(profile))
    if report.compile_cache is not None:
        extra["cache_hits"] = report.compile_cache.hits
    return {
        "trained": int(model.optimizer.iterations.numpy()),
        "expected": expected,
        "report_valid": report_valid(report, log_dir),
        "codes": report.finding_codes(),
        "compilations": [report.total_compilations, truth],
        **extra,
    }


def folded_case():
    """The tests' 16-input model: more dynamic dimensions than the probe
    holds one by one."""
    sys.path.insert(0, os.path.join(ROOT, "tests"))
    from conftest import many_dynamic_inputs

    model, ds = many_dynamic_inputs()
    return model, ds, 3


def report_valid(report, log_dir):
    """The in-memory report survives its JSON round trip unchanged, and
    the file (where it could be written) reads back without skips."""
    again = XLAReport.from_dict(json.loads(report.to_json()))
    if again.skipped or again.to_dict() != report.to_dict():
        return False
    path = os.path.join(log_dir, "xla_report.json")
    if os.path.isfile(path):
        return not XLAReport.load(path).skipped
    return True


if __name__ == "__main__":
    print(json.dumps(run(sys.argv[1], sys.argv[2])))
