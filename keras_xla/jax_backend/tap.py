"""The iterator tap: every batch's shapes, as the compiled step sees them.

Keras's JAX trainer calls `model.train_function(state, iterator)` (and
`test_function`) and the step pulls its batch (or `steps_per_execution`
batches) from the iterator. The tap wraps the function and hands it an
iterator that notes each batch's signature on the way: the readable path
of every input (`x`, `x/tokens`, `y`, `sample_weight`), its shape and its
dtype canonicalized as JAX does before compiling (int64 -> int32 and
float64 -> float32 without `jax_enable_x64`), so host data of a wider
dtype is not taken for a new signature. Each call of the function is one
`TapCall`: its steps' signatures and the compile events JAX reported
inside it (they fire synchronously in the call).
"""

from __future__ import annotations

import dataclasses
import functools
import time
from typing import Any

import numpy as np

from keras_xla.core.batch_paths import flatten_with_paths
from keras_xla.core.signatures import Signature, TensorSignature
from keras_xla.jax_backend.compile_events import CompileEvents

FUNCTIONS = ("train", "test")


@functools.lru_cache(maxsize=64)
def canonical_dtype(dtype: Any) -> str:
    """The dtype JAX compiles for an input of `dtype` (its name)."""
    import jax

    return np.dtype(jax.dtypes.canonicalize_dtype(dtype)).name


def signature_of(data: Any) -> Signature:
    """The signature a batch compiles on (see the module docstring)."""
    return Signature(
        0,
        tuple(
            TensorSignature(
                path, tuple(int(d) for d in a.shape), canonical_dtype(a.dtype)
            )
            for path, a in flatten_with_paths(data)
        ),
    )


@dataclasses.dataclass(slots=True)
class TapCall:
    """One call of a tapped step function (`"train"` or `"test"`).

    Attributes:
        signatures: One signature per batch the call pulled.
        events: JAX's compile events of the step function in the call.
        own: The tap's own seconds in the call.
        input: The seconds the call waited for its batches (`next()` on
            Keras's iterator).
        other: Compilations of other functions JAX reported during the
            call (Keras's helpers, a callback's own `jit`).
        source: The step function called (untapped): whose compiled
            shapes the call's signatures are.
    """

    function: str
    signatures: list = dataclasses.field(default_factory=list)
    events: list = dataclasses.field(default_factory=list)
    own: float = 0.0
    input: float = 0.0
    source: Any = None
    other: int = 0


class _TappedIterator:
    """Passes batches through, noting each one's signature."""

    __slots__ = ("_iterator", "_call", "_tap")

    def __init__(self, iterator: Any, call: TapCall, tap: StepTap) -> None:
        self._iterator, self._call, self._tap = iterator, call, tap

    def __iter__(self):
        return self

    def __next__(self):
        asked = time.perf_counter()
        data = next(self._iterator)
        start = time.perf_counter()
        # A batch the bucket switch took already says how long it waited.
        self._call.input += start - asked + getattr(self._iterator, "waited", 0)
        try:
            self._call.signatures.append(self._tap.signature(data))
        except Exception as error:  # noqa: BLE001 - never stop training
            self._tap.unreadable.append(f"{type(error).__name__}: {error}")
        self._call.own += time.perf_counter() - start
        return data


class Taken:
    """One batch the per-shape switch took from Keras's iterator, as an
    iterator, with the seconds it `waited` for it: a side tapped on its
    own (buckets) counts that wait as the call's."""

    __slots__ = ("_data", "waited")

    def __init__(self, data: Any, waited: float = 0.0) -> None:
        self._data, self.waited = [data], waited

    def __iter__(self):
        return self

    def __next__(self):
        if not self._data:
            raise StopIteration
        return self._data.pop()


