"""StepTimer: how long each call of a step function really took.

A step's time ends when its results exist, not when the call returns.
JAX (and TensorFlow on a GPU) returns from the step at once and the device
works on; timing the call would time the dispatch. Keras already waits for
each step's results in one place: before a batch-end hook runs, its
`CallbackList` turns the step's logs into Python numbers, which blocks
until the step has computed them. With every callback async-safe (JAX),
it does so on its own worker thread, so the training thread never waits;
otherwise (TensorFlow, or a callback that is not async-safe) on the
training thread, as it would without the tuner. The tuner's batch-end
hook therefore reads the clock when the call's results exist, at no cost
of its own: `complete()`, from whatever thread the hook runs on.

A call's time is then its share of the loop's timeline: from the later
of its start and the previous call's completion, to the later of its
completion and the next call's start. Where the host runs ahead of the
device (a pipelined loop), that is the time between two completions;
where the device waits for the host (a synchronous backend, or a step
shorter than its dispatch), the time between two starts, Keras's own
work between the steps included. Either way the calls' times add up to
the loop's wall time, and each is the loop's true period. A run's last
call ends at its completion (what Keras does next, ending the data and
the epoch, is not a step); a call without a completion (it raised, or
Keras's loop gave no batch end) ends where the next call begins. The
host's own time in the call (start to return, `returned()`) is kept as
the dispatch time, and the tuner's own time in its hooks as its cost.

Stamps from a worker thread can be late, and come in bursts: it needs the
interpreter lock, which a training thread that is busy launching steps
keeps. So when a call begins, the timer also asks the call before it,
without waiting, whether its results exist (`jax.Array.is_ready`): if
they do, they existed by then, which dates the completion of every step
that finished before the next one began exactly. And the device finishes
steps in order, so a later call's completion bounds an earlier one's.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable

from keras_xla.core.timing import StepRecord

# Waiting for results that do not come (a callback before the tuner's
# raised on Keras's thread, and Keras will say so): give up after this
# long without a new completion, or ten times the longest a step's
# results took to come. Results that do come arrive steadily, and the
# wait costs the device nothing: it is busy with the steps waited for.
STALL_SECONDS = 10.0
# A waiting flush that sees a call's results exist gives Keras's thread
# this long to stamp them before it dates them itself (when first seen).
READY_GRACE_SECONDS = 0.05


@dataclasses.dataclass(slots=True)
class _Call:
    function: str
    first: int
    start: float
    own: float  # the tuner's own seconds in the call's hooks and tap
    returned: float | None = None
    closed: float | None = None
    completed: float | None = None
    next_begin: float | None = None  # closed by the next call's begin
    ready: Callable[[], bool] | None = None  # do its results exist yet?
    seen_ready: float | None = None  # when a waiting flush first saw them
    input: float | None = None  # waiting for its batches, where seen


class StepTimer:
    """Start, return and completion of every call of the step functions,
    each of `steps_per_call` steps (`steps_per_execution`).

    The training thread calls `begin`, `returned` and `close`; `complete`
    may come from any thread. The calls become `record_type` records only
    when flushed: once per run, or when `capacity` calls are pending (the
    probe's ring buffer would wrap next; `begin` and `close` then say so),
    after a wait that gives up at `stall_seconds` (`STALL_SECONDS`).
    """

    def __init__(
        self,
        steps_per_call: int,
        capacity: int,
        stall_seconds: float = STALL_SECONDS,
        record_type: type[StepRecord] = StepRecord,
    ) -> None:
        self.record_type = record_type
        self.steps_per_call = steps_per_call
        self.capacity = capacity
        self.stall_seconds = stall_seconds
        # Unix time = perf_counter() + offset: one clock read per call.
        self.clock_offset = time.time() - time.perf_counter()
        self._calls: list[_Call] = []  # chronological, not yet flushed
        # The same calls by (function, first step), for batch-end hooks.
        self._by_step: dict[tuple[str, int], _Call] = {}
        self._open: _Call | None = None
        self._closed = {"train": 0, "test": 0}
        # A waiting `flush` sleeps on it; set while one may wait (set
        # before it looks, so a completion after the look wakes it).
        self._arrived = threading.Condition(threading.Lock())
        self._flushing = False
        self._last_completion: float | None = None
        # The longest a call's results came after it returned and the
        # call before it completed (a step's device time), in seconds.
        self._longest = 0.0

    @property
    def in_call(self) -> bool:
        return self._open is not None

    def begin(
        self, function: str, batch: int, now: float
    ) -> tuple[str, int] | None:
        """A call of `function` starting at step `batch`; `now`, the
        perf_counter read at the very start of the hook, ends the open
        call (`close`, whose answer it returns)."""
        full = self.close(now)
        start = time.perf_counter()
        call = _Call(function, batch, start, start - now)
        self._calls.append(call)
        self._by_step[function, batch] = call
        self._open = call
        return full

    def returned(
        self,
        now: float,
        own: float = 0.0,
        ready: Callable[[], bool] | None = None,
        input_seconds: float = 0.0,
    ) -> None:
        """The open call's function returned at `now` (its results may
        not exist yet): the tuner spent `own` seconds in it, and its
        batches `input_seconds` (not the dispatch's). `ready` says,
        without waiting, whether its results exist (asked when the next
        call begins)."""
        if self._open is not None:
            self._open.returned = now
            self._open.own += own
            self._open.ready = ready
            self._open.input = input_seconds

    @staticmethod
    def _is_ready(call: _Call) -> bool:
        """Whether `call`'s results exist, asked without waiting (False
        where it cannot say)."""
        if call.ready is None:
            return False
        try:
            return bool(call.ready())
        except Exception:  # noqa: BLE001 - a deleted array: unknown
            call.ready = None
            return False

    @staticmethod
    def _bound(call: _Call, now: float) -> None:
        """`call` completed by `now`: its completion is the earlier of
        the bounds known (a stamp is never early)."""
        now = max(now, call.returned or call.start)
        if call.completed is None or now < call.completed:
            call.completed = now

    def complete(self, function: str, step: int, now: float) -> None:
        """The results of `function`'s call that ran `step` exist at
        `now` (a batch-end hook, after Keras read the step's logs). Safe
        from any thread."""
        # No lock on the way (a dict look-up and an attribute are atomic):
        # the training thread's hooks never wait for this one; only a
        # waiting `flush` is woken, under the lock.
        for first in range(step, step - self.steps_per_call, -1):
            call = self._by_step.get((function, first))
            if call is not None:
                self._bound(call, now)
                call.ready = None
                break
        if self._flushing:
            with self._arrived:
                self._arrived.notify_all()

    def close(self, now: float | None = None) -> tuple[str, int] | None:
        """Ends the open call at `now` (the next call's begin, or the
        run's end: this moment without `now`). Returns `(function, next
        step)` when its pending calls must be flushed."""
        if self._open is None:
            return None
        closed = now or time.perf_counter()
        call, self._open = self._open, None
        if self._is_ready(call):
            self._bound(call, closed)  # its results existed by then
        call.closed = closed
        call.next_begin = now
        self._closed[call.function] += 1
        if self._closed[call.function] >= self.capacity:
            return call.function, call.first + self.steps_per_call
        return None

    def flush(self, function: str, wait: bool = True) -> list[StepRecord]:
        """`function`'s closed calls as new records, oldest first; with
        `wait`, after those that returned have completed (`_wait`)."""
        if wait:
            self._wait(function)
        # A later call's completion bounds an earlier one's (the device
        # finishes calls in order; a worker thread's stamp can be late).
        bound = None
        for call in reversed(self._calls):
            if call.completed is None:
                continue
            if bound is not None and call.completed > bound:
                call.completed = max(bound, call.returned or call.start)
            bound = call.completed
        records, kept = [], []
        previous = self._last_completion
        for call in self._calls:
            if call.function == function and call.closed is not None:
                records.append(self._record(call, previous))
                del self._by_step[call.function, call.first]
                if call.completed is not None:
                    if call.returned:
                        # The device's time on the call alone.
                        waited = call.completed - max(
                            previous or 0.0, call.returned
                        )
                        self._longest = max(self._longest, waited)
                    self._last_completion = max(
                        self._last_completion or 0.0, call.completed
                    )
            else:
                kept.append(call)
            if call.completed is not None:
                previous = max(previous or 0.0, call.completed)
        self._calls = kept
        self._closed[function] = 0
        return records

    def _record(self, call: _Call, previous: float | None) -> StepRecord:
        # Returned, and its results never seen (the fit raised, or the
        # wait gave up): timed as called, and not a steady step.
        unknown = call.completed is None and call.returned is not None
        start = call.start if unknown else max(previous or 0.0, call.start)
        if call.completed is None:
            end = call.closed
        else:
            end = max(call.completed, call.next_begin or 0.0)
        dispatch = None
        if call.returned is not None:
            dispatch = max(call.returned - call.start - (call.input or 0), 0.0)
        return self.record_type(
            call.function,
            call.first,
            max(end - start, 0.0),
            started_at=self.clock_offset + call.start,
            fallback_steps=self.steps_per_call,
            dispatch_seconds=dispatch,
            own_seconds=call.own,
            warmup=unknown,
            input_seconds=call.input,
        )

    def _waiting(self, function: str) -> bool:
        """Whether a closed call of `function` that returned has no
        completion yet; one seen ready `READY_GRACE_SECONDS` ago completed
        when first seen (a callback before the tuner's may have raised)."""
        now = None
        waiting = False
        for call in self._calls:
            if (
                call.function != function
                or call.closed is None
                or call.returned is None
                or call.completed is not None
            ):
                continue
            if call.ready is not None:
                now = now or time.perf_counter()
                if call.seen_ready is None and self._is_ready(call):
                    call.seen_ready = now
                if (
                    call.seen_ready is not None
                    and now - call.seen_ready >= READY_GRACE_SECONDS
                ):
                    self._bound(call, call.seen_ready)
                    continue
            waiting = True
        return waiting

    def _wait(self, function: str) -> None:
        """Until each returned call of `function` has its completion, or
        none came for too long (`STALL_SECONDS`)."""
        with self._arrived:
            self._flushing = True
            try:
                stall = max(self.stall_seconds, 10.0 * self._longest)
                quiet = 0.0  # seconds without a new completion
                while self._waiting(function):
                    if self._arrived.wait(READY_GRACE_SECONDS):
                        quiet = 0.0
                        continue
                    quiet += READY_GRACE_SECONDS
                    if quiet >= stall:
                        return  # nothing came: stalled
            finally:
                self._flushing = False
