"""The trial and the no-XLA baseline window on a live model.

`plan()` puts the model in the first candidate's configuration and returns
a `TrialRunner`, or, when there is nothing to try or no room to try it, a
`Decided`: the report's decision and, when the trial was skipped, why and
how to make room. `plan_baseline()` does the same for the baseline window
(real steps without XLA, in windows interleaved with XLA's, by the same
mechanism; the model keeps XLA after it), whose result is a `Measured`.
The runner switches candidates at window boundaries and, when the trial
ends, returns its result. The owner of the fit applies what these return
(XLA on or off, the step functions, the report); nothing here touches the
tuner.
"""

from __future__ import annotations

import dataclasses
import enum
import logging
from collections.abc import Callable
from typing import Any

from keras_xla import xla_setting
from keras_xla.auto import policy
from keras_xla.auto import trial as trial_lib
from keras_xla.auto.memory import DecisionMemory
from keras_xla.auto.model_state import ModelState, configure, plan_candidates
from keras_xla.auto.policy import Candidate, Drop, Status
from keras_xla.auto.trial import Trial
from keras_xla.core.report import BaselineSection, Decision


@dataclasses.dataclass
class Decided:
    """How the model trains after the trial (or instead of it): the
    report's `decision` section, `skipped`'s `(problem, fix)` when the
    trial could not decide, and the winner's state `kept` for a later fit
    of the same model to reuse (None when nothing was decided)."""

    decision: Decision
    skipped: tuple[str, str] | None = None
    kept: ModelState | None = None

    def jit_reason(self) -> str:
        d = self.decision
        if d.status in (Status.DECIDED, Status.REUSED, Status.REMEMBERED):
            return f"the trial chose {d.winner} ({d.reason})"
        return d.reason


@dataclasses.dataclass
class Measured:
    """The no-XLA baseline window's result: the report's `baseline`
    section (its figures, or why there are none)."""

    baseline: BaselineSection


class Next(enum.Enum):
    """What the owner does after `TrialRunner.before_call`."""

    CALL = "call"  # nothing: make the call
    SWITCHED = "switched"  # the model changed: rebuild the train function
    DONE = "done"  # the trial is over: call `finish`