class StepTap:
    """Wraps a model's train and test functions for one fit.

    Args:
        events: The fit's compile events (taken at the end of each call).
    """

    def __init__(self, events: CompileEvents) -> None:
        self.events = events
        self.calls: dict[str, list[TapCall]] = {f: [] for f in FUNCTIONS}
        # Calls no batch-begin hook announced (a callback's `evaluate`).
        self.outside: list[TapCall] = []
        self._armed = dict.fromkeys(FUNCTIONS, 0)
        # A batch of each signature (its specs), for the HLO analysis.
        self.examples: dict[Signature, Any] = {}
        # Signatures by a batch's structure, shapes and dtypes.
        self._seen: dict[tuple, Signature] = {}
        self.error_handler = None  # called with (function, exception)
        self.on_return = None  # called when an announced call returns
        # Why a batch's signature could not be read (training went on).
        self.unreadable: list[str] = []
        self._others_at_arm = 0

    def arm(self, function: str) -> None:
        """A batch-begin hook announced a call of `function`: compilations
        of other functions from now on (a later callback's) are its."""
        self._armed[function] += 1
        self._others_at_arm = self.events.other_compilations

    def signature(self, data: Any) -> Signature:
        """`data`'s signature: looked up by its structure, shapes and
        dtypes (one flatten in JAX's C++), read in full only for a batch
        of a kind not seen before, whose specs are kept as an example
        for the HLO analysis."""
        import jax

        leaves, structure = jax.tree_util.tree_flatten(data)
        key = (structure, *((a.shape, a.dtype) for a in leaves))
        sig = self._seen.get(key)
        if sig is None:
            sig = signature_of(data)
            if len(self._seen) < 4096:
                self._seen[key] = sig
            if sig not in self.examples and len(self.examples) < 64:
                self.examples[sig] = _specs(data)
        return sig

    def wrap(self, function: str, fn: Any) -> Any:
        """`fn` (a Keras `train_function`/`test_function`) tapped."""
        fn = untapped(fn)

        def tapped(state, iterator):
            entered = time.perf_counter()
            hooked = self._armed[function] > 0
            others = self.events.other_compilations
            if hooked:
                self._armed[function] -= 1
                others = self._others_at_arm
            call = TapCall(function, source=fn)
            tapped_iterator = _TappedIterator(iterator, call, self)
            call.own = time.perf_counter() - entered
            try:
                result = fn(state, tapped_iterator)
                if hooked and self.on_return is not None:
                    self.on_return(
                        time.perf_counter(),
                        call.own,
                        _readiness(result),
                        call.input,
                    )
                return result
            except StopIteration:
                raise  # Keras's end of the data
            except Exception as error:
                if self.error_handler is not None:
                    self.error_handler(function, error)
                raise
            finally:
                call.events = self.events.take(function)
                call.other = self.events.other_compilations - others
                (self.calls[function] if hooked else self.outside).append(call)

        tapped._keras_xla_tapped = fn
        return tapped

    def take(self, function: str) -> list[TapCall]:
        """`function`'s hooked calls since the last `take`."""
        calls, self.calls[function] = self.calls[function], []
        return calls

    def take_outside(self) -> list[TapCall]:
        calls, self.outside = self.outside, []
        return calls


def _readiness(result: Any) -> Any:
    """`is_ready` of one of a step's logs (all of one jitted call's
    outputs are ready together; the logs are not donated to the next
    call, unlike its state), or None."""
    try:
        logs = result[0]
        value = next(iter(logs.values())) if isinstance(logs, dict) else None
        return getattr(value, "is_ready", None)
    except Exception:  # noqa: BLE001 - never stop training
        return None


def untapped(fn: Any) -> Any:
    """The function a tap wrapped (or `fn` itself)."""
    return getattr(fn, "_keras_xla_tapped", None) or fn


def _specs(data: Any) -> Any:
    """`jax.ShapeDtypeStruct`s of a batch (with its sharding, if any)."""
    import jax

    def spec(a):
        if not hasattr(a, "shape"):
            return a
        sharding = getattr(a, "sharding", None)
        return jax.ShapeDtypeStruct(
            a.shape, jax.dtypes.canonicalize_dtype(a.dtype), sharding=sharding
        )

    return jax.tree_util.tree_map(spec, data)
