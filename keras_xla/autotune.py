"""Drives the XLA/precision trial (`keras_xla.trial`) from XLATuner's hooks.

`start` plans the trial at train begin, `step` runs before each train call
of the first epoch (ends a window, switches candidates), and `finish`
puts the model in the winner's configuration, fills `report.decision` and
the `jit` section, and rebuilds the step functions for it. When there is
nothing to try, or no room to try it, the model trains as it was compiled
and a `trial-skipped` finding says why and how to make room.
"""

from __future__ import annotations

import logging
from typing import Any

from keras_xla import trial as trial_lib
from keras_xla.report import JitInfo

TRIAL_SKIPPED = "trial-skipped"


class _TrialRetraces(logging.Filter):
    """Drops TensorFlow's "triggered tf.function retracing" warning while
    the trial traces one step function per candidate: that is by design,
    and real retraces are the tuner's own `retrace` findings."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "triggered tf.function retracing" not in record.getMessage()


_FILTER = _TrialRetraces()


def start(tuner: Any, original: trial_lib.ModelState) -> trial_lib.Trial | None:
    """At train begin (after `configure_jit(model, True)`): puts the model
    in the first candidate's configuration and returns the trial, or, when
    there is nothing to try or no room to try it, in the configuration to
    train with and returns None."""
    model = tuner.model
    candidates, default = trial_lib.plan_candidates(
        tuner.jit_compile, tuner.mixed_precision, tuner._jit_on, model
    )
    rows = [trial_lib.candidate_row(c) for c in candidates]
    reused = tuner._trial_result
    if reused is not None and reused[0] is model:
        _, state, decision = reused
        state.restore(model)
        _settle(tuner, {**decision, "status": "reused"})
        return None
    if len(candidates) == 1:
        trial_lib.Trial(candidates, default, 1).state(model, candidates[0])
        decision = {
            "status": "single-candidate",
            "winner": candidates[0].name,
            "candidates": rows,
        }
        _settle(tuner, {**decision, "reason": "nothing else to try"})
        return None
    spe = tuner._spe
    steps = tuner.params.get("steps") if tuner.params else None
    budget = trial_lib.budget_steps(tuner.trial_budget, steps)
    calls = trial_lib.window_calls(budget or 0, len(candidates), spe)
    problem = None
    if tuner._probes is None:
        problem = (
            "it needs the tuner's step probe, which a plain Keras model "
            "under a multi-replica strategy does not get",
            "Build the model as `keras_xla.XLAModel`.",
        )
    elif budget is None:
        problem = (
            "the first epoch's length is unknown",
            "Pass `steps_per_epoch` to fit, or `trial_budget=<steps>`.",
        )
    elif not calls:
        need = trial_lib.minimum_steps(len(candidates), spe)
        problem = (
            f"its budget is {budget} steps (trial_budget="
            f"{tuner.trial_budget!r} of {steps}); {len(candidates)} "
            f"candidates need at least {need}",
            f"Raise `trial_budget` to {need} steps or more, or set "
            "`jit_compile` and `mixed_precision` explicitly.",
        )
    if problem is not None:
        decision = {"status": "skipped", "winner": None, "candidates": rows}
        _fall_back(tuner, original, tuner._jit_on, decision, *problem)
        return None
    trial = trial_lib.Trial(candidates, default, calls, spe)
    trial.original = original
    trial.xla_possible = tuner._jit_on
    trial.active = candidates[0]
    trial.state(model, trial.active)
    logging.getLogger("tensorflow").addFilter(_FILTER)
    tuner._jit_on = bool(model.jit_compile)
    return trial


def step(tuner: Any, batch: int) -> None:
    """Before train call `batch`: ends a window, switches candidates, or
    ends the trial."""
    trial = tuner._trial
    if trial.boundary():
        tuner._timer.flush("train", next_step=batch)
        trial.close_window(tuner._timer.records["train"])
        if trial.done:
            finish(tuner)
            return
    candidate = trial.current()
    if candidate != trial.active:
        trial.active = candidate
        trial.state(tuner.model, candidate)
        tuner._jit_on = candidate.jit
        tuner._rebuild_functions(("train",))
    trial.advance()


def finish(tuner: Any) -> None:
    """Decides (on the windows so far, if the epoch ended first) and puts
    the model in the winner's configuration for the rest of training."""
    trial, tuner._trial = tuner._trial, None
    logging.getLogger("tensorflow").removeFilter(_FILTER)
    trial.close_window(tuner._timer.records["train"])
    winner, decision = trial.decide()
    if winner is None:
        _fall_back(
            tuner,
            trial.original,
            trial.xla_possible,
            decision,
            f"it ended with {decision['reason']}",
            "Raise `trial_budget`, or give the first epoch more steps.",
        )
        return
    state = trial.state(tuner.model, winner)
    tuner._trial_result = (tuner.model, state, decision)
    _settle(tuner, decision)


def _fall_back(tuner, original, xla_possible, decision, problem, fix):
    """No decision: the model trains as it was compiled."""
    original.restore(tuner.model)
    tuner.model.jit_compile = bool(original.jit) and xla_possible
    decision["reason"] = f"The XLA/precision trial was skipped: {problem}."
    tuner._accountant.add_finding(
        TRIAL_SKIPPED, "warning", decision["reason"], fix
    )
    _settle(tuner, decision)


def _settle(tuner: Any, decision: dict) -> None:
    model = tuner.model
    tuner._jit_on = bool(model.jit_compile)
    tuner.report.decision = decision
    why = decision["reason"]
    if decision["status"] in ("decided", "reused"):
        why = f"the trial chose {decision['winner']} ({why})"
    tuner.report.jit = JitInfo(tuner.jit_compile, tuner._jit_on, why)
    tuner.report.environment["policy"] = model.dtype_policy.name
    tuner._decided = True
    if tuner._probes is not None and tuner._timer is not None:
        tuner._rebuild_functions()