class _TrialRetraces(logging.Filter):
    """Drops TensorFlow's "triggered tf.function retracing" warning while
    the trial traces one step function per candidate: that is by design,
    and real retraces are the tuner's own `retrace` findings."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "triggered tf.function retracing" not in record.getMessage()


RETRACE_FILTER = _TrialRetraces()


@dataclasses.dataclass(frozen=True)
class Request:
    """What the user asked the trial for, and what this fit allows.

    Attributes:
        jit: `XLATuner(jit_compile=...)`.
        precision: `XLATuner(mixed_precision=...)`.
        budget: `XLATuner(trial_budget=...)`.
        xla_possible: Whether XLA can be on for this model.
        epoch_steps: Keras's steps per epoch, if known.
        steps_per_call: `steps_per_execution`.
        probed: Whether the model's steps carry the shape probe.
        baseline: `XLATuner(baseline=...)`.
        epochs: The fit's epochs, if known.
        memory_dir: Where decisions are remembered across runs (None:
            not remembered).
        clustering: Whether auto-clustering is a candidate (the user
            turned it on with `set_jit`, and it acts here).
        defer_unknown: Whether a baseline over data of unknown length in
            a fit of several epochs waits for the second epoch (whose
            length is the first's). JAX runs it in the first: its trainer
            stops at `next(iterator)` before a step at the end of data.
        tunables: The policy's numbers. Defaults to `policy.TUNABLES`.
        devices: The devices the precision recommendation reads
            (`DeviceInfo`s); None: TensorFlow's.
        first_jit: The XLA setting of the candidates tried first (the
            one the fit starts with); None: the candidates' own order.
        workers: The workers of the job this fit is one of (1: alone).
            A job's workers would each decide by their own clock, and
            workers in different configurations wait for each other at
            every collective: a job does not run the trial, and its
            baseline windows get no extra rounds (their switches are
            then set by step counts alone, the same on every worker).
    """

    jit: Any
    precision: Any
    budget: float | int
    xla_possible: bool
    epoch_steps: int | None
    steps_per_call: int
    probed: bool
    baseline: bool = True
    epochs: int | None = None
    memory_dir: str | None = None
    clustering: bool = False
    defer_unknown: bool = True
    tunables: policy.Tunables | None = None
    devices: Any = None
    first_jit: bool | None = None
    workers: int = 1


def plan(
    model: Any,
    request: Request,
    original: ModelState,
    previous: tuple[Any, ModelState, Decision] | None,
) -> TrialRunner | Decided:
    """Starts the trial (the model in its first candidate's
    configuration), or settles at once. `original` is the model's state
    before the tuner changed it; `previous`, `(model, kept state,
    decision)` of an earlier fit's trial with the same tuner, if any."""
    candidates, default = plan_candidates(
        request.jit,
        request.precision,
        request.xla_possible,
        model,
        request.clustering,
        request.devices,
    )
    if request.first_jit is not None:
        candidates.sort(key=lambda c: c.jit != request.first_jit)
    t = request.tunables or policy.TUNABLES
    rows = [trial_lib.candidate_row(c) for c in candidates]
    if previous is not None and previous[0] is model:
        _, state, decision = previous
        state.restore(model)
        return Decided(dataclasses.replace(decision, status=Status.REUSED))
    if len(candidates) == 1:
        only = candidates[0]
        configure(model, original, only)
        single = Decision(Status.SINGLE, only.name, "nothing else to try", rows)
        return Decided(single)
    spe = request.steps_per_call
    plan = policy.trial_plan(
        request.budget,
        request.epoch_steps,
        request.epochs,
        len(candidates),
        spe,
        t,
    )
    if not request.probed:
        plan = (
            "it needs the tuner's step probe, which a plain Keras model "
            "under a multi-replica strategy does not get",
            "Build the model as `keras_xla.XLAModel`.",
        )
    if request.workers > 1:
        plan = (
            f"this fit is one of a job's {request.workers} workers, each of "
            "which would decide by its own clock; workers that chose "
            "differently would wait for each other at every collective",
            "Choose on one process first (a single-worker run with "
            '"auto"), then give the job that setting.',
        )
    if not isinstance(plan, policy.TrialPlan):
        skipped = Decision(Status.SKIPPED, None, "", rows)
        return _fall_back(model, original, request.xla_possible, skipped, *plan)
    memory = None
    if request.memory_dir:
        names = [c.name for c in candidates]
        memory = DecisionMemory(request.memory_dir, model, names, spe)
        # The likely winner first: a recalled run then never switches.
        likely = memory.likely()
        candidates.sort(key=lambda c: c.name != likely)
    trial = Trial(candidates, default, plan.calls, spe, plan.rounds, tunables=t)
    trial.run_steps = plan.run_steps
    runner = TrialRunner(trial, original, request.xla_possible, memory=memory)
    runner.spans = plan.spans
    runner.switch(model, candidates[0])
    logging.getLogger("tensorflow").addFilter(RETRACE_FILTER)
    return runner


DEFERRED_REASON = (
    "the first epoch's length is unknown; the baseline runs in the second"
)


def plan_baseline(model: Any, request: Request) -> TrialRunner | Measured:
    """A no-XLA baseline for a fit with XLA on: windows without XLA
    interleaved with XLA's, on the schedule `policy.baseline_plan` gives;
    the model keeps XLA after it."""
    t = request.tunables or policy.TUNABLES
    spe, steps = request.steps_per_call, request.epoch_steps
    if not request.baseline:
        off = "the baseline window is off (XLATuner(baseline=False))"
        return Measured(BaselineSection(reason=off))
    if not steps and request.defer_unknown and (request.epochs or 1) > 1:
        # The second epoch's length is the first's: the owner starts the
        # baseline there (`plan_baseline` again, with that length).
        return Measured(BaselineSection(reason=DEFERRED_REASON))
    if steps:
        plan = policy.baseline_plan(
            steps, request.epochs, spe, request.budget, t
        )
    else:
        # A single epoch of unknown length: the windows may meet the end
        # of the data, where Keras's call of a train function without
        # XLA still advances optimizer.iterations (measured, TF 2.21 and
        # Keras 3.15: 11 for 10 batches, weights and slots unchanged);
        # the owner gives the count back (`unknown_length`).
        plan = policy.unknown_length_plan(spe, request.budget, t)
    if not request.probed:
        plan = (
            "the model's steps carry no probe (a plain model under a "
            "multi-replica strategy)"
        )
    if isinstance(plan, str):
        return Measured(BaselineSection(reason=plan))
    if request.workers > 1:
        # Extra rounds wait on this worker's clock (`Request.workers`).
        plan = dataclasses.replace(plan, extend_to=0)
    # XLA first (it trains on after the windows), then the same without
    # XLA; no dropping: the baseline measures both sides, however clear.
    dtype = model.dtype_policy.name
    keep = Candidate(True, dtype)
    trial = Trial(
        [keep, Candidate(False, dtype)],
        keep,
        plan.calls,
        spe,
        plan.rounds,
        drop=False,
        tunables=t,
    )
    runner = TrialRunner(trial, ModelState(model), True, keep=keep)
    runner.spans, runner.warmup = plan.spans, plan.warmup_calls
    runner.extend_to = plan.extend_to
    runner.unknown_length = not steps
    runner.switch(model, keep)
    logging.getLogger("tensorflow").addFilter(RETRACE_FILTER)
    return runner


class TrialRunner:
    """Runs one trial's (or baseline's) schedule on the live model."""

    def __init__(
        self,
        trial: Trial,
        original: ModelState,
        xla_possible: bool,
        keep: Candidate | None = None,
        memory: DecisionMemory | None = None,
    ) -> None:
        self.trial = trial
        self.original = original
        self.xla_possible = xla_possible
        # Decisions of earlier runs: looked up with the first step's
        # signature, which the first call gives.
        self.memory = memory
        # Whether the budget is longer than the first epoch.
        self.spans = False
        self._signature = None
        self._recalled: dict | None = None
        # A baseline trial measures, and then keeps the user's setting.
        self.keep = keep
        # A baseline's `BaselinePlan.extend_to` and `warmup_calls`.
        self.extend_to = 0
        self.warmup = 0
        self._warming = False
        self.active: Candidate | None = None
        self._states: dict[Candidate, ModelState] = {}
        # A baseline in an epoch of unknown length (`plan_baseline`).
        self.unknown_length = False

    def pause(self, records: list, more_epochs: bool) -> bool:
        """Validation or an epoch's end: True if the trial ends here; a
        trial that spans epochs (`spans`) takes the records so far and
        goes on while more epochs follow."""
        if not (self.spans and more_epochs) or self.trial.done:
            return True
        return self.close_window(records)

    def new_epoch(self) -> None:
        """The epoch's records were handed over (a trial spanning it)."""
        self.trial.new_epoch()

    def at_boundary(self) -> bool:
        """Whether the call about to start begins a window (or ends the
        trial): the owner then hands the records so far to
        `close_window`."""
        return self.trial.boundary()

    def close_window(self, records: list) -> bool:
        """Takes the last window's records; returns True when the trial
        is over (call `finish`)."""
        self.trial.close_window(records)
        return self.trial.done

    def before_call(self, model: Any, records: Callable[[], list]) -> Next:
        """Before each trial call: at a window boundary, hands the train
        records so far (`records()`) to the trial."""
        if self.warmup:
            self.warmup -= 1
            self._warming = True
            return Next.CALL
        if self._warming:  # the warm-up's calls are not a window's
            self.trial.skip(records())
            self._warming = False
        if self.memory is not None and self._signature is None:
            if self._recall(records()):
                return Next.DONE
        if self.at_boundary() and self.close_window(records()):
            if not self._widen():
                return Next.DONE
        return Next.SWITCHED if self.advance(model) else Next.CALL

    def _widen(self) -> bool:
        """A baseline whose speedup range is not useful yet
        (`trial.range_useful`) gets one more round of windows where
        `extend_to` allows; returns True if it did."""
        trial = self.trial
        if self.keep is None or not self.extend_to:
            return False
        no_xla = Candidate(False, self.keep.policy)
        found = trial.speedup_range(no_xla, self.keep, steady=True)
        if found is not None and trial_lib.range_useful(*found, trial.tunables):
            return False
        calls = trial.position + len(trial.candidates) * trial.window_calls
        if calls > self.extend_to:
            return False
        trial.extend()
        return True

    def _recall(self, records: list) -> bool:
        """With the first step's signature: whether an earlier run's
        decision holds for this one."""
        first = next(
            (r.signatures[0][0] for r in records if r.signatures), None
        )
        if first is None:
            return False
        self._signature = first
        entry = self.memory.recall(first, self.trial.run_steps)
        names = {c.name for c in self.trial.candidates}
        if entry is not None and entry["winner"] in names:
            self._recalled = entry
        return self._recalled is not None

    def advance(self, model: Any) -> bool:
        """Before a trial call: puts the model in the scheduled
        candidate's configuration; returns True if that changed it (the
        owner then rebuilds the train function)."""
        candidate = self.trial.current()
        switched = candidate != self.active
        if switched:
            self.switch(model, candidate)
        self.trial.advance()
        return switched

    def switch(self, model: Any, candidate: Candidate) -> None:
        """Puts the model in `candidate`'s configuration."""
        if self.active is not None and candidate.policy != self.active.policy:
            # Keras's JAX loop holds the variables between steps: they
            # are written back first, so a changed optimizer (loss
            # scaling) reads them afresh at the next step.
            sync = getattr(model, "jax_state_sync", None)
            if sync is not None:
                sync()
        self.active = candidate
        state = self._states.get(candidate)
        if state is None:
            configure(model, self.original, candidate)
            state = self._states[candidate] = ModelState(model)
        else:
            state.restore(model)

    def finish(self, model: Any, records: list) -> Decided | Measured:
        """Decides (on the windows so far, if the epoch ended first) and
        puts the model in the winner's configuration."""
        logging.getLogger("tensorflow").removeFilter(RETRACE_FILTER)
        self.trial.close_window(records)
        if self.keep is not None:
            return self._finish_baseline(model)
        if self._recalled is not None:
            return self._finish_recalled(model)
        winner, decision = self.trial.decide()
        if winner is None:
            problem = f"it ended with {decision.reason}"
            fix = "Raise `trial_budget`, or give the first epoch more steps."
            return self.settle(model, None, decision, (problem, fix))
        # A winner of a run too short to try XLA holds for runs up to
        # this one's length only: a longer run must try XLA again.
        short = any(
            b in (Drop.PAYBACK, Drop.PREDICTED_PAYBACK)
            for b in self.trial.dropped_because.values()
        )
        if self.memory is not None and self._signature is not None:
            self.memory.remember(
                self._signature,
                winner.name,
                decision.reason,
                up_to_steps=self.trial.run_steps if short else None,
            )
        return self.settle(model, winner, decision)

    def abandon(self, model: Any) -> None:
        """The fit ended the windows early: a baseline's model goes back
        to XLA, a trial's as it was compiled (nothing was chosen)."""
        logging.getLogger("tensorflow").removeFilter(RETRACE_FILTER)
        if self.keep is not None:
            self.switch(model, self.keep)
        else:
            as_compiled(model, self.original, self.xla_possible)

    def settle(
        self,
        model: Any,
        winner: Candidate | None,
        decision: Decision,
        skipped: tuple[str, str] | None = None,
    ) -> Decided:
        """The trial's result, with the model in `winner`'s configuration;
        with no winner, the model as it was compiled and `skipped`'s
        `(problem, fix)` in the result."""
        if winner is None:
            return _fall_back(
                model, self.original, self.xla_possible, decision, *skipped
            )
        self.switch(model, winner)
        return Decided(decision, kept=self._states[winner])

    def _finish_recalled(self, model: Any) -> Decided:
        entry = self._recalled
        limit = entry.get("up_to_steps")
        held = f", for runs of up to {limit} steps" if limit else ""
        winner = next(
            c for c in self.trial.candidates if c.name == entry["winner"]
        )
        decision = Decision(
            Status.REMEMBERED,
            winner.name,
            f"an earlier run's trial ({entry.get('saved_at', '?')}) on the "
            f"same model, inputs, hardware and versions{held}: "
            f"{entry['reason']}",
            [trial_lib.candidate_row(c) for c in self.trial.candidates],
            default=self.trial.default.name,
            trial_steps=self.trial.position * self.trial.steps_per_call,
        )
        return self.settle(model, winner, decision)

    def _finish_baseline(self, model: Any) -> Measured:
        self.switch(model, self.keep)
        trial = self.trial
        no_xla = Candidate(False, self.keep.policy)
        xla_ms = trial.steady_median_ms(self.keep)
        wall, run = trial.wall_by[no_xla], trial.steps_by[no_xla]
        # What the no-XLA windows cost beyond training them with XLA.
        cost = wall - run * xla_ms / 1000 if xla_ms is not None else wall
        found = trial.speedup_range(no_xla, self.keep, steady=True)
        steady = trial.steady_windows(no_xla)
        # The rounds that ran (the data may end first).
        rounds = len(trial.windows_of(no_xla))
        t = trial.tunables
        if found and rounds - len(steady) < t.settling_windows:
            # Too short a run to leave the no-XLA side's settling window
            # out: its median may be that much too slow, XLA's speedup
            # that much too high.
            found = (found[0] / t.unsettled_slowdown, found[1])
        section = BaselineSection(
            speedup_low=round(found[0], 3) if found else None,
            speedup_high=round(found[1], 3) if found else None,
            rounds=rounds,
            settling_rounds=rounds - len(steady),
            span=[list(s) for s in trial.span],
            steps=sum(len(w) for w in steady),
            no_xla_step_ms=trial.steady_median_ms(no_xla),
            xla_step_ms=xla_ms,
            cost_seconds=round(cost, 3),
            run_steps=run,
            window_seconds=round(wall, 3),
            trace_seconds=trial.first_call_excess(no_xla),
        )
        if None in (section.no_xla_step_ms, section.xla_step_ms):
            section.reason = (
                "the baseline windows ended before two steps of each were timed"
            )
        return Measured(section)


def as_compiled(model, original: ModelState, xla_possible: bool) -> None:
    """The model as it was compiled (`original`), XLA where possible."""
    original.restore(model)
    xla_setting.set_xla(model, bool(original.jit) and xla_possible)


def _fall_back(model, original, xla_possible, decision, problem, fix):
    """No decision: the model trains as it was compiled; `decision` says
    why (`problem`), and the finding says how to make room (`fix`)."""
    as_compiled(model, original, xla_possible)
    decision.reason = f"The XLA/precision trial was skipped: {problem}."
    return Decided(decision, skipped=(decision.reason, fix))
