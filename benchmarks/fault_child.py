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


def conv_model(jit_compile=True):
    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [
            keras.Input((16, 4)),
            keras.layers.Conv1D(8, 3, activation="relu"),
            keras.layers.GlobalAveragePooling1D(),
            keras.layers.Dense(1),
        ]
    )
    model.compile("adam", "mse", jit_compile=jit_compile)
    return model


def data(n=SAMPLES):
    rng = np.random.default_rng(0)
    return rng.random((n, 16, 4), "float32"), rng.random((n, 1), "float32")


class FailAtEpochEnd(keras.callbacks.Callback):
    """A callback after the tuner whose epoch end raises."""

    def on_epoch_end(self, epoch, logs=None):
        raise RuntimeError("a callback after the tuner failed")


class Interrupt(keras.callbacks.Callback):
    def on_train_batch_begin(self, batch, logs=None):
        if batch == 2:
            raise KeyboardInterrupt


VICTIM = b"a file of the user's, outside keras_xla's directories"


def plant(fault, work, log_dir):
    """Links at the names keras_xla reads and writes, pointing at a file
    of the user's, and entries another user could have written."""
    victim = os.path.join(work, "victim")
    with open(victim, "wb") as f:
        f.write(VICTIM)
    cache = os.path.join(work, "cache")
    if fault == "cache-shared-1777":
        os.makedirs(cache, exist_ok=True)
        os.chmod(cache, 0o1777)
    if fault == "cache-planted-entry":
        for name in os.listdir(cache):
            os.chmod(os.path.join(cache, name), 0o666)
    if fault == "cache-symlink-entry":
        os.makedirs(cache, mode=0o700, exist_ok=True)
        name = "xla_compile_cache__1__2__XLA_CPU_JIT.pb"
        os.symlink(victim, os.path.join(cache, name))
    if fault == "log-dir-symlinks":
        os.makedirs(log_dir, exist_ok=True)
        for name in (
            "xla_report.json.tmp",
            f"xla_report.json.{os.getpid()}.tmp",
        ):
            os.symlink(victim, os.path.join(log_dir, name))
    return victim


def run(fault, work):
    log_dir = os.path.join(work, "logs")
    victim = plant(fault, work, log_dir)
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
    if fault == "cache-full-disk":
        from keras_xla.tf_backend import cache_entries

        # As if the cache's disk had less free than keras_xla keeps free.
        cache_entries.MIN_FREE_BYTES = 1 << 60
    if fault == "empty-dataset":
        x, y, expected = x[:0], y[:0], 0
    if fault == "callback-fails-at-epoch-end":
        callbacks.append(FailAtEpochEnd())
        expected = -(-SAMPLES // BATCH)
    if fault == "plain-fit-after-tuned":
        model = conv_model(jit_compile=False)  # the tuner turns XLA on
        expected += -(-SAMPLES // BATCH)  # and a plain epoch after it
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
    except (KeyboardInterrupt, RuntimeError):
        extra["interrupted"] = True
    finally:
        tf.profiler.experimental.stop()
    if fault == "interrupt-in-profile-window":
        tf.profiler.experimental.start(os.path.join(work, "mine"))
        tf.profiler.experimental.stop()  # raises if left running
        extra["own_profiler_starts"] = True
    if fault == "callback-fails-at-epoch-end":
        epochs = [(e.epoch, e.steps) for e in tuner.report.epochs]
        extra["epochs_once"] = epochs == [(0, expected)]
    if fault == "plain-fit-after-tuned":
        plain = os.path.join(work, "plain")
        tf.profiler.experimental.start(plain)
        model.evaluate(x, y, batch_size=BATCH, verbose=0)
        model.fit(x, y, batch_size=BATCH, verbose=0)
        tf.profiler.experimental.stop()
        extra["plain_xla_compiles"] = len(read_compile_events(plain))
        extra["jit_restored"] = model.jit_compile is False
    if "second_codes" in extra:
        extra["second_codes"] = callbacks[0].report.finding_codes()
    if fault == "child-inherits-flags":
        import subprocess

        code = "import os; print(os.environ.get('TF_XLA_FLAGS'))"
        seen = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True
        ).stdout.strip()
        extra["child_flags_users"] = seen == str(os.environ.get("TF_XLA_FLAGS"))
    report = tuner.report
    truth = len(read_compile_events(profile))
    with open(victim, "rb") as f:
        extra["outside_untouched"] = f.read() == VICTIM
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
