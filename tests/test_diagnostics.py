"""Deep diagnostics: unsupported ops, HLO statistics, profile windows."""

import glob
import os
import warnings

import keras
import numpy as np
import pytest
import tensorflow as tf
from conftest import dense_model, quiet_fit, regression_data

from keras_xla import XLAReport, XLATuner
from keras_xla.core.signatures import Signature, TensorSignature
from keras_xla.tf_backend.hlo_analysis import batch_from_signature
from keras_xla.tf_backend.unsupported import (
    XLAUnsupportedOpError,
    parse_unsupported,
)


class PyDouble(keras.layers.Layer):
    def call(self, x):
        y = tf.py_function(lambda t: t * 2.0, [x], tf.float32)  # PYFUNC
        y.set_shape(x.shape)
        return y


class HashedString(keras.layers.Layer):
    def call(self, x):
        text = tf.strings.as_string(x)  # STRINGOP
        ids = tf.strings.to_hash_bucket_fast(text, 7)
        return tf.cast(ids, tf.float32)


def line_of(marker):
    with open(__file__) as f:
        for number, line in enumerate(f, 1):
            if marker in line and "line_of" not in line:
                return number
    raise AssertionError(marker)


def functional_with(layer):
    keras.utils.set_random_seed(0)
    inputs = keras.Input((4,))
    outputs = keras.layers.Dense(1)(layer(inputs))
    model = keras.Model(inputs, outputs)
    model.compile("sgd", "mse")
    return model


def fit(model, tuner, epochs=2):
    x, y = np.ones((16, 4), "float32"), np.ones((16, 1), "float32")
    return quiet_fit(model, x, y, batch_size=8, epochs=epochs, tuner=tuner)


@pytest.mark.parametrize(
    "layer, op_type, marker",
    [
        (PyDouble(name="py_double"), "EagerPyFunc", "PYFUNC"),
        (HashedString(name="hashed"), "AsString", "STRINGOP"),
    ],
)
def test_unsupported_op_found_before_training_and_fallback(
    layer, op_type, marker
):
    tuner = XLATuner(verbose=0, analyze_hlo=False)
    history = fit(functional_with(layer), tuner)
    assert len(history.history["loss"]) == 2  # trained, without XLA
    report = tuner.report
    assert report.jit.enabled is False
    (finding,) = [f for f in report.findings if f.code == "unsupported-op"]
    assert f"`{op_type}` in layer `{layer.name}`" in finding.message
    assert f"test_diagnostics.py:{line_of(marker)} in call" in finding.message
    assert "without XLA" in finding.message
    assert report.total_compilations == 0


def test_unsupported_op_at_run_time_falls_back_and_keeps_training():
    class Net(keras.Model):  # subclassed: no symbolic inputs to preflight
        def __init__(self):
            super().__init__()
            self.double = PyDouble(name="py_double")
            self.dense = keras.layers.Dense(1)

        def call(self, x):
            return self.dense(self.double(x))

    model = Net()
    model.compile("sgd", "mse")
    tuner = XLATuner(verbose=0, analyze_hlo=False)
    history = fit(model, tuner, epochs=3)
    assert len(history.history["loss"]) == 3
    codes = tuner.report.finding_codes()
    assert codes.count("unsupported-op") == 1
    assert model.jit_compile is False
    assert "EagerPyFunc" in tuner.report.jit.reason


def test_unsupported_op_raise():
    tuner = XLATuner(verbose=0, on_unsupported="raise", analyze_hlo=False)
    with pytest.raises(XLAUnsupportedOpError, match="`EagerPyFunc` in layer"):
        fit(functional_with(PyDouble(name="py_double")), tuner)
    assert issubclass(XLAUnsupportedOpError, ValueError)
    with pytest.raises(ValueError, match=r"on_unsupported='skip'"):
        XLATuner(on_unsupported="skip")


