"""One trial's schedule, measurements and decision. Pure Python.

The first epoch's first steps run in short windows of each candidate
configuration (`policy.Candidate`), the order rotating from round to
round so that drift of the machine hits every candidate alike; the
no-XLA candidates run first. Every step is a real training step on the
same weights and optimizer state. The first call of each window (it pays
a switch, and the candidate's compilation in its first window) and any
call that compiled or traced is left out of the timing. At each window
boundary the policy drops candidates that cannot win; the fastest by
median step time trains the rest of the run. Putting the live model in a
candidate's configuration is `keras_xla.auto.runner`'s.
"""

from __future__ import annotations

import math
import statistics
from typing import Any

import numpy as np

from keras_xla.auto import policy
from keras_xla.auto.policy import TUNABLES, Candidate, Drop, Status, Tunables
from keras_xla.core.report import CandidateResult, Decision
from keras_xla.core.timing import ms


class Trial:
    """The schedule, the measurements and the decision of one trial.

    Args:
        candidates: The configurations to try (two or more).
        default: Keras's default configuration, for the speedup figure.
        window_calls: Calls of the train function per window.
        steps_per_call: Steps one call runs.
        rounds: Windows per candidate. Defaults to `tunables.rounds`.
        drop: Whether clearly slower candidates get no more windows.
        tunables: The policy's numbers and switches. Defaults to
            `policy.TUNABLES`.
    """

    def __init__(
        self,
        candidates: list[Candidate],
        default: Candidate,
        window_calls: int,
        steps_per_call: int = 1,
        rounds: int | None = None,
        drop: bool = True,
        tunables: Tunables | None = None,
    ) -> None:
        # (Read now: a test or benchmark may set `policy.TUNABLES`.)
        self.tunables = tunables or policy.TUNABLES
        self.rounds = self.tunables.rounds if rounds is None else rounds
        self.candidates = candidates
        self.default = default
        self.window_calls = window_calls
        self.steps_per_call = steps_per_call
        n = len(candidates)
        self.plan = [
            candidates[(i + r) % n]
            for r in range(self.rounds)
            for i in range(n)
            for _ in range(window_calls)
        ]
        self.position = 0
        self._consumed = 0
        self._window: Candidate | None = None
        self._seconds: dict[Candidate, list[float]] = {
            c: [] for c in candidates
        }
        self._first: dict[Candidate, Any] = {}
        self._calls = 0
        self._wall = 0.0
        self.wall_by: dict[Candidate, float] = {c: 0.0 for c in candidates}
        self.steps_by: dict[Candidate, int] = {c: 0 for c in candidates}
        # The run's planned train steps, if known (for what the winner
        # saves over the rest of it).
        self.run_steps: int | None = None
        # Candidates given no more windows, with the trial steps run then.
        self.dropped: dict[Candidate, int] = {}
        self.dropped_because: dict[Candidate, Drop] = {}
        self._drop = drop
        # Each window's timed steps (seconds), in order: the spread the
        # speedup's range comes from.
        self.windows: list[tuple[Candidate, list[float]]] = []
        # The train steps the windows ran: (epoch, first step) of the
        # first and of the last.
        self.span: list[tuple[int, int]] = []
        # The fit's epoch the trial's records are in now.
        self.epoch = 0

    @property
    def done(self) -> bool:
        return self.position >= len(self.plan)

    def boundary(self) -> bool:
        """Whether the call about to start begins a window (or ends the
        trial)."""
        return self.done or self.position % self.window_calls == 0

    def current(self) -> Candidate:
        return self.plan[self.position]

    def advance(self) -> None:
        self._window = self.plan[self.position]
        self.position += 1

    def skip(self, records: list) -> None:
        """The calls in `records` so far are no window's (a warm-up)."""
        self._consumed = len(records)

    def close_window(self, records: list) -> None:
        """Takes the records the last window added to `records` (the
        epoch's train records so far)."""
        fresh = records[self._consumed :]
        self._consumed = len(records)
        if self._window is None or not fresh:
            return
        candidate = self._window
        self._calls += len(fresh)
        self._wall += sum(r.seconds for r in fresh)
        self.wall_by[candidate] += sum(r.seconds for r in fresh)
        self.steps_by[candidate] += sum(r.steps for r in fresh)
        self._first.setdefault(candidate, fresh[0])
        timed = []
        for record in fresh[1:]:
            if not record.compiled and record.trace_seconds == 0.0:
                timed.extend([record.seconds_per_step] * record.steps)
        timed = unbursted(timed, self.tunables.burst_share)
        if timed and not any(timed):
            # The whole burst reached the window's first call: its later
            # steps took no time on the clock. The window's wall time over
            # its steps (its first call's included) is what holds.
            steady = [r for r in fresh if not r.compiled]
            steps = sum(r.steps for r in steady)
            if steps:
                per_step = sum(r.seconds for r in steady) / steps
                timed = [per_step] * len(timed)
        self._seconds[candidate].extend(timed)
        self.windows.append((candidate, timed))
        last = fresh[-1].first_step + fresh[-1].steps - 1
        self.span[1:] = [(self.epoch, last)]
        if len(self.span) == 1:
            self.span.insert(0, (self.epoch, fresh[0].first_step))
        self._drop_slower()

    def _drop_slower(self) -> None:
        """At a window boundary, candidates that cannot win get no more
        windows (`policy.slower`, `cannot_pay_back`): an unmeasured one
        dropped so is never compiled."""
        live = [c for c in self.candidates if c not in self.dropped]
        if not self._drop or len(live) < 2 or not self.boundary():
            return  # (mid-window: a paused trial's epoch end)
        medians = {
            c: statistics.median(t)
            for c, t in self._seconds.items()
            if len(t) >= 2
        }
        best = min((medians[c] for c in live if c in medians), default=None)
        if best is None:
            return
        slow = policy.slower(
            live, best, medians, self._seconds, self.candidates, self.tunables
        )
        # (Clearly slower holds for any run length; these for this one.)
        for c, because in self.cannot_pay_back(live, best, medians).items():
            slow.setdefault(c, because)
        for c, because in slow.items():
            self.dropped[c] = self._calls * self.steps_per_call
            self.dropped_because[c] = because
        # Whole windows go: the plan stays aligned on window boundaries;
        # with one candidate left there is nothing more to measure.
        rest = [c for c in self.plan[self.position :] if c not in slow]
        if len(live) - len(slow) < 2:
            rest = []
        self.plan = self.plan[: self.position] + rest

    def cannot_pay_back(self, live: list, best: float, medians: dict) -> dict:
        """The live XLA candidates not yet run whose compile the run's
        steps left cannot pay back (`policy.cannot_pay_back`), each with
        why. Auto-clustering reuses the traced step: not judged."""
        if not self.run_steps:
            return {}
        excess = {
            c: t
            for c in self._first
            if (t := self.first_call_excess(c)) is not None
        }
        return policy.cannot_pay_back(
            untried=[c for c in live if c not in self._first and c.jit],
            left=self.run_steps - self._calls * self.steps_per_call,
            best=best,
            traces=list(excess.values()),
            compiles=[t for c, t in excess.items() if c.jit],
            predict=lambda c: policy.predicted(
                c, self.candidates, medians, self.tunables
            ),
            t=self.tunables,
        )

    def new_epoch(self) -> None:
        """The epoch's records were handed over: count from zero."""
        self._consumed = 0
        self.epoch += 1

    def extend(self) -> None:
        """One more round of windows, in the first round's order (the
        windows are too few for a useful range)."""
        self.plan += self.plan[: len(self.candidates) * self.window_calls]
        self.rounds += 1

    def speedup_range(
        self, slow: Candidate, fast: Candidate, steady: bool = False
    ):
        """`speedup_range` of `slow`'s windows over `fast`'s (with
        `steady`, their `steady_windows`)."""
        windows = self.steady_windows if steady else self.windows_of
        return speedup_range(windows(slow), windows(fast), self.tunables)

    def windows_of(self, candidate: Candidate) -> list[list[float]]:
        """`candidate`'s windows' timed steps (windows with some)."""
        return [t for c, t in self.windows if c == candidate and t]

    def steady_windows(self, candidate: Candidate) -> list[list[float]]:
        """`candidate`'s windows' timed steps, without its first
        `settling_windows` where at least two windows remain."""
        found = self.windows_of(candidate)
        skip = self.tunables.settling_windows
        return found[skip:] if len(found) - skip >= 2 else found

    def steady_median_ms(self, candidate: Candidate) -> float | None:
        """The median of `candidate`'s steady windows' steps (ms; None
        under two steps)."""
        times = [t for w in self.steady_windows(candidate) for t in w]
        return ms(statistics.median(times)) if len(times) >= 2 else None

    def first_call_excess(self, candidate: Candidate) -> float | None:
        """Seconds the candidate's first call took beyond its median
        steps (its tracing, or its compilation); None before it has a
        median."""
        first, times = self._first.get(candidate), self._seconds[candidate]
        if first is None or len(times) < 2:
            return None
        excess = first.seconds - statistics.median(times) * first.steps
        return round(max(excess, 0.0), 3)

    def decide(self) -> tuple[Candidate | None, Decision]:
        """The winner (None when the trial could not decide) and the
        report's `decision` section."""
        rows, medians = [], {}
        for c in self.candidates:
            times = self._seconds[c]
            median = statistics.median(times) if len(times) >= 2 else None
            medians[c], excess = median, self.first_call_excess(c)
            row = candidate_row(c, len(times), ms(median), excess)
            row.dropped_after_steps = self.dropped.get(c)
            row.dropped_because = self.dropped_because.get(c)
            rows.append(row)
        measured = [c for c in self.candidates if medians[c] is not None]
        # A candidate dropped on a prediction has no timing, and needs none;
        # with none measured, none was dropped (`_drop_slower`).
        live = [c for c in self.candidates if c not in self.dropped]
        unmeasured = [c.name for c in live if medians[c] is None]
        trial_steps = self._calls * self.steps_per_call
        decision = Decision(
            status=Status.SKIPPED,
            winner=None,
            reason="",
            candidates=rows,
            default=self.default.name,
            trial_steps=trial_steps,
            trial_seconds=round(self._wall, 3),
        )
        if unmeasured:
            decision.reason = "too few timed steps of " + ", ".join(unmeasured)
            return None, decision
        winner = min(measured, key=lambda c: medians[c])
        decision.status, decision.winner = Status.DECIDED, winner.name
        decision.speedup_vs_default, decision.break_even_steps = versus_default(
            winner, self.default, medians, self.first_call_excess(winner)
        )
        # (A range means the default was measured: it has a speedup.)
        found = self.speedup_range(self.default, winner)
        if winner != self.default and found:
            decision.speedup_low = round(found[0], 3)
            decision.speedup_high = round(found[1], 3)
        best = medians[winner]
        firsts, slower = beyond_winner(
            first_calls={c: self.first_call_excess(c) for c in self._first},
            traced={c: r.trace_seconds for c, r in self._first.items()},
            winner=winner,
            wall=self._wall - trial_steps * best,
        )
        decision.first_call_seconds = round(firsts, 3)
        decision.slow_window_seconds = round(slower, 3)
        decision.trial_cost_seconds = round(firsts + slower, 3)
        base = medians.get(self.default)
        if base is not None and self.run_steps:
            rest = max(self.run_steps - trial_steps, 0)
            decision.saving_seconds = round((base - best) * rest, 3)
        ranked = sorted(measured, key=lambda c: medians[c])
        decision.reason = ", ".join(
            f"{c.name} {medians[c] * 1000:.2f} ms" for c in ranked
        )
        why = {
            Drop.PAYBACK: "an XLA compile could not pay back in the steps left",
            Drop.PREDICTED_PAYBACK: "at the speed the other candidates "
            "predict, its compile is not expected to pay back in the steps "
            "left",
        }
        for because, text in why.items():
            unpaid = [
                c.name for c, b in self.dropped_because.items() if b == because
            ]
            if unpaid:
                decision.reason += f"; {', '.join(unpaid)} not tried ({text})"
        return winner, decision


