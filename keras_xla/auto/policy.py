"""The trial's policy: candidates, statuses, tunables, the schedule's
length, and which candidates get no more windows. Pure Python.

A trial rotates short windows of each candidate configuration, drops the
clearly slower ones at window boundaries, and keeps the fastest. Two
heuristics spare it steps and compiles, each measured to earn its place
(`benchmarks/auto_heuristics.py`, figures in BENCHMARKS.md):

- `predict_grid`: an unmeasured candidate whose median the XLA x
  precision grid predicts clearly slower is dropped before it runs;
- `payback`: an XLA candidate whose compile the run's steps left cannot
  pay back, even at zero step time (`Drop.PAYBACK`), or are not expected
  to at the grid's predicted speed (`Drop.PREDICTED_PAYBACK`), is
  dropped before it compiles. These two hold for this run's length only.
"""

from __future__ import annotations

import dataclasses
import enum
import math
from typing import Any

AUTO = "auto"


class Status(str, enum.Enum):
    """`report.decision.status` (a string in the JSON)."""

    DECIDED = "decided"
    REUSED = "reused"  # a second fit kept the first fit's decision
    REMEMBERED = "remembered"  # an earlier run's decision, from memory
    SKIPPED = "skipped"
    SINGLE = "single-candidate"

    def __str__(self) -> str:
        return self.value


class Drop(str, enum.Enum):
    """Why a candidate got no more windows (`dropped_because`)."""

    SLOWER = "clearly slower"
    PREDICTED = "predicted clearly slower"
    PAYBACK = "its compile cannot pay back in the steps left"
    PREDICTED_PAYBACK = (
        "predicted not to pay back its compile in the steps left"
    )

    def __str__(self) -> str:
        return self.value


@dataclasses.dataclass(frozen=True)
class Candidate:
    """One configuration: XLA on or off, a dtype policy name, and whether
    auto-clustering (`set_jit`) is on (None: left as the user set it)."""

    jit: bool
    policy: str
    clustering: bool | None = None

    @property
    def name(self) -> str:
        if self.clustering and not self.jit:
            return f"autoclustering/{self.policy}"
        return f"{'xla' if self.jit else 'no_xla'}/{self.policy}"


@dataclasses.dataclass(frozen=True)
class Tunables:
    """Every number the trial and the baseline window decide with.

    Attributes:
        rounds: Windows per candidate (`min_rounds` on a short budget,
            `short_rounds` on a run too short for two).
        min_window_calls: Calls per window: one warm-up and two timed.
        max_window_calls: The longest window.
        max_run_share: Two rounds may take up to this share of a short
            run; one round may take all of it.
        drop_factor: A candidate whose fastest timed step is this much
            slower than the best median is clearly slower.
        single_trace: With one first call measured, the share of it that
            bounds an XLA candidate's compile (`Drop.PAYBACK`).
        predict_grid: Whether the grid's prediction drops candidates.
        payback: Whether the pay-back rules drop XLA candidates.
        range_share: The central share of bootstrap resamples kept in
            the speedup's range; `resamples`: how many.
        useful_width: A range narrower than this share of its middle
            is useful as it is.
        baseline_rounds: The baseline's windows per side, in order of
            preference.
        baseline_share: The baseline's steps (both sides), as a share of
            the first epoch, within `baseline_steps` and
            `baseline_max_steps`; on a short epoch at most
            `baseline_short_share` of it, never under
            `baseline_min_steps`.
        baseline_warmup_steps: XLA steps trained before the baseline's
            first window, where the first epoch has room (the steps right
            after the first compile are not yet the run's steady ones).
        settling_windows: Each side's first baseline windows left out of
            its medians and range where two more remain (a step function
            keeps getting faster for a window's worth of calls after its
            first; BENCHMARKS.md, "The no-XLA step settles").
        unsettled_slowdown: How much slower than its settled step a
            no-XLA window can run before it settles (measured: 1.05-1.6x,
            BENCHMARKS.md, "The no-XLA step settles"). Where a short run
            left the baseline no settling window to leave out, its
            speedup's range reaches down by this factor: the no-XLA
            median may be that much too slow.
        burst_share: A window whose median step is under this share of
            its mean step was stamped in bursts (a step shorter than
            Keras's own work between steps: its batch ends reach the
            clock together, a few calls holding the time of many); its
            steps are its mean, which the loop's wall time fixes.
    """

    rounds: int = 3
    min_rounds: int = 2
    short_rounds: int = 1
    min_window_calls: int = 3
    max_window_calls: int = 25
    max_run_share: float = 0.6
    drop_factor: float = 1.3
    single_trace: float = 0.3
    predict_grid: bool = True
    payback: bool = True
    range_share: float = 0.9
    resamples: int = 400
    useful_width: float = 0.2
    baseline_rounds: tuple[int, ...] = (3, 2)
    baseline_share: float = 0.05
    baseline_steps: int = 48
    baseline_max_steps: int = 120
    baseline_short_share: float = 0.3
    baseline_min_steps: int = 12
    baseline_warmup_steps: int = 20
    settling_windows: int = 1
    unsettled_slowdown: float = 1.6
    burst_share: float = 0.5


