"""The train call's wait for its batch, stamped around Keras's get-next.

Keras's TensorFlow train function fetches each batch inside its own
`tf.function` (`iterator.get_next()`) and passes it to the step it compiles
with XLA. The host cannot see that fetch apart from the step: the call
returns when both are done. `InputStamps` adds two `tf.timestamp` ops to
the outer function (never to the compiled step): one with no inputs, which
runs as the function starts, beside the get-next, and one that waits for
the batch. Their difference, in microseconds, goes into one small variable;
the shape probe reads it inside the step that takes the batch and writes it
into that step's row of its ring buffer. So the wait reaches the host with
the step's signature, in the one read per run, and belongs to its step
exactly: a few ops and one variable a call (BENCHMARKS.md, "The input-wait
stamps on TensorFlow", measures what they cost a fast step).

The stamps go in where Keras wraps its step for the outer function
(`_autoconvert_optionals`, called once as the train function is built),
and only where the batch is fetched right before the step: one step per
call (`steps_per_execution=1`), traced (not `run_eagerly`), on one
replica. Elsewhere nothing is added and the wait is not seen (None).
The ops are kept out of auto-clustering's XLA clusters, so they compile
nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import tensorflow as tf

logger = logging.getLogger(__name__)

SCOPE = "keras_xla_input_wait"
# The ops that fetch a batch from a tf.data iterator (plain, optional, or
# a multi-device iterator's shard).
FETCH_OPS = frozenset(
    "IteratorGetNext IteratorGetNextSync IteratorGetNextAsOptional"
    " MultiDeviceIteratorGetNextFromShard".split()
)
# How far back from the batch's tensors the fetch is looked for.
SEARCH_OPS = 64
# The wait of a step whose fetch was not stamped.
UNSEEN = -1


class InputStamps:
    """The wait for the batch of each train call, stamped in the graph
    and handed to the step that takes the batch."""

    def __init__(self) -> None:
        with tf.init_scope():
            self._wait_us = tf.Variable(
                tf.constant(UNSEEN, tf.int64),
                trainable=False,
                name="keras_xla_input_wait_us",
            )

    def wrap(self, step: Callable[[Any], Any]) -> Callable[[Any], Any]:
        """`step(data)` that first stamps the fetch of `data` (when traced
        in the outer function right after the fetch)."""

        @tf.autograph.experimental.do_not_convert
        def stamped(data):
            try:
                self._stamp(data)
            except Exception:  # noqa: BLE001 - never break the user's step
                logger.debug("keras_xla: input stamps left out.", exc_info=1)
            return step(data)

        return stamped

    def _stamp(self, data: Any) -> None:
        if not tf.inside_function():
            return
        tensors = [
            t
            for t in tf.nest.flatten(data, expand_composites=True)
            if isinstance(t, tf.Tensor)
        ]
        if not _fetched(tensors):
            return
        no_clusters = tf.xla.experimental.jit_scope(compile_ops=False)
        with tf.name_scope(SCOPE), no_clusters:
            # No inputs: it runs as the function starts, as the fetch
            # does (ordering the fetch after it would put one more op on
            # the step's path).
            start = tf.timestamp()
            with tf.control_dependencies(tensors):
                end = tf.timestamp()
            self._wait_us.assign(tf.cast((end - start) * 1e6, tf.int64))

    def take(self) -> tf.Tensor:
        """In the step being traced: the wait of the call that fetched its
        batch (microseconds; `UNSEEN` before any stamped call). Every
        stamped call writes it before its step; a step called another way
        (`train_on_batch`, eagerly) reads the last call's, and is none of
        the fit's calls. Only read: a write inside the compiled step
        would cost it one more variable to update."""
        return self._wait_us.read_value()


def _fetched(tensors: list) -> bool:
    """Whether an iterator fetch in the graph being traced produces
    `tensors` (not where the batch came from elsewhere: a loop variable,
    an argument)."""
    graph = tf.compat.v1.get_default_graph()
    seen = set()
    queue = [t.op for t in tensors if t.graph is graph]
    while queue and len(seen) < SEARCH_OPS:
        op = queue.pop()
        if op.name in seen:
            continue
        seen.add(op.name)
        if op.type in FETCH_OPS:
            return True
        queue.extend(t.op for t in op.inputs if t.graph is graph)
    return False


def install(model: Any, make: Callable[[], None], stamps: InputStamps) -> None:
    """Runs `make()` (which builds `model.train_function`) with the step
    that Keras's outer function calls wrapped by `stamps`."""
    convert = getattr(type(model), "_autoconvert_optionals", None)
    if convert is None:
        make()
        return

    def stamped_convert(step):
        return stamps.wrap(convert(model, step))

    # Bypass Keras's attribute tracking: this is a plain function.
    object.__setattr__(model, "_autoconvert_optionals", stamped_convert)
    try:
        make()
    finally:
        object.__delattr__(model, "_autoconvert_optionals")
