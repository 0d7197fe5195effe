"""Step records, robust statistics and the compile-time estimate.

A step that runs on a new signature pays XLA's compile time on top of its
run time. With no Python reader for TensorFlow's compile counters, it is
estimated as the step's excess over the function's steady median in the
epoch, less its Python tracing (as the probe measured it).
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Sequence

from keras_xla.core.figures import rounded


@dataclasses.dataclass
class StepRecord:
    """One call of a train/test function (one or more steps)."""

    function: str  # "train" or "test"
    first_step: int  # its first step's index in the epoch (or run)
    seconds: float  # the call's wall time
    # Each step's signatures (one per replica), in order; empty if unread.
    signatures: list = dataclasses.field(default_factory=list)
    # `(step index, replica)` of each signature the call compiled.
    new: list = dataclasses.field(default_factory=list)
    trace_seconds: float = 0.0  # Python tracing measured during the call
    fallback_steps: int = 1  # steps assumed when no signature was read
    started_at: float = 0.0  # Unix time
    # For each `(step index, replica)` in `new`, the signatures the
    # function compiled before, oldest first (none for its first).
    previous: dict = dataclasses.field(default_factory=dict)
    # A shape's first run that compiled nothing (auto-clustering compiles
    # a shape at its second run): not a steady step.
    warmup: bool = False
    # Compile ledger entries it wrote (auto-clustering: one per cluster).
    entries: list = dataclasses.field(default_factory=list)
    # Each compilation's seconds as the backend measured them (JAX's
    # compile events), in `new`'s order; empty where estimated (TensorFlow).
    measured_compile_seconds: list = dataclasses.field(default_factory=list)
    # The host's time from the call's start until the function returned
    # (its work may still run); None where unseen.
    dispatch_seconds: float | None = None
    own_seconds: float = 0.0  # the tuner's own time (its cost) in its hooks
    # The time the call waited for its batches; None where not seen
    # (TensorFlow with several steps per call or replicas, or run eagerly).
    input_seconds: float | None = None
    # XLA compilations during the call not of its step (another
    # function's, a callback's): a spike they explain is not a host pause.
    other_compilations: int = 0
    # Padded to a bucket edge (`on_recompile_storm="bucket"`): its
    # compilation is the plan's (the guard's section), not a drift's.
    planned: bool = False

    @property
    def steps(self) -> int:
        return len(self.signatures) or self.fallback_steps

    @property
    def compiled(self) -> bool:
        return bool(self.new)

    @property
    def seconds_per_step(self) -> float:
        return self.seconds / max(self.steps, 1)

    def examples(self) -> int:
        return sum(
            s.batch_size() or 0 for step in self.signatures for s in step
        )


def ms(seconds: float | None) -> float | None:
    """Seconds as milliseconds, rounded (`figures.rounded`; None stays)."""
    return None if seconds is None else rounded(seconds * 1000.0)


def median_seconds(values: Sequence[float]) -> float | None:
    """The median of `values` (seconds), rounded, or None without any:
    the compile cache's hit and miss medians, on every backend."""
    return rounded(statistics.median(values)) if values else None