TUNABLES = Tunables()


def window_calls(
    budget_steps: int,
    n: int,
    steps_per_call: int,
    rounds: int | None = None,
    t: Tunables = TUNABLES,
) -> int:
    """Calls per window for a trial of `budget_steps` steps over `n`
    candidates in `rounds` rounds (`t.rounds`); 0 when the budget is too
    small."""
    rounds = rounds or t.rounds
    calls = budget_steps // steps_per_call // (rounds * n)
    return 0 if calls < t.min_window_calls else min(calls, t.max_window_calls)


def schedule(
    budget_steps: int, n: int, steps_per_call: int, t: Tunables = TUNABLES
) -> tuple[int, int]:
    """`(calls per window, rounds)` for a budget: `t.rounds` rounds where
    it allows, else fewer; `(0, 0)` when not even one fits."""
    for rounds in (t.rounds, t.min_rounds, t.short_rounds):
        calls = window_calls(budget_steps, n, steps_per_call, rounds, t)
        if calls:
            return calls, rounds
    return 0, 0


def budget_steps(budget: Any, epoch_steps: int | None) -> int | None:
    """Trial steps for `trial_budget` (a fraction of the first epoch, or a
    number of steps); None when the epoch length is unknown."""
    if isinstance(budget, int):
        return budget
    return int(budget * epoch_steps) if epoch_steps else None


def validate_budget(budget: Any) -> None:
    steps = isinstance(budget, int) and not isinstance(budget, bool)
    share = isinstance(budget, float) and 0.0 < budget <= 1.0
    if not (share or (steps and budget >= 1)):
        raise ValueError(
            f"Unsupported value `XLATuner(trial_budget={budget!r})`: pass a "
            "fraction of the first epoch in (0, 1] (e.g. 0.25) or a number "
            "of steps (e.g. 120)."
        )


def minimum_steps(
    n: int, steps_per_call: int, rounds: int = 1, t: Tunables = TUNABLES
) -> int:
    """The fewest steps a trial of `n` candidates in `rounds` rounds can
    decide on (by default one round: the fewest at all)."""
    return rounds * n * t.min_window_calls * steps_per_call


def run_budget(
    budget: Any,
    epoch_steps: int | None,
    epochs: int | None,
    n: int,
    steps_per_call: int,
    t: Tunables = TUNABLES,
) -> int | None:
    """The trial's steps for `n` candidates: `trial_budget`, raised to the
    fewest steps of two rounds when they are at most `max_run_share` of
    the run, or else of one round when the run holds them (the trial then
    spans epochs if the first is shorter); None when the epoch length is
    unknown."""
    steps = budget_steps(budget, epoch_steps)
    if steps is None or not epoch_steps:
        return steps
    run = epoch_steps * (epochs or 1)
    for rounds, share in ((t.min_rounds, t.max_run_share), (t.short_rounds, 1)):
        need = minimum_steps(n, steps_per_call, rounds, t)
        if steps < need <= share * run:
            return need
    return steps


