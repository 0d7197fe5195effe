"""Gradient accumulation inside one compiled step.

A large effective batch that does not fit memory is split into `k` equal
micro-batches inside the compiled step: a `tf.while_loop` over static-size
slices, losses and predictions gathered in `TensorArray`s, gradients
summed in the loop carry. XLA compiles it once, with no Python loop
unrolled per micro-batch.
"""

from __future__ import annotations

import tensorflow as tf


def accumulate_gradients(loss_and_grads, data, k: int):
    """`(loss, y_pred, grads)` of the whole batch `data` (a structure of
    tensors, `None` leaves allowed) from `k` equal micro-batches (`k`
    divides the batch size), each given by `loss_and_grads(micro_batch)`:
    the mean loss, the concatenated predictions and the mean gradients.

    Micro-batch 0 runs first (it gives the structure of `y_pred`), the
    other `k - 1` in a `tf.while_loop` over static-size slices.
    """
    micro = map_present(lambda t: _split(t, k), data)
    loss, y_pred, grads = loss_and_grads(map_present(lambda t: t[0], micro))
    losses = tf.TensorArray(tf.float32, size=k).write(
        0, tf.cast(loss, tf.float32)
    )
    preds = tf.nest.map_structure(
        lambda p: tf.TensorArray(p.dtype, size=k, element_shape=p.shape).write(
            0, p
        ),
        y_pred,
    )

    def body(i, losses, preds, acc):
        part = map_present(lambda t: t[i], micro)
        loss, y_pred, grads = loss_and_grads(part)
        losses = losses.write(i, tf.cast(loss, tf.float32))
        preds = tf.nest.map_structure(
            lambda ta, p: ta.write(i, p), preds, y_pred
        )
        acc = [a + tf.cast(g, a.dtype) for a, g in zip(acc, grads)]
        return i + 1, losses, preds, acc

    _, losses, preds, acc = tf.while_loop(
        lambda i, *_: i < k,
        body,
        [tf.constant(1), losses, preds, list(grads)],
    )
    y_pred = tf.nest.map_structure(lambda ta: _merge(ta.stack()), preds)
    grads = [a / k for a in acc]
    return tf.reduce_mean(losses.stack()), y_pred, grads


def check_divisible(x, k: int) -> None:
    """Raises a clear error when `k` does not divide the batch size of `x`:
    a `ValueError` at trace time when the size is static, else an
    assertion checked at run time (outside any XLA cluster)."""
    if k == 1:
        return
    first = tf.nest.flatten(x)[0]
    batch = first.shape[0]
    if batch is not None and batch % k:
        raise ValueError(
            f"`accumulation_steps={k}` does not divide the batch size "
            f"{batch}: pick a batch size that is a multiple of {k}."
        )
    if batch is None:  # Known at run time only (a partial last batch?).
        tf.debugging.assert_equal(
            tf.shape(first)[0] % k,
            0,
            message=(
                f"accumulation_steps={k} does not divide this batch's "
                "size (a partial last batch?): batch with "
                "drop_remainder=True or keras_xla.data.pad_batches"
            ),
        )


def map_present(fn, structure):
    # Keras batches hold None for a missing y or sample_weight.
    return tf.nest.map_structure(
        lambda t: None if t is None else fn(t), structure
    )


def _split(t, k):
    shape = tf.shape(t)
    out = tf.reshape(t, tf.concat([[k, shape[0] // k], shape[1:]], 0))
    static = t.shape.as_list()
    batch = static[0] // k if static and static[0] is not None else None
    out.set_shape([k, batch] + static[1:])
    return out


def _merge(t):
    shape = tf.shape(t)
    return tf.reshape(t, tf.concat([[shape[0] * shape[1]], shape[2:]], 0))