def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile, `q` in [0, 100]."""
    if not values:
        raise ValueError("percentile() of an empty sequence.")
    if not 0 <= q <= 100:
        raise ValueError(f"q must be in [0, 100], got {q}.")
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100.0
    lo, hi = math.floor(pos), math.ceil(pos)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


@dataclasses.dataclass
class RunStatistics:
    """Robust statistics of one function's steps in one epoch or run, as
    a figure measured from the run (`core.figures`) reads them; `pool`
    holds the records the per-step statistics are over."""

    steps: int
    median_seconds: float | None
    p90_seconds: float | None
    steady_steps: int
    examples_per_second: float | None
    examples_per_second_overall: float | None
    pool: Sequence[StepRecord] = dataclasses.field(default=(), repr=False)
    # Each `per_step` statistic, once computed.
    _found: dict = dataclasses.field(
        default_factory=dict, repr=False, compare=False
    )

    def per_step(self, field: str, q: float = 50) -> float | None:
        """The `q`th percentile per step of a record `field` (seconds of
        the call: `dispatch_seconds`, `input_seconds`, `own_seconds`), over
        the pooled records that measured it; None where none did."""
        if (field, q) not in self._found:
            values = [
                value / max(r.steps, 1)
                for r in self.pool
                if (value := getattr(r, field)) is not None
            ]
            self._found[field, q] = percentile(values, q) if values else None
        return self._found[field, q]


def run_statistics(
    records: Sequence[StepRecord], fallback_median: float | None = None
) -> RunStatistics:
    """Median and p90 per-step time over the steps that did not compile,
    trace or warm up; where every step did, the p90 is over all steps and
    the median is `fallback_median` (an earlier epoch's), else unknown
    (None): a median of compiling steps is not a step's time, and compile
    estimates against it would come out near zero (a run whose every step
    compiled a new shape)."""
    steady = [
        r
        for r in records
        if not r.compiled and not r.trace_seconds and not r.warmup
    ]
    pool = steady or list(records)
    per_step = [r.seconds_per_step for r in pool for _ in range(r.steps)]
    if not per_step:
        return RunStatistics(0, None, None, 0, None, None)
    median = percentile(per_step, 50) if steady else fallback_median

    def throughput(calls: Sequence[StepRecord]) -> float | None:
        seconds = sum(r.seconds for r in calls)
        examples = sum(r.examples() for r in calls)
        return examples / seconds if seconds > 0 and examples else None

    return RunStatistics(
        steps=sum(r.steps for r in records),
        median_seconds=median,
        p90_seconds=percentile(per_step, 90),
        steady_steps=sum(r.steps for r in steady),
        examples_per_second=throughput(steady),
        examples_per_second_overall=throughput(records),
        pool=pool,
    )


def estimate_compile_seconds(
    record: StepRecord, median_seconds: float | None, graph_seconds: float = 0.0
) -> float:
    """Compile seconds of one compiled call, shared by its compilations:
    their mean where the backend measured them; else the call's excess
    over its steps at the median, less its tracing and `graph_seconds`
    (what a function's first call takes to build its graph, for the call
    that compiled a function first), divided evenly; never negative."""
    if not record.compiled:
        return 0.0
    if measured := record.measured_compile_seconds:
        return sum(measured) / len(measured)
    expected = (median_seconds or 0.0) * record.steps
    excess = record.seconds - expected - record.trace_seconds - graph_seconds
    return max(excess, 0.0) / len(record.new)


def steady_signature(records: Sequence[StepRecord]):
    """Replica 0's signature that most steps ran among the steps that did
    not compile (the latest of a tie; else among all steps): the shapes
    the run spends its time on, not a short last batch. None without
    signatures."""
    steady = [step[0] for r in records if not r.new for step in r.signatures]
    pool = steady or [step[0] for r in records for step in r.signatures]
    counts: dict = {}
    for position, sig in enumerate(pool):
        counts[sig] = (counts.get(sig, (0, 0))[0] + 1, position)
    return max(counts, key=counts.get, default=None)


def attach_steps(
    records: list[StepRecord],
    steps: list[tuple],
    traces: list[tuple[float, float]],
    next_step: int | None = None,
) -> list[StepRecord]:
    """Gives `records` (the timer's consecutive calls of one function)
    the signatures of the steps each ran (`steps`: the probe's signature
    per replica of each step, in order) and the tracing time that fell in
    each (`traces`: `(unix start, seconds)` of each trace); returns them.
    A call ran as many steps as the next call's first step says (after
    the last record, `next_step`), else the rest."""
    position = 0
    firsts = [r.first_step for r in records[1:]] + [next_step]
    for record, following in zip(records, firsts):
        count = (
            following - record.first_step
            if following is not None and following > record.first_step
            else len(steps) - position
        )
        record.signatures = steps[position : position + count]
        position += count
        begin = record.started_at
        record.trace_seconds = sum(
            s for t, s in traces if begin <= t < begin + record.seconds
        )
    return records


def attach_waits(
    records: list[StepRecord], waits: Sequence[float | None]
) -> list[StepRecord]:
    """Gives each of `records` (signatures attached) the sum of its steps'
    `waits` (one per step, in order; None where unseen) where all were seen."""
    position = 0
    for record in records:
        count = len(record.signatures)
        mine = waits[position : position + count]
        position += count
        if count and len(mine) == count and None not in mine:
            record.input_seconds = float(sum(mine))
    return records