def baseline_steps(epoch_steps: int, t: Tunables = TUNABLES) -> int:
    """The baseline's steps, XLA's and no XLA's, for a first epoch of
    `epoch_steps` (see `Tunables.baseline_share`)."""
    budget = int(t.baseline_share * epoch_steps)
    budget = min(max(budget, t.baseline_steps), t.baseline_max_steps)
    short = max(int(t.baseline_short_share * epoch_steps), t.baseline_min_steps)
    return min(budget, short, epoch_steps)


@dataclasses.dataclass(frozen=True)
class TrialPlan:
    """A trial's schedule: calls per window, windows per candidate,
    whether it spans epochs (a first epoch too short), and the run's
    planned train steps, if known."""

    calls: int
    rounds: int
    spans: bool
    run_steps: int | None


def trial_plan(
    budget: Any,
    epoch_steps: int | None,
    epochs: int | None,
    n: int,
    steps_per_call: int,
    t: Tunables = TUNABLES,
) -> TrialPlan | tuple[str, str]:
    """The schedule of a trial of `n` candidates with `trial_budget`
    `budget` (`run_budget`, `schedule`), or `(problem, fix)` when it has
    no room."""
    steps = run_budget(budget, epoch_steps, epochs, n, steps_per_call, t)
    calls, rounds = schedule(steps or 0, n, steps_per_call, t)
    if steps is None:
        return (
            "the first epoch's length is unknown",
            "Pass `steps_per_epoch` to fit, or `trial_budget=<steps>`.",
        )
    if not calls:
        need = minimum_steps(n, steps_per_call, t=t)
        return (
            f"its budget is {steps} step{'s' * (steps != 1)} (trial_budget="
            f"{budget!r} of {epoch_steps}); {n} candidates need at least "
            f"{need}",
            f"A run of {need} steps or more lets it decide (it may take the "
            "whole run); or set `jit_compile` (and `mixed_precision`) "
            "explicitly.",
        )
    run = epoch_steps * (epochs or 1) if epoch_steps else None
    spans = bool(epoch_steps) and steps > epoch_steps
    return TrialPlan(calls, rounds, spans, run)


@dataclasses.dataclass(frozen=True)
class BaselinePlan:
    """The no-XLA baseline's schedule: calls per window, windows per
    side, whether they span epochs (a first epoch too short), XLA calls
    trained before the first window, and the trial position (in calls)
    extra rounds may reach while the speedup's range is not useful (0:
    none)."""

    calls: int
    rounds: int
    spans: bool
    warmup_calls: int
    extend_to: int