def unbursted(times: list[float], share: float) -> list[float]:
    """A window's step times, or its mean for each where its median is
    under `share` of its mean: the steps' ends were stamped in bursts,
    and only their sum (the window's wall time) holds."""
    if len(times) < 2:
        return times
    mean = sum(times) / len(times)
    if statistics.median(times) < share * mean:
        return [mean] * len(times)
    return times


def candidate_row(c, measured=0, median_ms=None, compile_seconds=None):
    """The report's row for one candidate."""
    return CandidateResult(
        c.name, c.jit, c.policy, measured, median_ms, compile_seconds
    )


def speedup_range(
    slow: list[list[float]],
    fast: list[list[float]],
    t: Tunables = TUNABLES,
    cross: bool = True,
) -> tuple[float, float] | None:
    """The range of `median(slow) / median(fast)` that the windows' own
    spread allows: from the smallest to the largest of (a) the ratio of
    each window median of one side to each of the other's (the machine
    drifts between any two windows, not only between rounds) and (b) the
    central `range_share` of the ratios of medians of the timed steps
    resampled with replacement, each side within its windows (the spread
    of steps in a window). None with fewer than two timed steps a side.

    Args:
        slow: Per window of the slower-expected side (no XLA), its timed
            steps' seconds.
        fast: The same for the other side (XLA).
        t: The tunables (`range_share`, `resamples`).
        cross: False pairs only each round's two windows, the earlier
            rule (`benchmarks/verdict_truth.py` compares the two).
    """
    if sum(map(len, slow)) < 2 or sum(map(len, fast)) < 2:
        return None
    pairs = [(a, b) for a in slow for b in fast] if cross else zip(slow, fast)
    window_ratios = [
        statistics.median(a) / statistics.median(b)
        for a, b in pairs
        if a and b and statistics.median(b) > 0
    ]
    # Vectorized: it runs in a step hook.
    rng = np.random.default_rng(0)

    def resampled_medians(windows):
        columns = [
            np.asarray(w)[rng.integers(0, len(w), (t.resamples, len(w)))]
            for w in windows
            if w
        ]
        return np.median(np.concatenate(columns, axis=1), axis=1)

    ratios = np.sort(resampled_medians(slow) / resampled_medians(fast))
    cut = int(t.resamples * (1 - t.range_share) / 2)
    central = ratios[cut : t.resamples - cut]
    low, high = float(central[0]), float(central[-1])
    return min([low, *window_ratios]), max([high, *window_ratios])


