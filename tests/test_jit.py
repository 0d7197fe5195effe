import keras
import numpy as np
import pytest
from conftest import dense_model

from keras_xla.tf_backend import jit as jit_lib


def lookup_model():
    inputs = keras.Input((1,), dtype="string")
    ids = keras.layers.StringLookup(vocabulary=["a", "b"], name="vocab")(inputs)
    outputs = keras.layers.Dense(1)(keras.ops.cast(ids, "float32"))
    model = keras.Model(inputs, outputs)
    model.compile("sgd", "mse", jit_compile=True)
    return model


def test_layer_without_jit_is_named():
    model = lookup_model()
    assert model.jit_compile is False  # Keras already turned it off
    info, cause = jit_lib.configure_jit(model, True)
    assert info.enabled is False and info.requested is True
    assert "vocab (StringLookup)" in info.reason
    assert cause[0] == "jit-disabled-by-layer"
    info, cause = jit_lib.configure_jit(model, None)
    assert info.enabled is False
    assert cause[0] == "jit-disabled-by-layer"


def test_run_eagerly_blocks_xla():
    model = dense_model(3, run_eagerly=True)
    info, cause = jit_lib.configure_jit(model, True)
    assert (info.enabled, cause[0]) == (False, "jit-disabled-run-eagerly")


def test_determinism_blocks_xla(monkeypatch):
    monkeypatch.setattr(jit_lib, "op_determinism_enabled", lambda: True)
    info, cause = jit_lib.configure_jit(dense_model(3), True)
    assert (info.enabled, cause[0]) == (False, "jit-disabled-by-determinism")
    assert "enable_op_determinism" in info.reason


def test_strategy_with_replicas_blocks_plain_models(monkeypatch):
    monkeypatch.setattr(jit_lib, "replicas_in_sync", lambda model: 2)
    info, cause = jit_lib.configure_jit(dense_model(3), True)
    assert cause[0] == "jit-disabled-by-strategy"
    assert "2 replicas" in info.reason and "XLAModel" in cause[2]


def test_enable_disable_and_keep():
    model = dense_model(3, jit_compile=False)
    info, cause = jit_lib.configure_jit(model, True)
    assert info.enabled and model.jit_compile is True and cause is None
    info, _ = jit_lib.configure_jit(model, False)
    assert not info.enabled and model.jit_compile is False
    assert "not requested" in info.reason
    info, _ = jit_lib.configure_jit(dense_model(3, jit_compile=True), None)
    assert info.enabled
    info, _ = jit_lib.configure_jit(dense_model(3, jit_compile=False), None)
    assert not info.enabled and "compiled setting is off" in info.reason


def test_bad_value_is_named():
    with pytest.raises(ValueError, match="jit_compile='yes'"):
        jit_lib.configure_jit(dense_model(3), "yes")


def lookup_dataset():
    import tensorflow as tf

    x = tf.constant([["a"], ["b"], ["a"], ["b"]])
    y = np.array([[1.0], [0.0], [1.0], [0.0]], dtype="float32")
    return tf.data.Dataset.from_tensor_slices((x, y)).batch(2)
