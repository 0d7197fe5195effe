"""An in-graph shape probe for jit-compiled train and test steps.

The probe runs inside the compiled step, so it sees the concrete shapes XLA
compiles for, without a host callback (`tf.py_function` would break XLA).
At trace time it notes each input's path, static shape and dtype; for the
dimensions unknown at trace time it writes `tf.shape` values into a small
ring buffer variable, one row per step: `[step, trace, dims..., wait]`
(`wait`: the microseconds the train call waited for the step's batch,
where `input_wait` stamped it, else -1). After each call of the train
function the host reads that one variable (about 15 us) and rebuilds the
exact signature of every step that ran, also with
`steps_per_execution > 1`, where several steps run in one call.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from typing import Any

import numpy as np
import tensorflow as tf

from keras_xla.core.batch_paths import flatten_with_paths
from keras_xla.core.signatures import Signature, TensorSignature
from keras_xla.tf_backend.hlo import PROBE_SCOPE

logger = logging.getLogger(__name__)

# step, trace, up to 30 dynamic dimensions, and the wait for the batch
DIM_SLOTS = 30
ROW_WIDTH = DIM_SLOTS + 3
# Past 30 dynamic dimensions, the first 29 are kept and the rest folded
# into one hashed value in the last slot, so a change in any of them is
# still a new signature (and a counted compilation).
KEPT_DIMS = DIM_SLOTS - 1
FOLDED = "(folded dimensions)"
# Ring rows per step of a call: the host reads the ring once per run (or
# when it is about to wrap), not after every step. A read right after a
# step waits for the runtime and costs ~0.1 ms a step; a read per run
# costs nothing measurable.
RING_CALLS = 64


class _Trace:
    """What one trace of the step looked like: paths, static shapes, dtypes."""

    def __init__(self, entries: list[tuple[str, tuple, str]]) -> None:
        self.entries = entries
        self.dynamic = [
            (i, d)
            for i, (_, shape, _) in enumerate(entries)
            for d, size in enumerate(shape)
            if size is None
        ]
        self.fold = len(self.dynamic) > DIM_SLOTS

    def signature(self, trace_id: int, dims: np.ndarray) -> Signature:
        shapes = [list(shape) for _, shape, _ in self.entries]
        kept = self.dynamic[:KEPT_DIMS] if self.fold else self.dynamic
        for (i, d), size in zip(kept, dims):
            shapes[i][d] = int(size)
        tensors = tuple(
            TensorSignature(path, tuple(shape), dtype)
            for (path, _, dtype), shape in zip(self.entries, shapes)
        )
        if self.fold:
            # A pseudo input whose dim 1 is the hash of the folded dims.
            tensors += (TensorSignature(FOLDED, (1, int(dims[KEPT_DIMS])), ""),)
        return Signature(trace_id, tensors)


class ShapeProbe:
    """Records the concrete input signature of every step of one function.

    Under a `tf.distribute` strategy with several replicas, the buffers are
    sync-on-read variables: each replica writes its own copy (its own
    shapes, which differ when a partial batch splits unevenly), and the host
    reads every copy.

    Args:
        function: `"train"` or `"test"`.
        slots: Ring buffer rows; must be at least the number of steps one
            call of the function runs (`steps_per_execution`).
        strategy: The model's distribution strategy, or `None`.
        stamps: The `input_wait.InputStamps` whose wait each step takes
            into its row, or None (the wait is not seen).
    """

    def __init__(
        self,
        function: str,
        slots: int = 1,
        strategy: Any = None,
        stamps: Any = None,
    ) -> None:
        if slots < 1:
            raise ValueError(f"slots must be >= 1, got {slots}.")
        self.slots = int(slots)
        self.stamps = stamps
        # The waits (seconds, or None) of the steps the last read returned.
        self.waits: list[float | None] = []
        replicas = getattr(strategy, "num_replicas_in_sync", 1)
        self._strategy = strategy if replicas > 1 else None
        strategy = self._strategy
        scope = strategy.scope if strategy else contextlib.nullcontext
        with tf.init_scope(), scope():
            kwargs = {"trainable": False}
            if strategy is not None:
                kwargs.update(
                    synchronization=tf.VariableSynchronization.ON_READ,
                    aggregation=tf.VariableAggregation.NONE,
                )
            name = f"keras_xla_{function}_probe_"
            rows = tf.fill([self.slots, ROW_WIDTH], tf.constant(-1, tf.int64))
            self._rows = tf.Variable(rows, name=name + "rows", **kwargs)
            zero = tf.constant(0, tf.int64)
            self._counter = tf.Variable(zero, name=name + "counter", **kwargs)
        self._traces: list[_Trace] = []
        self._signatures: dict[bytes, Signature] = {}
        self._last_step = 0
        self._lock = threading.Lock()
        self._trace_times: list[tuple[float, float]] = []
        # The TensorFlow ops of the last traced step (probe's left out).
        self.step_ops: frozenset[str] = frozenset()

    @property
    def steps_recorded(self) -> int:
        return self._last_step

    @property
    def folded(self) -> list[tuple[str, int]]:
        """The (input, dimension) pairs past the probe's 30 that are
        recorded only as a hash (the last trace's)."""
        if not self._traces or not self._traces[-1].fold:
            return []
        trace = self._traces[-1]
        return [(trace.entries[i][0], d) for i, d in trace.dynamic[KEPT_DIMS:]]

    @property
    def traced(self) -> bool:
        """Whether a step function carrying this probe was traced."""
        return bool(self._traces)

    @tf.autograph.experimental.do_not_convert
    def record(self, data: Any) -> None:
        """Adds the recording ops to the step being traced, under the
        `PROBE_SCOPE` name scope (so the HLO analysis can leave them out)."""
        with tf.name_scope(PROBE_SCOPE):
            pairs = flatten_with_paths(data)
            entries = [
                (path, tuple(t.shape.as_list()), t.dtype.name)
                for path, t in pairs
            ]
            trace = _Trace(entries)
            trace_id = len(self._traces)
            self._traces.append(trace)
            dims = []
            for i, d in trace.dynamic:
                dims.append(tf.shape(pairs[i][1], out_type=tf.int64)[d])
            if trace.fold:
                folded = tf.constant(0, tf.int64)
                for size in dims[KEPT_DIMS:]:  # wraps: a hash, not a size
                    folded = folded * 1_000_003 + size + 1
                dims = dims[:KEPT_DIMS] + [folded]
            step = self._counter.assign_add(1)
            pad = [tf.constant(0, tf.int64)] * (DIM_SLOTS - len(dims))
            if self.stamps is not None:
                wait = self.stamps.take()
            else:
                wait = tf.constant(-1, tf.int64)
            row = tf.stack(
                [step, tf.constant(trace_id, tf.int64)] + dims + pad + [wait]
            )
            slot = tf.math.floormod(step, self.slots)
            # assign(tensor_scatter_nd_update) rather than scatter_nd_update:
            # sync-on-read (per-replica) variables only implement assign.
            self._rows.assign(
                tf.tensor_scatter_nd_update(
                    self._rows,
                    tf.reshape(slot, [1, 1]),
                    tf.reshape(row, [1, ROW_WIDTH]),
                )
            )

    def add_trace(
        self, start: float, seconds: float, ops: frozenset[str] = frozenset()
    ) -> None:
        """Notes that tracing the step began at `start` (perf_counter) and
        took `seconds`, and which ops the traced step holds."""
        with self._lock:
            self._trace_times.append((start, seconds))
            self.step_ops = ops or self.step_ops

    def pop_traces(self) -> list[tuple[float, float]]:
        with self._lock:
            traces, self._trace_times = self._trace_times, []
        return traces

    def read_new(self) -> list[tuple[Signature, ...]]:
        """The steps that ran since the last read, in order: for each step,
        one signature per replica."""
        if self._strategy is None:
            buffers = [self._rows.value().numpy()]
        else:
            buffers = [
                v.numpy()
                for v in self._strategy.experimental_local_results(self._rows)
            ]
        last = self._last_step
        per_replica = []
        for rows in buffers:
            fresh = rows[rows[:, 0] > last]
            per_replica.append(fresh[np.argsort(fresh[:, 0])])
        steps = min(len(rows) for rows in per_replica)
        self.waits = [
            float(us) / 1e6 if us >= 0 else None
            for us in per_replica[0][:steps, -1]
        ]
        if not steps:
            return []
        self._last_step = int(per_replica[0][steps - 1, 0])
        return [
            tuple(self._signature(rows[i]) for rows in per_replica)
            for i in range(steps)
        ]

    def _signature(self, row: np.ndarray) -> Signature:
        key = row[1:-1].tobytes()
        sig = self._signatures.get(key)
        if sig is None:
            trace_id = int(row[1])
            sig = self._traces[trace_id].signature(trace_id, row[2:-1])
            self._signatures[key] = sig
        return sig


def with_probe(get_probe, body):
    """`body(data)` that first records `data` in the probe `get_probe()`
    returns (looked up when the step is traced) and times its tracing."""

    @tf.autograph.experimental.do_not_convert
    def probed(data):
        probe = get_probe()
        start = time.perf_counter()
        if probe is not None:
            try:
                probe.record(data)
            except Exception:  # noqa: BLE001 - never break the user's step
                logger.exception("keras_xla: shape probe failed; unprobed.")
        outputs = body(data)
        if probe is not None:
            probe.add_trace(start, time.perf_counter() - start, _step_ops())
        return outputs

    return probed


# Graph scaffolding, not computation: left out of the step's op count.
SCAFFOLDING = frozenset(
    ("Const", "Placeholder", "ReadVariableOp", "Identity", "IdentityN")
    + ("NoOp", "VarHandleOp", "_Arg", "_Retval")
)


def _step_ops() -> frozenset[str]:
    """The names of the computing ops of the step graph being traced (the
    probe's and graph scaffolding left out); empty when running eagerly."""
    if tf.executing_eagerly():
        return frozenset()
    graph = tf.compat.v1.get_default_graph()
    return frozenset(
        op.name
        for op in graph.get_operations()
        if op.type not in SCAFFOLDING and PROBE_SCOPE not in op.name
    )


def install_probe(model: Any, function: str, holder: dict) -> None:
    """Wraps `model.<function>_step` so that it calls the probe, looked up
    in `holder[function]` when the step is traced (a rebuilt function
    records into a fresh probe); installing twice keeps one wrapper."""
    attr = f"{function}_step"
    current = getattr(model, attr)
    if getattr(current, "_keras_xla_probe", False):
        return
    probed_step = with_probe(lambda: holder.get(function), current)
    probed_step._keras_xla_probe = True
    probed_step.__wrapped__ = current
    # Bypass Keras's attribute tracking: this is a plain function.
    object.__setattr__(model, attr, probed_step)