def range_useful(low: float, high: float, t: Tunables = TUNABLES) -> bool:
    """Whether a speedup's range tells the reader enough: it says which
    side of 1.0 XLA is on, or it is narrower than `useful_width` of its
    middle."""
    middle = (low + high) / 2
    return low > 1.0 or high < 1.0 or high - low <= t.useful_width * middle


def beyond_winner(
    first_calls: dict[Any, float | None],
    traced: dict[Any, float],
    winner: Any,
    wall: float,
) -> tuple[float, float]:
    """`(first-call seconds, slow-window seconds)`: what the trial cost
    beyond a run on the winner alone.

    Args:
        first_calls: Each run candidate's first call beyond its median
            steps (its trace, or its compile), in the order they ran: the
            first is the fit's first call.
        traced: The Python trace seconds in each one's first call.
        winner: The winner (one of them).
        wall: The trial's wall time beyond its steps at the winner's
            median.

    A run on the winner alone makes one first call: it pays the fit's
    start and the winner's trace (and compile), taken as the larger of
    the trial's first call and the winner's own. A winner whose first
    call traced nothing, where a candidate of its precision traced, called
    the step that one traced (an XLA winner after its no-XLA twin); alone
    it would pay that trace too. The slow windows are the rest of `wall`
    (slower steps, each window's switching call). BENCHMARKS.md ("auto"
    on short runs) has how close this comes to the measured cost.
    """
    excess = {c: t or 0.0 for c, t in first_calls.items()}
    opening = next(iter(excess))
    own = excess.get(winner, 0.0)
    twins = [c for c in excess if c != winner and c.policy == winner.policy]
    twin_trace = max((traced[c] for c in twins), default=0.0)
    shared = winner != opening and winner in traced and not traced[winner]
    alone = max(excess[opening], own + (twin_trace if shared else 0.0))
    return sum(excess.values()) - alone, wall - sum(excess.values())


def versus_default(
    winner: Any, default: Any, medians: dict, compile_seconds: float | None
) -> tuple[float | None, int | None]:
    """`(speedup over Keras's default, break-even steps)`: the default's
    median over the winner's, and the steps the winner's time saved a step
    takes to repay its `compile_seconds` (None where it saves nothing)."""
    base = medians.get(default)
    if base is None:
        return None, None
    gain = base - medians[winner]
    steps = math.ceil((compile_seconds or 0.0) / gain) if gain > 0 else None
    return round(base / medians[winner], 4), 0 if winner == default else steps