def test_parse_unsupported_text():
    text = (
        "Detected unsupported operations when trying to compile graph g on "
        "XLA_CPU_JIT: EagerPyFunc (No registered 'EagerPyFunc' OpKernel for "
        "XLA_CPU_JIT devices compatible with node {{node model/py_1/"
        "EagerPyFunc}}){{node model/py_1/EagerPyFunc}}\nThe op is created "
        'at: \nFile "home/u/train.py", line 9, in <module>\nFile "usr/lib/'
        'python3/site-packages/keras/src/layers/layer.py", line 1, in '
        '__call__\nFile "home/u/layers.py", line 5, in call\n'
    )
    (op,) = parse_unsupported(text, ["model", "py", "dense"])
    assert (op.op_type, op.node, op.layer, op.source) == (
        "EagerPyFunc",
        "model/py_1/EagerPyFunc",
        "py",
        "home/u/layers.py:5 in call",
    )
    assert parse_unsupported("some other error") == []


def test_hlo_statistics_after_first_epoch(tmp_path):
    x = np.ones((64, 6), "float32")
    y = np.ones((64, 4), "float32")
    tuner = XLATuner(log_dir=str(tmp_path), verbose=0, peak_flops=1e11)
    dense_model(6, hidden=(8,), outputs=4).fit(
        x, y, batch_size=16, epochs=2, verbose=0, callbacks=[tuner]
    )
    hlo = tuner.report.hlo
    # Train step of Dense 6->8->4 on batch 16: forward x@W1 (2*16*8*6) and
    # h@W2 (2*16*4*8), backward dW2, dh, dW1 (same sizes): 6144 FLOPs.
    assert hlo["flops_per_step"] == 6144
    assert hlo["shapes"] == {"x": [16, 6], "y": [16, 4]}
    assert 0.0 < hlo["fusion_ratio"] <= 1.0
    assert 0 < hlo["kernels_per_step"]
    assert hlo["peak_tflops"] == 0.1
    median_s = tuner.report.epochs[0].step_time_ms["median"] / 1000
    assert hlo["achieved_tflops"] == pytest.approx(
        6144 / median_s / 1e12, rel=1e-3
    )
    assert hlo["analysis_seconds"] > 0
    # The module XLA compiled and ran, read from its own record.
    assert hlo["source"] == "compile ledger" and hlo["text"] is None
    from tensorflow.compiler.xla.service import hlo_pb2

    with open(hlo["module"], "rb") as f:
        module = hlo_pb2.HloModuleProto.FromString(f.read())
    computations = {c.id: c for c in module.computations}

    def probe_only(fusion):  # the tuner's probe, left out of the stats
        called = computations[fusion.called_computation_ids[0]]
        names = [
            i.metadata.op_name
            for i in called.instructions
            if i.opcode not in ("parameter", "constant")
        ]
        return all("keras_xla_probe" in name for name in names)

    entry = computations[module.entry_computation_id].instructions
    fusions = [i for i in entry if i.opcode == "fusion"]
    probe = [i for i in fusions if probe_only(i)]
    assert probe  # the probe's ops are there, and left out
    assert len(fusions) - len(probe) == hlo["fusions"] > 0


def test_hlo_analysis_adds_no_compilation(profiled, tmp_path):
    x = np.ones((64, 6), "float32")
    y = np.ones((64, 4), "float32")
    counts = {}
    for analyze in (False, True, "compile"):
        tuner = XLATuner(
            log_dir=str(tmp_path / str(analyze)),
            verbose=0,
            analyze_hlo=analyze,
            peak_flops=1e11,
        )
        with profiled() as events:
            dense_model(6, hidden=(8,), outputs=4).fit(
                x, y, batch_size=16, epochs=2, verbose=0, callbacks=[tuner]
            )
        counts[analyze] = len(events)
        assert tuner.report.total_compilations == 1
        if analyze:
            assert tuner.report.hlo["flops_per_step"] == 6144
    assert counts[True] == counts[False] == 1
    # Compiling again costs two more: the optimized module and its text.
    assert counts["compile"] == 3
    with open(tuner.report.hlo["text"]) as f:
        assert f.read().startswith("HloModule")


