"""Epoch accounting: from step records to the report.

Compile detection is the first step: `detect_compilations` marks, in each
call's record, the signatures the function had not compiled before (one
XLA compilation each). `Accountant` then turns the records of one epoch
(train steps and the validation run's test steps) into the report's
figures: robust step-time statistics, one `Compilation` per new signature
with its cost (estimated, or as the backend measured it:
`StepRecord.measured_compile_seconds`), one `Recompilation` per distinct
drift with its explanation, the epoch's `EpochStats`, and findings.
"""

from __future__ import annotations

import dataclasses

from keras_xla.core import figures, spikes
from keras_xla.core.findings import FindingBook
from keras_xla.core.report import (
    Compilation,
    EpochStats,
    Recompilation,
    XLAReport,
)
from keras_xla.core.signatures import (
    FINDING_CODES,
    SignatureTracker,
    describe,
    explain,
    fix_for,
    primary_changes,
)
from keras_xla.core.timing import (
    StepRecord,
    estimate_compile_seconds,
    run_statistics,
)


def detect_compilations(
    function: str, records: list[StepRecord], tracker: SignatureTracker
) -> list[StepRecord]:
    """Marks in `records` the signatures `tracker` had not seen for
    `function` (`new`, and their `previous`); returns the records."""
    for record in records:
        for j, step in enumerate(record.signatures):
            for r, sig in enumerate(step):
                if tracker.observe(function, sig, r):
                    record.new.append((j, r))
                    record.previous[j, r] = tracker.compiled(function, r)[:-1]
    return records


# An entry is closed just after the call that compiled it returns.
ENTRY_SLACK_SECONDS = 0.05


def detect_cluster_compilations(
    function: str,
    records: list[StepRecord],
    entries: dict[str, float],
    tracker: SignatureTracker,
    booked: set[str],
    compiled: set[str],
) -> list[StepRecord]:
    """Auto-clustering's compilations: each compile ledger entry (`path:
    Unix mtime`) not yet `booked` is one cluster compiled by the call
    whose time holds it (else the one that ended just before). `tracker`
    remembers the signatures the function ran, `compiled` the functions
    that compiled clusters before (both updated). A call's compilations
    after the function's first are explained against the other
    signatures it ran before; a call that ran a shape for the first time
    without compiling is a warm-up, not a steady step."""
    fresh = sorted((m, p) for p, m in entries.items() if p not in booked)
    for slack in (0.0, ENTRY_SLACK_SECONDS):
        # Latest call first: with the slack an entry dated at a short
        # call's end (a rounding past it) is that call's, not the one
        # before, whose slack may reach past it too.
        for record in reversed(records):
            end = record.started_at + record.seconds + slack
            for mtime, path in fresh:
                if path not in booked and record.started_at <= mtime <= end:
                    record.entries.append(path)
                    booked.add(path)
    for record in records:
        ran = [step[0] for step in record.signatures]
        record.warmup = (
            any([tracker.observe(function, sig) for sig in ran])
            and not record.entries
        )
        if not record.entries or not ran:
            continue
        before = [s for s in tracker.compiled(function) if s != ran[-1]]
        record.new += [(len(ran) - 1, 0)] * len(record.entries)
        first = function not in compiled or not before
        record.previous[len(ran) - 1, 0] = [] if first else before
        compiled.add(function)
    return records


def compilation(
    function: str,
    epoch: int,
    record: StepRecord,
    index: int,
    replica: int,
    seconds: float = 0.0,
) -> Compilation:
    """The `Compilation` of `record`'s step `index` on `replica` (one of
    its `new`), at `seconds` of compiling."""
    sig = record.signatures[index][replica]
    return Compilation(
        function=function,
        epoch=epoch,
        step=record.first_step + index,
        shapes=sig.shapes(),
        dtypes={t.path: t.dtype for t in sig.tensors},
        compile_seconds=figures.rounded(seconds),
        first=not record.previous.get((index, replica)),
        started_at=round(record.started_at, 6),
        replica=replica,
        finished_at=round(record.started_at + record.seconds, 6),
    )


