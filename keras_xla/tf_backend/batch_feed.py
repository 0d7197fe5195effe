"""A tf.data iterator that hands Keras's step function one batch the
per-shape fallback already took.

The per-shape fallback (`core.shape_switch`) must see a batch's shapes
before it picks the step function, so it takes the batch from Keras's
iterator itself. Keras's step functions take an iterator. Handed a
Python one, Keras calls its XLA step from eager code, and TensorFlow
traces that step again for the eager context: XLA compiles every shape
once more (measured: a known shape's call took 540 ms, the time of its
first compilation, against 2 ms through the graph). Handed a tf.data
iterator of the same element spec, Keras's traced function is reused,
and XLA's programs with it: `BatchFeed` is that iterator. Its generator
yields the one batch put in before each call; it runs in the call
(tf.data's prefetch and autotuning are off), so a batch can never be
read twice or ahead.
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf


def spec_of(data: Any, varies: tuple[int, ...]) -> Any:
    """The element spec of a padded batch: its shapes, but the batch
    dimension and the padded one (where a leaf has the first leaf's size
    in it) unknown, so one trace serves every bucket."""
    first = tf.nest.flatten(data)[0].shape

    def spec(a):
        shape = [
            None
            if i in varies and (i == 0 or (i < len(first) and n == first[i]))
            else n
            for i, n in enumerate(a.shape)
        ]
        return tf.TensorSpec(shape, tf.as_dtype(a.dtype))

    return tf.nest.map_structure(spec, data)


class BatchFeed:
    """One batch at a time into a tf.data iterator of `element_spec`."""

    def __init__(self, element_spec: Any) -> None:
        self.element_spec = element_spec
        # The generator holds the slot, not the feed: no reference cycle
        # keeps the iterator alive past `BatchFeeds.close`.
        self._slot = slot = []

        def batches():
            while True:
                if not slot:
                    raise RuntimeError(
                        "keras_xla: the per-shape feed was read with no "
                        "batch in it."
                    )
                yield slot.pop()

        dataset = tf.data.Dataset.from_generator(
            batches, output_signature=element_spec
        )
        options = tf.data.Options()
        options.autotune.enabled = False
        options.experimental_optimization.inject_prefetch = False
        self._iterator = iter(dataset.with_options(options))

    def holding(self, data: Any) -> Any:
        """The iterator, with `data` its next (and only) batch."""
        self._slot[:] = [data]
        return self._iterator


class BatchFeeds:
    """A feed per element spec (the train and the validation data may
    differ), kept for the fit."""

    def __init__(self) -> None:
        self._feeds: list[BatchFeed] = []

    def of(self, element_spec: Any) -> BatchFeed:
        for feed in self._feeds:
            if feed.element_spec == element_spec:
                return feed
        self._feeds.append(BatchFeed(element_spec))
        return self._feeds[-1]

    def close(self) -> None:
        """Drops the feeds while Python runs (a generator's iterator
        finalized at the interpreter's exit logs an error)."""
        self._feeds.clear()
