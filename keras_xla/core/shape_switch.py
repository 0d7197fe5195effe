"""The per-shape fallback: after a recompilation storm, XLA's step for
the shapes it compiled, the step without XLA for every other.

`XLATuner(on_recompile_storm="per_shape")`. PyTorch answers a shape
storm the same way (`set_stance("eager_on_recompile")`): a shape the
compiled step knows runs its program; a new one runs without compiling.
XLA has no symbolic shapes, so the test is exact: the batch's shapes
(`guard.shapes_key`) against the set the XLA step compiled when the
guard acted, per step function. That set does not grow: a new shape
never compiles from then on.

Each backend puts the switch between Keras's loop and its two step
functions (`dispatch`): it takes the call's one batch from Keras's
iterator, asks `uses_xla` and hands the batch on to the chosen
function. One batch per call: with `steps_per_execution > 1` a call's
batches could need both sides, and the guard falls back instead.

Pure logic: nothing here imports TensorFlow, Keras or JAX.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from keras_xla.core.batch_paths import flatten_with_paths
from keras_xla.core.guard import shapes_key, signature_key


def batch_key(data: Any) -> tuple:
    """A batch's shapes as `guard.shapes_key` writes a signature's."""
    pairs = flatten_with_paths(data)
    return shapes_key({path: [int(d) for d in a.shape] for path, a in pairs})


def x_size(signature: Any, dim: int) -> int | None:
    """The size of `x`'s dimension `dim` in a `Signature` (None: none)."""
    for t in signature.tensors:
        if t.path == "x" and len(t.shape) > dim:
            return int(t.shape[dim])
    return None


class ShapeSwitch:
    """Which of a step function's batches XLA's program runs.

    Args:
        compiled: Per step function (`"train"`, `"test"`), the
            `shapes_key`s its XLA step had compiled when the guard acted.
    """

    def __init__(self, compiled: dict[str, set[tuple]]) -> None:
        self.compiled = compiled

    def uses_xla(self, function: str, data: Any) -> bool:
        return batch_key(data) in self.compiled.get(function, ())

    def knows(self, function: str, signature: Any) -> bool:
        """Whether a step of `signature` (a `Signature`) ran XLA's step."""
        return signature_key(signature) in self.compiled.get(function, ())

    def ran_xla(self, record: Any) -> bool:
        """Whether every step of a train call (a `StepRecord`) ran XLA's
        step."""
        return bool(record.signatures) and all(
            self.knows("train", step[0]) for step in record.signatures
        )

    def dispatch(
        self,
        function: str,
        take: Callable[[], Any],
        xla: Callable[[Any, Any], Any],
        plain: Callable[[Any, Any], Any],
    ) -> Any:
        """One call: the batch `take()` returns (its `StopIteration` is
        Keras's end of data) runs `xla(batch, None)` where XLA compiled
        its shapes, else `plain(batch, None)`. (The second argument names
        the dimensions a padded batch varies in: `BucketSwitch`'s.)"""
        data = take()
        return (xla if self.uses_xla(function, data) else plain)(data, None)


class BucketSwitch(ShapeSwitch):
    """`on_recompile_storm="bucket"`: each batch padded up to a bucket
    edge of the drifting dimension, always on XLA's step.

    `x`'s dimension `dim` is padded with `pad_value` (the value the
    model's mask hides: `Embedding(mask_zero=True)`'s 0, `Masking`'s
    `mask_value`). Where `y` has that dimension too (a label per token)
    it is padded with 0 and a `sample_weight` is added: 0 on the padding,
    and on the batch's own positions 1 where the prediction carries the
    mask (`masked_loss`: Keras divides the loss by the mask's count),
    else `edge / size` (Keras divides it by every position, weighted or
    not): the loss, its gradients and weighted metrics are those of the
    unpadded batch (measured: weights within 1e-7 after a step). A size
    above the largest edge grows a new one (`grown`), a quarter above the
    old, within `largest`. A batch the plan does not fit (another
    structure, its own `sample_weight`, a size whose program would not
    fit the device's memory) runs per shape.

    Args:
        compiled: As `ShapeSwitch`'s (for the batches run per shape).
        dim: The drifting dimension of `x`.
        edges: The sizes to pad to, increasing.
        pad_value: What `x` is padded with.
        labels: Whether `y` has the dimension (padded, weighted).
        masked_loss: Whether the loss divides by the mask's count.
        largest: The largest size whose program fits the device's memory
            (`buckets.largest_fitting`; None: no limit).
    """

    def __init__(
        self,
        compiled: dict[str, set[tuple]],
        dim: int,
        edges: list[int],
        pad_value: Any,
        labels: bool,
        masked_loss: bool = False,
        largest: int | None = None,
    ) -> None:
        super().__init__(compiled)
        self.dim, self.edges = dim, sorted(edges)
        self.pad_value, self.labels = pad_value, labels
        self.masked_loss, self.largest = masked_loss, largest
        self.grown: list[int] = []

    def knows(self, function: str, signature: Any) -> bool:
        """A padded batch (`x` at an edge) ran XLA's step too."""
        if x_size(signature, self.dim) in self.edges:
            return True
        return super().knows(function, signature)

    def mark_planned(self, records: list, off_from: list, epoch: int) -> None:
        """Marks the train calls of `epoch` from `off_from` on whose
        batches were padded to an edge (`StepRecord.planned`): their
        compilations are the plan's."""
        off_epoch, off_step = off_from
        for record in records:
            if epoch == off_epoch and record.first_step < off_step:
                continue
            record.planned = self.ran_xla(record)

    def edge(self, size: int) -> int | None:
        """The edge a batch of `size` is padded to (grown if none; None
        above `largest`)."""
        for edge in self.edges:
            if edge >= size:
                return edge
        if self.largest is not None and size > self.largest:
            return None
        top = self.edges[-1] if self.edges else size
        grown = max(size, top + -(-top // 4))
        if self.largest is not None:
            grown = min(grown, self.largest)
        self.edges.append(grown)
        self.grown.append(grown)
        return grown

    def pad(self, data: Any) -> tuple | None:
        """`data` padded as the plan says, or None where it does not fit
        (then it runs per shape)."""
        if not isinstance(data, tuple) or len(data) not in (2, 3):
            return None
        if len(data) == 3 and data[2] is not None:
            return None  # the batch's own sample weights
        x, y = data[0], data[1]
        if not hasattr(x, "shape") or len(x.shape) <= self.dim:
            return None
        size = int(x.shape[self.dim])
        edge = self.edge(size)
        if edge is None:
            return None
        x = _pad_to(np.asarray(x), self.dim, edge, self.pad_value)
        if not self.labels:
            return (x, y)
        y = np.asarray(y)
        if len(y.shape) <= self.dim or y.shape[self.dim] != size:
            return None
        shape = list(y.shape[: self.dim + 1])
        shape[self.dim] = edge
        weights = np.zeros(shape, np.float32)
        own = 1.0 if self.masked_loss else edge / size
        weights[(slice(None),) * self.dim + (slice(0, size),)] = own
        return (x, _pad_to(y, self.dim, edge, 0), weights)

    def dispatch(self, function, take, xla, plain):
        data = take()
        padded = self.pad(data)
        if padded is not None:
            return xla(padded, (0, self.dim))
        return (xla if self.uses_xla(function, data) else plain)(data, None)


def _pad_to(array: Any, dim: int, size: int, value: Any) -> Any:
    extra = size - array.shape[dim]
    if extra <= 0:
        return array
    widths = [(0, 0)] * array.ndim
    widths[dim] = (0, extra)
    return np.pad(array, widths, constant_values=value)
