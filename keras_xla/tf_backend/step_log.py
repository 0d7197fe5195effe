"""StepLog: the calls of a fit's step functions, as step records.

The timer stamps each call; when a run ends (or the probe's ring buffer is
about to wrap) the new calls become `StepRecord`s, get the signatures the
probe read, the wait for their batches it carried (`input_wait`) and the
tracing time it measured, and, while XLA is on, the compilations they show
(`accounting.detect_compilations`; under auto-clustering the compile
ledger's entries, `accounting.detect_cluster_compilations`). Records stay
here until the owner takes a run's worth. Train calls also open and close
the profile window, and the step count Keras's end-of-data call advances
is given back (`count_steps`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from keras_xla.core.accounting import (
    detect_cluster_compilations,
    detect_compilations,
)
from keras_xla.core.step_timer import StepTimer
from keras_xla.core.timing import StepRecord, attach_steps, attach_waits
from keras_xla.tf_backend import autoclustering, compile_ledger

logger = logging.getLogger(__name__)

# Entries listed as a call begins are dated this much before it: they were
# written outside the fit's calls.
BEFORE_CALL_SECONDS = 0.1

# What a fit counts as compilations: new signatures of a jit-compiled step,
# or the compile ledger's entries of auto-clustering's clusters.
JIT = "jit_compile"
CLUSTERS = "auto-clustering"


class StepLog:
    """The timed, probed calls of a fit's train and test functions.

    Args:
        adapter: The fit's `TFFitAdapter`: its model, its step functions
            (None for a plain model under a multi-replica strategy: timed,
            not probed), its profile window, and what counts as a
            compilation now (`counting`), asked as calls are collected:
            the owner's XLA setting may change within a fit (the trial, a
            fallback).
    """

    def __init__(self, adapter: Any) -> None:
        self.adapter = adapter
        self.functions = functions = adapter.functions
        self.ledger = compile_ledger.status().directory
        # Date the ledger's entries call by call (a mirrored compile
        # cache labels each compilation a hit or a miss by them; auto-
        # clustering books clusters to calls by them); else at each
        # collect, which costs nothing per step: a listing of TensorFlow's
        # file system takes 30-50 us right after a step, while its threads
        # still spin.
        cache = adapter.settings.cache_status
        self.stamp_calls = bool(cache and cache.active and cache.live)
        self._counting: str | None = None
        # Auto-clustering: ledger entries already booked to a call, and
        # the functions that compiled clusters before.
        self._booked: set[str] = set()
        self._compiled: set[str] = set()
        self._probed = False  # whether any probe has recorded a step
        # Compilations per `function/cluster`.
        self.clusters: dict[str, int] = {}
        self._cluster_ops: dict[str, set[str]] = {}
        steps_per_call = int(adapter.model.steps_per_execution or 1)
        probe = functions.probe("train") if functions else None
        capacity = probe.slots // steps_per_call - 1 if probe else 1 << 30
        self.timer = StepTimer(steps_per_call, capacity)
        self.records: dict[str, list[StepRecord]] = {"train": [], "test": []}
        # XLA's compilations the ledger held at the guard's last look
        # (None: not looked yet).
        self._written: int | None = None
        # After the per-shape fallback: whether a step of `(function,
        # signature)` ran XLA's step (the others compile nothing).
        self.ran_xla: Callable[[str, Any], bool] | None = None
        # Whether a train call may be Keras's end-of-data call of a train
        # function without XLA, and the optimizer's step count before it
        # (None once the call ended).
        self.count_steps = False
        self._count_before: int | None = None

    def begin(self, function: str, batch: int, now: float) -> None:
        """A call of `function` at step `batch` begins (`now`: the clock
        read at the start of the hook)."""
        if function == "train":
            profile = self.adapter.profile
            if profile is not None:
                profile.before_call(self.timer.clock_offset + now)
            if self.count_steps:
                self._count_before = step_count(self.adapter.model)
        self._counting = counting = self.adapter.counting
        if not self.timer.in_call:
            # New entries were written outside the fit's calls: dated
            # before this one, out of its window. (A call's own entries
            # were dated at its batch-end hook, `complete`.)
            self._stamp_ledger(now, -BEFORE_CALL_SECONDS, counting)
        self._collect_full(self.timer.begin(function, batch, now))

    def complete(self, function: str, step: int, now: float) -> None:
        """The batch-end hook of `function`'s call that ran `step` ran at
        `now` (perf_counter): the call's results exist, and so does any
        compilation it made."""
        self._count_before = None  # the call trained: it ended
        self._stamp_ledger(now, 0.0, self._counting)
        self.timer.complete(function, step, now)

    def close(self, now: float | None = None) -> None:
        """The open call ends."""
        if now is None:
            # The run's end (validation, the epoch's end, the fit's), not
            # a look between two calls: a call begun and never completed
            # was Keras's end-of-data call.
            self._give_back_step_count()
        shift = 0.0 if self.timer.in_call else -BEFORE_CALL_SECONDS
        self._stamp_ledger(now, shift, self.adapter.counting)
        self._collect_full(self.timer.close(now))

    def _stamp_ledger(
        self, now: float | None, shift: float, counting: str | None
    ) -> None:
        """Dates the in-memory ledger's new entries at `now` (a
        perf_counter reading) plus `shift`, where entries are dated call
        by call: the ledger keeps no file times."""
        if self.ledger is not None and (
            self.stamp_calls or counting == CLUSTERS
        ):
            now = time.perf_counter() if now is None else now
            compile_ledger.stamp(self.timer.clock_offset + now + shift)

    def collect(
        self, function: str, next_step: int | None = None
    ) -> list[StepRecord]:
        """Turns `function`'s pending calls into records (the step after
        them is `next_step`, where known); returns all of its records so
        far."""
        counting = self.adapter.counting
        if self.ledger is not None:
            compile_ledger.stamp()  # entries of the calls collected now
        records = self.timer.flush(function)
        variant = self.functions.active(function) if self.functions else None
        if records and variant is not None:
            probe = variant.probe
            steps = probe.read_new()
            # The probe times traces with perf_counter; records hold Unix
            # times.
            offset = self.timer.clock_offset
            traces = [(offset + t, s) for t, s in probe.pop_traces()]
            attach_steps(records, steps, traces, next_step)
            attach_waits(records, probe.waits)
            self._probed = self._probed or bool(probe.steps_recorded)
            # An empty dataset: the function traced, and no step ran.
            self._probed = self._probed or (probe.traced and not steps)
            if self._probed:
                # A call that ran no step: with a dataset of unknown
                # length, Keras's last call only finds the end of data.
                records = [r for r in records if r.signatures]
            if counting == JIT:
                ran = self.ran_xla  # per shape: XLA's steps alone compile
                jitted = [
                    r
                    for r in records
                    if ran is None
                    or all(ran(function, step[0]) for step in r.signatures)
                ]
                detect_compilations(function, jitted, variant.tracker)
            elif counting == CLUSTERS and self.ledger is not None:
                detect_cluster_compilations(
                    function,
                    records,
                    compile_ledger.entries(self.ledger),
                    variant.tracker,
                    self._booked,
                    self._compiled,
                )
                for path in (p for r in records for p in r.entries):
                    cluster, ops = autoclustering.read_cluster(path)
                    name = f"{function}/{cluster}"
                    self.clusters[name] = self.clusters.get(name, 0) + 1
                    self._cluster_ops.setdefault(function, set()).update(ops)
            if records and not variant.called:
                # A built function's first call instantiates it: not a
                # steady step, even where it traced nothing (it calls a
                # step another variant traced).
                records[0].warmup = True
            variant.called = variant.called or bool(records)
        self.records[function].extend(records)
        return self.records[function]

    def coverage(self, function: str = "train") -> tuple[int, int]:
        """Under auto-clustering: how many of the traced step's ops ran in
        XLA clusters, and how many ops the step has (0 if not traced)."""
        variant = self.functions.active(function) if self.functions else None
        step_ops = variant.probe.step_ops if variant is not None else ()
        ops = self._cluster_ops.get(function, set())
        return autoclustering.covered(frozenset(step_ops), ops), len(step_ops)

    def drain(self, when: str) -> list[dict]:
        """Reads the steps the functions ran outside this log's calls (an
        `evaluate()` between fits, or a callback's own), so they are not
        booked to the next run; returns the signatures they compiled (new
        to the function's tracker), found `when`, as report entries."""
        found, counting = [], self.adapter.counting
        for function in ("train", "test"):
            variant = self.functions and self.functions.active(function)
            if variant is None:
                continue
            variant.probe.pop_traces()
            steps = variant.probe.read_new()
            variant.called = variant.called or bool(steps)
            for step in steps:
                for replica, sig in enumerate(step):
                    if counting == JIT and variant.tracker.observe(
                        function, sig, replica
                    ):
                        found.append(
                            {
                                "function": function,
                                "shapes": sig.shapes(),
                                "replica": replica,
                                "found": when,
                            }
                        )
        return found

    def take(self, function: str) -> list[StepRecord]:
        """Closes and collects `function`, and hands over its records.
        What the ledger holds now is not the next train call's: the
        guard's next look starts here."""
        self.close()
        self.collect(function)
        records, self.records[function] = self.records[function], []
        if self._written is not None:
            self._written = compile_ledger.written()
        return records

    def compilations(self, long_call: bool) -> int | None:
        """The recompilation guard's look: a call long enough to have
        compiled counts where XLA's ledger recorded compilations since
        the last look (one listing of it, against 0.6 ms to collect the
        calls); None where it cannot have compiled."""
        if not long_call:
            return None
        written = compile_ledger.written()
        if written is None:
            return 0  # no ledger: the calls themselves say
        seen, self._written = self._written, written
        if seen is None:
            return 0  # the first look: what the ledger held is not known
        return written - seen or None

    def abort(self) -> None:
        """The fit raised: nothing waits here (TensorFlow's calls return
        with their results); a failed call's step count is left as it is."""
        self._count_before = None

    def _collect_full(self, full: tuple[str, int] | None) -> None:
        if full is not None:
            self.collect(full[0], next_step=full[1])

    def _give_back_step_count(self) -> None:
        """The data ended in a no-XLA call of the baseline (an epoch of
        unknown length): Keras's end-of-data call of a train function
        without XLA advanced the optimizer's step count though it trained
        nothing (`auto.runner.plan_baseline`); the count goes back to
        what it was before that call, as training without the tuner
        leaves it."""
        before, self._count_before = self._count_before, None
        if before is None:
            return
        count = self.adapter.model.optimizer.iterations
        if int(count.numpy()) != before:
            count.assign(before)
            logger.info("Gave back the end-of-data call's optimizer step.")


def step_count(model: Any) -> int | None:
    """The optimizer's step count (`iterations`), or None without one."""
    optimizer = getattr(model, "optimizer", None)
    count = getattr(optimizer, "iterations", None)
    return None if count is None else int(count.numpy())
