"""Whether padding to buckets keeps a fit's result
(`keras_xla.bucket_check`), on small Keras models: what it pads and what
it refuses, with the reason. The fits themselves are in test_parity.py."""

import keras
import pytest

from keras_xla import bucket_check
from keras_xla.core.report import GuardSection
from keras_xla.core.signatures import Signature, TensorSignature

STORM = GuardSection(
    action="", budget=8, epoch=0, step=9, recompilations=9,
    compile_seconds=4.5, saved_seconds=0.0, window=10, compiled=9,
    input="x", dim=1, dims=[1], cause="dynamic_dim",
)  # fmt: skip


def batch(y=(4, 1), **more):
    tensors = [
        TensorSignature("x", (4, 9), "int32"),
        TensorSignature("y", y, "float32"),
    ]
    tensors += [TensorSignature(p, s, "float32") for p, s in more.items()]
    return Signature(0, tuple(tensors))


def model(*layers, loss="mse", **compile_args):
    inputs = keras.Input((None,), dtype="int32")
    x = inputs
    for layer in layers:
        x = layer(x)
    built = keras.Model(inputs, x)
    built.compile("sgd", loss, **compile_args)
    return built


def embedded(*layers, **compile_args):
    return model(keras.layers.Embedding(50, 4, mask_zero=True), *layers,
                 **compile_args)  # fmt: skip


def test_a_masked_pooled_model_is_padded_and_its_labels_left_alone():
    pooled = embedded(keras.layers.GlobalAveragePooling1D(),
                      keras.layers.Dense(1))  # fmt: skip
    plan, why = bucket_check.plan(pooled, batch(), STORM)
    assert why == ""
    assert plan == {
        "dim": 1, "pad_value": 0, "labels": False, "masked_loss": False,
    }  # fmt: skip


def test_labels_per_token_follow_the_loss_division():
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    # The prediction carries the mask: Keras divides by its count.
    tagged = embedded(keras.layers.Dense(3), loss=loss)
    plan, _ = bucket_check.plan(tagged, batch(y=(4, 9)), STORM)
    assert plan["labels"] and plan["masked_loss"]


@pytest.mark.parametrize(
    "build, signature, reason",
    [
        (
            lambda: embedded(keras.layers.Conv1D(2, 3),
                             keras.layers.GlobalMaxPooling1D()),
            batch(),
            "(Conv1D) does not support masking",
        ),
        (
            lambda: model(keras.layers.Embedding(50, 4),
                          keras.layers.GlobalAveragePooling1D()),
            batch(),
            "has mask_zero=False",
        ),
        (
            lambda: embedded(keras.layers.Dense(3), metrics=["mae"]),
            batch(y=(4, 9)),
            "pass them as weighted_metrics",
        ),
        (
            lambda: embedded(
                keras.layers.Dense(3),
                loss=keras.losses.MeanSquaredError(reduction="sum"),
            ),
            batch(y=(4, 9)),
            "the loss reduces with 'sum'",
        ),
        (
            lambda: embedded(keras.layers.GlobalAveragePooling1D()),
            batch(sample_weight=(4,)),
            "this fit's batches hold ['sample_weight', 'x', 'y']",
        ),
    ],
)  # fmt: skip
def test_padding_that_could_change_the_result_is_refused(
    build, signature, reason
):
    plan, why = bucket_check.plan(build(), signature, STORM)
    assert plan is None
    assert reason in why
