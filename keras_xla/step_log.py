"""StepLog: the calls of a fit's step functions, as step records.

The timer stamps each call; when a run ends (or the probe's ring buffer
is about to wrap) the new calls become `StepRecord`s, get the signatures
the probe read and the tracing time it measured, and, while XLA is on,
the compilations they show (`accounting.detect_compilations`). Records
stay here until the owner takes a run's worth.
"""

from __future__ import annotations

from keras_xla.core.accounting import detect_compilations
from keras_xla.core.timing import StepRecord, StepTimer, attach_steps
from keras_xla.tf_backend.step_functions import StepFunctions


class StepLog:
    """The timed, probed calls of the train and test functions.

    Args:
        steps_per_call: `steps_per_execution`.
        functions: The model's probed step functions, or None (a plain
            model under a multi-replica strategy: timed, not probed).
    """

    def __init__(
        self, steps_per_call: int, functions: StepFunctions | None
    ) -> None:
        self.functions = functions
        probe = functions.probe("train") if functions else None
        capacity = probe.slots // steps_per_call - 1 if probe else 1 << 30
        self.timer = StepTimer(steps_per_call, capacity)
        self.records: dict[str, list[StepRecord]] = {"train": [], "test": []}

    def begin(
        self, function: str, batch: int, now: float, jit_on: bool
    ) -> None:
        """A call of `function` at step `batch` begins (`now`: the clock
        read at the start of the hook)."""
        self._collect_full(self.timer.begin(function, batch, now), jit_on)

    def close(self, jit_on: bool, now: float | None = None) -> None:
        """The open call ends."""
        self._collect_full(self.timer.close(now), jit_on)

    def collect(
        self, function: str, jit_on: bool, next_step: int | None = None
    ) -> list[StepRecord]:
        """Turns `function`'s pending calls into records; returns all of
        its records so far."""
        records = self.timer.flush(function)
        variant = self.functions.active(function) if self.functions else None
        if records and variant is not None:
            probe = variant.probe
            steps, traces = probe.read_new(), probe.pop_traces()
            attach_steps(records, steps, traces, next_step)
            if probe.steps_recorded:
                # A call that ran no step: with a dataset of unknown
                # length, Keras's last call only finds the end of data.
                records = [r for r in records if r.signatures]
            if jit_on:
                detect_compilations(function, records, variant.tracker)
        self.records[function].extend(records)
        return self.records[function]

    def drain(self, function: str, jit_on: bool) -> list[tuple]:
        """Reads the steps `function` ran outside this log's calls (an
        `evaluate()` between fits, or a callback's own), so they are not
        booked to the next run; returns `(signature, replica)` of each
        signature they compiled (new to the function's tracker)."""
        variant = self.functions.active(function) if self.functions else None
        if variant is None:
            return []
        probe, compiled = variant.probe, []
        probe.pop_traces()
        for step in probe.read_new():
            for replica, sig in enumerate(step):
                if not jit_on:
                    continue
                if variant.tracker.observe(function, sig, replica):
                    compiled.append((sig, replica))
        return compiled

    def take(self, function: str, jit_on: bool) -> list[StepRecord]:
        """Closes and collects `function`, and hands over its records."""
        self.close(jit_on)
        self.collect(function, jit_on)
        records, self.records[function] = self.records[function], []
        return records

    def _collect_full(self, full: tuple[str, int] | None, jit_on) -> None:
        if full is not None:
            self.collect(full[0], jit_on, next_step=full[1])