class Accountant:
    """Fills `report` from step records, epoch by epoch; findings go to
    `book`."""

    def __init__(self, report: XLAReport, book: FindingBook):
        self.report = report
        self.book = book
        self._medians: dict[str, float] = {}
        self._results: dict[str, dict] = {}
        # When each recompilation's call started (Unix time), by the
        # object's id: the report lists them in the order they happened.
        self._started: dict[int, float] = {}
        self.epoch = 0
        # What the train function's first call took to build its graph,
        # beyond a step and its trace: measured on the baseline's no-XLA
        # function (it builds a graph and traces nothing), and taken out
        # of the first compilation's estimate, which the profiler's
        # compile span does not hold (BENCHMARKS.md, "Compile-time
        # estimates against the profiler").
        self.graph_seconds = 0.0

    def start_epoch(self, epoch: int) -> None:
        self.epoch = epoch
        self._results = {}

    def finish_run(
        self,
        function: str,
        records: list[StepRecord],
        train_so_far: list[StepRecord] = (),
    ) -> dict:
        """Statistics, compile estimates and explanations for one run of
        `function` (the epoch's train steps, or a validation run); merged
        into the epoch's results, which are returned."""
        reference = self._reference_median(function, train_so_far)
        stats = run_statistics(records, reference)
        if stats.steady_steps:
            self._medians[function] = stats.median_seconds
        result = self._results.setdefault(
            function,
            {"compilations": 0, "compile_seconds": 0.0, "recompilations": 0},
        )
        spent = 0.0
        for r_index, record in enumerate(records):
            if not record.new:
                continue
            first = function == "train" and any(
                not record.previous.get(key) for key in record.new
            )
            seconds = estimate_compile_seconds(
                record,
                stats.median_seconds,
                self.graph_seconds if first else 0.0,
            )
            explained = set()
            measured = record.measured_compile_seconds
            for k, (index, replica) in enumerate(record.new):
                if len(measured) == len(record.new):
                    seconds = measured[k]  # each its own, as measured
                result["compilations"] += 1
                spent += seconds
                sig = record.signatures[index][replica]
                previous = record.previous.get((index, replica), ())
                self.report.compile_log.append(
                    compilation(
                        function, self.epoch, record, index, replica, seconds
                    )
                )
                if not previous:
                    continue  # the function's first compilation
                result["recompilations"] += 1
                if sig.tensors in explained or record.planned:
                    # The same shapes on another replica; or a bucket
                    # edge the guard chose, which its section explains.
                    continue
                explained.add(sig.tensors)
                last = r_index == len(records) - 1 and index == (
                    len(record.signatures) - 1
                )
                step = record.first_step + index
                self._explain(function, step, previous, sig, last, seconds)
                self._started[id(self.report.recompilations[-1])] = (
                    record.started_at
                )
        result["compile_seconds"] = figures.rounded(
            result["compile_seconds"] + spent
        )
        result["stats"] = stats
        return result

    def finish_epoch(self, train_records: list[StepRecord]) -> EpochStats:
        """The epoch's `EpochStats` (train and validation together); also
        appended to the report."""
        train = self.finish_run("train", train_records)
        test = self._results.get("test", {})
        stats = train["stats"]
        by_function = {
            name: {k: v for k, v in result.items() if k != "stats"}
            for name, result in (("train", train), ("test", test))
            if result
        }
        labelled = spikes.label(train_records, stats.median_seconds)
        counted = {
            key: sum(r[key] for r in by_function.values())
            for key in ("compilations", "compile_seconds", "recompilations")
        }
        epoch_stats = EpochStats(
            epoch=self.epoch,
            steps=stats.steps,
            by_function=by_function,
            spikes=labelled,
            **figures.measured(
                stats,
                unexplained_seconds=spikes.unexplained_seconds(labelled),
                **counted,
            ),
        )
        self.report.epochs.append(epoch_stats)
        # Validation finishes before the epoch: restore time order.
        self.report.compile_log.sort(key=lambda c: c.started_at)
        self.report.recompilations.sort(
            key=lambda r: self._started.get(id(r), float("-inf"))
        )
        return epoch_stats

    def _reference_median(self, function, train_so_far) -> float | None:
        """Per-step time to compare compiled steps with when a run has no
        step that did not compile (a two-batch validation run): the
        function's last steady median, else this epoch's train median (a
        test step does less work than a train step)."""
        if function in self._medians:
            return self._medians[function]
        if function != "train" and train_so_far:
            stats = run_statistics(train_so_far)
            if stats.steady_steps:
                return stats.median_seconds
        return self._medians.get("train")

    def _explain(self, function, step, previous, sig, last, seconds):
        change, changes = explain(previous, sig, last)
        # The message and fix name every other cause of the step too (a
        # short last batch whose padded length was new): removing one
        # cause alone would not have avoided the compile.
        message, fix = describe(change, function, changes), fix_for(change)
        others = {}
        for other in primary_changes(changes):
            if other.cause != change.cause:
                others.setdefault(other.cause, other)
        for other in others.values():
            said = describe(other, function, changes)
            message += f" Also {said.removeprefix(f'{function}: ')}"
            fix += f" And: {fix_for(other)}"
        if others:
            message += " Either change alone compiles the step again: fix both."
        self.report.recompilations.append(
            Recompilation(
                function=function,
                epoch=self.epoch,
                step=step,
                compile_seconds=figures.rounded(seconds),
                message=f"{message} Recompiled in {seconds:.2f} s.",
                fix=fix,
                changes=[dataclasses.asdict(c) for c in changes],
                input=change.input,
                dim=change.dim,
                before=change.before,
                after=change.after,
                cause=change.cause,
            )
        )
        # The primary change carries the cost.
        for other in primary_changes(changes):
            primary = other is change
            self.book.add(
                FINDING_CODES[other.cause],
                message if primary else describe(other, function, changes),
                fix if primary else fix_for(other),
                (function, other.input, other.dim),
                seconds if primary else 0.0,
            )