def baseline_plan(
    epoch_steps: int,
    epochs: int | None,
    steps_per_call: int,
    budget: Any,
    t: Tunables = TUNABLES,
) -> BaselinePlan | str:
    """The baseline's schedule for a first epoch of `epoch_steps`, or why
    there is none: `baseline_steps` of it in `baseline_rounds` rounds of
    windows (both sides), spanning epochs where the first is too short
    and the run holds them; after a warm-up of `baseline_warmup_steps`
    where the epoch has room beyond the windows and its last call; extra
    rounds within `trial_budget` (`budget`) and the first epoch."""
    spe = steps_per_call
    steps = baseline_steps(epoch_steps, t)
    spans = steps < t.baseline_min_steps <= epoch_steps * (epochs or 1)
    if spans:
        steps = t.baseline_min_steps
    for rounds in t.baseline_rounds:
        calls = steps // spe // (2 * rounds)
        if calls >= t.min_window_calls:
            break
    if calls < t.min_window_calls:
        need = minimum_steps(2, spe, rounds, t)
        return (
            f"the first epoch has {epoch_steps} steps; the baseline needs "
            f"{need}"
        )
    room = epoch_steps - 2 * rounds * calls * spe - spe
    warmup = 0 if spans else min(t.baseline_warmup_steps, max(room, 0)) // spe
    limit = budget_steps(budget, epoch_steps) or 0
    if not spans:
        limit = min(limit, epoch_steps - spe - warmup * spe)
    return BaselinePlan(calls, rounds, spans, warmup, max(limit, 0) // spe)


def unknown_length_plan(
    steps_per_call: int, budget: Any, t: Tunables = TUNABLES
) -> BaselinePlan | str:
    """The baseline's schedule for a single epoch of unknown length: the
    warm-up and windows an epoch long enough for `baseline_steps` gets,
    with extra rounds only within a `trial_budget` given in steps (a
    fraction of an unknown length is no length). The epoch may end
    first; the windows end with it."""
    nominal = math.ceil(t.baseline_steps / t.baseline_share)
    steps = budget if isinstance(budget, int) else 0
    return baseline_plan(nominal, 1, steps_per_call, steps, t)


def slower(
    live: list,
    best: float,
    medians: dict,
    seconds: dict,
    candidates: list,
    t: Tunables = TUNABLES,
) -> dict[Any, Drop]:
    """`SLOWER` and `PREDICTED` drops among `live` against the `best`
    measured median, given each measured candidate's median and timed
    steps (`seconds`); none under two measured candidates (slower than
    what?)."""
    measured = [c for c in live if c in medians]
    if len(measured) < 2:
        return {}
    limit = t.drop_factor * best
    out = {c: Drop.SLOWER for c in measured if min(seconds[c]) > limit}
    for c in live:
        guess = None if c in medians else predicted(c, candidates, medians, t)
        if guess is not None and guess > limit:
            out[c] = Drop.PREDICTED
    return out


def cannot_pay_back(
    untried: list,
    left: int,
    best: float,
    traces: list,
    compiles: list,
    predict: Any,
    t: Tunables = TUNABLES,
) -> dict[Any, Drop]:
    """The untried XLA candidates whose compile `left` steps cannot pay
    back, each with why.

    `PAYBACK`: even if their step took no time at all, those steps at the
    `best` measured median take less than the cheapest measured first
    call beyond a step (`traces`); with one measured, `single_trace` of
    it (that first call also paid the fit's start).
    `PREDICTED_PAYBACK`: at the speed the grid predicts (`predict(c)`,
    None where it cannot), the expected saving a step over the steps
    left is less than the cheapest measured XLA first call (`compiles`).
    """
    if not t.payback or not traces:
        return {}
    bound = min(traces) if len(traces) > 1 else t.single_trace * traces[0]
    if left * best < bound:
        return {c: Drop.PAYBACK for c in untried}
    out = {}
    for c in untried:
        guess = predict(c)
        if guess is None or not compiles:
            continue
        if expected_saving(best, guess, t) * left < min(compiles):
            out[c] = Drop.PREDICTED_PAYBACK
    return out


def expected_saving(best: float, guess: float, t: Tunables = TUNABLES) -> float:
    """What a candidate predicted at `guess` seconds a step is expected to
    save a step against the `best` measured median, where its real median
    lies anywhere (uniformly) from `drop_factor` times faster to
    `drop_factor` times slower than predicted (the margin the trial gives
    a prediction); a step slower than `best` saves nothing, since the
    trial would drop it."""
    if math.isinf(t.drop_factor):  # no band: only `PAYBACK`'s bound holds
        return best
    low, high = guess / t.drop_factor, guess * t.drop_factor
    if best <= low:
        return 0.0
    if best >= high:
        return best - (low + high) / 2
    return (best - low) ** 2 / (2 * (high - low))


def predicted(
    c: Any, candidates: list, medians: dict, t: Tunables = TUNABLES
) -> float | None:
    """An unmeasured candidate's median from the other three corners of
    the XLA x precision grid (each factor acting alone: its XLA setting at
    the other policy, times the other setting at its policy, over the
    other setting at the other policy); None where the grid cannot tell,
    or `predict_grid` is off."""
    policies = {x.policy for x in candidates}
    if not t.predict_grid or c.clustering is not None or len(policies) != 2:
        return None
    (other,) = policies - {c.policy}
    flipped = dataclasses.replace(c, jit=not c.jit)
    corners = (
        dataclasses.replace(c, policy=other),
        flipped,
        dataclasses.replace(flipped, policy=other),
    )
    if not all(k in medians for k in corners):
        return None
    a, b, base = (medians[k] for k in corners)
    return a * b / base
