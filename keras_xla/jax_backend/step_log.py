"""JaxStepLog: a fit's step calls on JAX, as step records.

The timer (`core.step_timer.StepTimer`) stamps each call's start from
the batch-begin hook, its return from the tap and its completion from the
batch-end hook (JAX returns before the step's work is done); the tap
(`tap.StepTap`) gives the same calls' batch signatures and the compile
events JAX reported inside them. Paired in order, they make
`StepRecord`s whose compilations are JAX's own events, not inferred: each
event of the step function is matched to the next step of the call whose
signature the function had not run before. An event with no such step
compiled known shapes again (the step function was rebuilt: a retrace);
a new signature with no event was compiled before (an earlier fit, or
the persistent cache's hit).
"""

from __future__ import annotations

import dataclasses
import weakref
from typing import Any

from keras_xla.core.signatures import Signature, SignatureTracker
from keras_xla.core.step_timer import StepTimer
from keras_xla.core.timing import StepRecord
from keras_xla.jax_backend.tap import StepTap, TapCall

# A model's compiled signatures outlive a fit: JAX keeps the compiled
# step on the model's train function across fits.
_TRACKERS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


class Trackers:
    """The compiled signatures of each of a model's step functions.

    Each jitted step function compiles its own shapes: a shape the no-XLA
    baseline's step or another "auto" candidate's ran is not known to the
    XLA step, so its first compilation there is explained against the
    XLA step's own earlier shapes (a partial last batch, not a retrace),
    as each TensorFlow step variant keeps its own.
    """

    def __init__(self) -> None:
        self._by_function = weakref.WeakKeyDictionary()
        self._by_id: dict[int, SignatureTracker] = {}

    def of(self, function: Any) -> SignatureTracker:
        """`function`'s tracker (None: the calls of an unknown one)."""
        try:
            return self._by_function.setdefault(function, SignatureTracker())
        except TypeError:  # not weak-referenceable (None, a builtin)
            return self._by_id.setdefault(id(function), SignatureTracker())


def trackers_of(model: Any) -> Trackers:
    """The model's `Trackers`, kept across fits."""
    try:
        return _TRACKERS.setdefault(model, Trackers())
    except TypeError:  # not weak-referenceable: per fit
        return Trackers()


@dataclasses.dataclass
class JaxStepRecord(StepRecord):
    """A `StepRecord` whose compile seconds are JAX's, not estimated, with
    the call's persistent-cache hits (no compilation) and JAX's seconds of
    loading them."""

    cache_hits: int = 0
    hit_seconds: float = 0.0


class JaxStepLog:
    """The timed, tapped calls of the train and test functions
    (`steps_per_call`: the model's `steps_per_execution`)."""

    def __init__(
        self, steps_per_call: int, tap: StepTap, trackers: Trackers
    ) -> None:
        self.tap = tap
        self.trackers = trackers
        self.timer = StepTimer(
            steps_per_call, 1 << 30, record_type=JaxStepRecord
        )
        tap.on_return = self.timer.returned
        self.records: dict[str, list[StepRecord]] = {"train": [], "test": []}
        self.wait = True  # until `abort`
        # The epoch's cache hits and misses so far (the owner's cache
        # labels read and reset them).
        self.cache = [0, 0]
        self._retraces: dict[str, int] = {"train": 0, "test": 0}
        # A call's results and its end are the timer's (any thread).
        self.complete = self.timer.complete
        self.close = self.timer.close

    def begin(self, function: str, batch: int, now: float) -> None:
        self.timer.begin(function, batch, now)
        self.tap.arm(function)

    def collect(
        self, function: str, next_step: int | None = None
    ) -> list[StepRecord]:
        """Turns `function`'s pending calls into records (after their
        results exist, unless `wait` was turned off); returns all of its
        records so far. (`next_step` is TensorFlow's probe's; the tap
        reads each call's batches itself.)"""
        timed = self.timer.flush(function, wait=self.wait)
        calls = self.tap.take(function)
        records = self.records[function]
        for i, record in enumerate(timed):
            call = calls[i] if i < len(calls) else TapCall(function)
            record.signatures = [(s,) for s in call.signatures]
            record.other_compilations = call.other
            tracker = self.trackers.of(call.source)
            self._detect(function, record, call.events, tracker)
            if record.signatures or record.measured_compile_seconds:
                records.append(record)
        return records

    def take(self, function: str) -> list[StepRecord]:
        """Closes and collects `function`, and hands over its records;
        their cache hits and misses count in the epoch's (`cache`)."""
        self.close()
        self.collect(function)
        records, self.records[function] = self.records[function], []
        self.cache[0] += sum(r.cache_hits for r in records)
        self.cache[1] += sum(len(r.new) for r in records)
        return records

    def compilations(self, long_call: bool) -> int | None:
        """The recompilation guard's look: whether the last train call
        compiled, as JAX's events say, however long it ran (the tap
        counts other functions' compilations per call: 0)."""
        calls = self.tap.calls["train"]
        return 0 if calls and calls[-1].events else None

    def abort(self) -> None:
        """The fit raised: collecting no longer waits for results (a
        call's batch end may never come)."""
        self.wait = False

    def _detect(
        self,
        function: str,
        record: JaxStepRecord,
        events: list,
        tracker: SignatureTracker,
    ) -> None:
        """Marks the call's compilations (`record.new`) from its events,
        against the shapes its step function (`tracker`) compiled."""
        fresh = []
        for j, (sig,) in enumerate(record.signatures):
            if tracker.observe(function, sig):
                fresh.append(j)
        for event in events:
            if event.cache_hit:
                record.cache_hits += 1
                record.hit_seconds += event.seconds
                if fresh:
                    fresh.pop(0)
                continue
            if fresh:
                j = fresh.pop(0)
                compiled = tracker.compiled(function)
                sig = record.signatures[j][0]
                before = compiled[: compiled.index(sig)]
            else:
                j = max(len(record.signatures) - 1, 0)
                if not record.signatures:
                    record.signatures = [(Signature(0, ()),)]
                self._retraces[function] += 1
                old = record.signatures[j][0]
                sig = Signature(self._retraces[function], old.tensors)
                before = tracker.compiled(function)
                tracker.observe(function, sig)
                record.signatures[j] = (sig,)
            record.new.append((j, 0))
            record.previous[j, 0] = before
            record.measured_compile_seconds.append(event.seconds)

    def drain(self, when: str) -> list[dict]:
        """Calls of the step functions outside the fit's steps (a
        callback's `evaluate`): their compilations, found `when`, as
        report entries."""
        found = []
        for call in self.tap.take_outside():
            tracker = self.trackers.of(call.source)
            for sig in call.signatures:
                tracker.observe(call.function, sig)
            compiled = [e for e in call.events if not e.cache_hit]
            if not compiled:
                continue
            seconds = sum(e.seconds for e in compiled)
            shapes = call.signatures[0].shapes() if call.signatures else {}
            found.append(
                {
                    "function": call.function,
                    "shapes": shapes,
                    "compilations": len(compiled),
                    "compile_seconds": round(seconds, 4),
                    "found": when,
                }
            )
        return found