def test_hlo_analysis_of_an_x_only_model_and_a_second_fit():
    class Autoencoder(keras.Model):
        def __init__(self):
            super().__init__()
            self.dense = keras.layers.Dense(6)

        def call(self, x):
            return self.dense(x)

        def train_step(self, data):
            x = data
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean((self(x, training=True) - x) ** 2)
            grads = tape.gradient(loss, self.trainable_weights)
            self.optimizer.apply_gradients(zip(grads, self.trainable_weights))
            return {"loss": loss}

    keras.utils.set_random_seed(0)
    model = Autoencoder()
    model.compile("sgd")
    x = np.ones((40, 6), "float32")  # batches of 16, 16, 8
    tuner = XLATuner(verbose=0, peak_flops=1e11)
    for _ in range(2):  # the second fit compiles nothing
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model.fit(x, batch_size=16, epochs=1, verbose=0, callbacks=[tuner])
        codes = tuner.report.finding_codes()
        assert "hlo-analysis-failed" not in codes
        hlo = tuner.report.hlo
        # Forward x@W (2*16*6*6), its gradient dW (same): the full batch,
        # not the short last one.
        assert hlo["shapes"] == {"x": [16, 6]}
        assert hlo["flops_per_step"] == 2 * (2 * 16 * 6 * 6)


def test_profile_window_matches_the_tuners_count(tmp_path):
    x, y = regression_data(70)  # steps 0-3 of 16, step 4 of 6
    from conftest import conv_model

    tuner = XLATuner(
        log_dir=str(tmp_path),
        verbose=0,
        analyze_hlo=False,
        profile_steps=(3, 4),
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        conv_model().fit(
            x, y, batch_size=16, epochs=2, verbose=0, callbacks=[tuner]
        )
    profile = tuner.report.profile
    assert profile["steps"] == [3, 4]
    assert all(f.endswith(".xplane.pb") for f in profile["files"])
    assert profile["files"][0].startswith(
        os.path.join(str(tmp_path), "plugins", "profile")
    )
    # The partial batch at step 4 recompiles inside the window.
    assert profile["profiler_compilations"] == profile["tuner_compilations"]
    assert profile["tuner_compilations"] == 1


def test_profile_window_from_step_zero_counts_both_compilations(tmp_path):
    x, y = regression_data(40)  # steps 0-1 of 16, step 2 of 8
    from conftest import conv_model

    tuner = XLATuner(
        log_dir=str(tmp_path),
        verbose=0,
        analyze_hlo=False,
        profile_steps=(0, 3),
        baseline=False,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        conv_model().fit(
            x, y, batch_size=16, epochs=2, verbose=0, callbacks=[tuner]
        )
    profile = tuner.report.profile
    # Step 0 compiles the full batch, step 2 the partial one: both inside.
    assert profile["profiler_compilations"] == 2
    assert profile["tuner_compilations"] == 2


class Interrupt(keras.callbacks.Callback):
    """Raises `error` at the start of train step `at`."""

    def __init__(self, at, error):
        super().__init__()
        self.at, self.error = at, error

    def on_train_batch_begin(self, batch, logs=None):
        if batch == self.at:
            raise self.error


def failing_data(fail_at, batch=8):
    """Batches of a generator dataset that raises at batch `fail_at`."""

    def gen():
        for i in range(10):
            if i == fail_at:
                raise RuntimeError("the data source broke")
            yield np.ones((batch, 16, 4), "float32"), np.ones((batch, 1))

    return tf.data.Dataset.from_generator(
        gen,
        output_signature=(
            tf.TensorSpec((batch, 16, 4), tf.float32),
            tf.TensorSpec((batch, 1), tf.float64),
        ),
    )


@pytest.mark.parametrize(
    "how", ["keyboard-interrupt-in-a-callback", "error-in-the-step"]
)
def test_interrupted_fit_stops_the_profiler_window(tmp_path, how):
    from conftest import conv_model

    x, y = regression_data(80)
    tuner = XLATuner(
        log_dir=str(tmp_path / "logs"),
        verbose=0,
        analyze_hlo=False,
        profile_steps=(0, 6),
        baseline=False,
    )
    model = conv_model()
    with pytest.raises((KeyboardInterrupt, Exception)) as raised:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if how == "error-in-the-step":
                model.fit(
                    failing_data(3), epochs=1, verbose=0, callbacks=[tuner]
                )
            else:
                stop = Interrupt(2, KeyboardInterrupt())
                model.fit(
                    x, y, batch_size=8, verbose=0, callbacks=[tuner, stop]
                )
    if how == "error-in-the-step":
        assert "the data source broke" in str(raised.value)
    else:
        assert raised.type is KeyboardInterrupt
    # The fit so far is in the report, on disk too: the steps trained
    # and their compilation.
    report = tuner.report
    trained = int(model.optimizer.iterations.numpy())
    assert trained == (2 if how != "error-in-the-step" else 3)
    assert [e.steps for e in report.epochs] == [trained]
    assert report.total_compilations == 1
    saved = XLAReport.load(str(tmp_path / "logs"))
    assert saved.total_compilations == 1 and not saved.skipped
    # The window's trace was written, and the user's own profiler starts.
    traces = glob.glob(
        str(tmp_path / "logs" / "plugins" / "profile" / "*" / "*.xplane.pb")
    )
    assert len(traces) == 1
    tf.profiler.experimental.start(str(tmp_path / "mine"))
    tf.profiler.experimental.stop()


def test_profiler_already_running_is_a_finding(tmp_path):
    from conftest import conv_model

    x, y = regression_data(32)
    tf.profiler.experimental.start(str(tmp_path / "outer"))
    try:
        tuner = XLATuner(
            log_dir=str(tmp_path / "logs"),
            verbose=0,
            analyze_hlo=False,
            profile_steps=(0, 1),
        )
        history = conv_model().fit(
            x, y, batch_size=16, epochs=1, verbose=0, callbacks=[tuner]
        )
    finally:
        tf.profiler.experimental.stop()
    assert len(history.history["loss"]) == 1
    assert "profiler-busy" in tuner.report.finding_codes()


def test_dispatch_bound_lint():
    x = np.ones((512, 2), "float32")
    y = np.ones((512, 1), "float32")
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile("sgd", "mse")
    tuner = XLATuner(verbose=0, analyze_hlo=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.fit(x, y, batch_size=4, epochs=1, verbose=0, callbacks=[tuner])
    median = tuner.report.epochs[0].step_time_ms["median"]
    codes = tuner.report.finding_codes()
    assert ("dispatch-bound-steps" in codes) == (median < 1.0)


def test_batch_from_signature_rebuilds_structure():
    sig = Signature(
        0,
        (
            TensorSignature("x/ids", (2, 3), "int32"),
            TensorSignature("x/mask", (2, 3), "bool"),
            TensorSignature("y/0", (2,), "float32"),
            TensorSignature("y/1", (2, 4), "float32"),
        ),
    )
    x, y = batch_from_signature(sig)
    assert sorted(x) == ["ids", "mask"]
    assert x["ids"].dtype == tf.int32 and x["mask"].shape == (2, 3)
    assert [t.shape for t in y] == [(2,), (2, 4)]


def test_tensor_core_alignment_on_gpu_only():
    from keras_xla.core.hardware import DeviceInfo
    from keras_xla.tf_backend.alignment import tensor_core_misalignment

    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    try:
        model = keras.Sequential(
            [
                keras.Input((16,)),
                keras.layers.Dense(12, name="odd"),
                keras.layers.Dense(16, name="even"),
            ]
        )
    finally:
        keras.mixed_precision.set_global_policy("float32")
    gpu = [DeviceInfo("CPU"), DeviceInfo("GPU", "/gpu:0", (8, 0))]
    assert tensor_core_misalignment(model, 30, gpu) == [
        "odd units=12",
        "batch size 30",
    ]
    assert tensor_core_misalignment(model, 30, [DeviceInfo("CPU")]) == []
    plain = dense_model(6, hidden=(8,), outputs=4)  # float32: nothing to align
    assert tensor_core_misalignment(plain, 30, gpu) == []
