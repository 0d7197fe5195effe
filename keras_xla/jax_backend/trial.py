"""`jit_compile="auto"` on JAX: the live XLA on/off trial.

The schedule, the timing rule, the decision and the speedup's range are
the TensorFlow side's: an `auto.trial.Trial` of two candidates (the
model's policy with XLA, and without) sized by `auto.policy`, run by
`auto.runner.TrialRunner` and decided by `Trial.decide()`. What differs
is what a candidate is: on JAX a train function, not a model setting
(`JaxRunner.switch` only notes it; the owner, `JaxFitRun`, puts the
`active` candidate's function on the model: the model's jitted one, or
Keras's no-jit one), and what the trial leaves behind
(`JaxTrialRunner.settle`: the winner, or XLA on when it could not
decide, as Keras's "auto" resolves on JAX). The precision is not tried
on JAX: the model keeps its policy.
"""

from __future__ import annotations

from typing import Any

from keras_xla.auto import policy
from keras_xla.auto import trial as trial_lib
from keras_xla.auto.memory import DecisionMemory
from keras_xla.auto.policy import Candidate, Status
from keras_xla.auto.runner import Decided, TrialRunner
from keras_xla.auto.trial import Trial
from keras_xla.core.report import Decision


class JaxRunner(TrialRunner):
    """`auto.runner.TrialRunner` whose `switch` only notes the candidate:
    on JAX the owner swaps the train functions (`active.jit`: the
    model's jitted one, else Keras's no-jit one).

    Args:
        trial: The windows to run.
        keep: A baseline's candidate that trains after the windows (XLA
            on); None for a trial, which decides. Defaults to `None`.
    """

    def __init__(self, trial: Trial, keep: Candidate | None = None) -> None:
        super().__init__(trial, original=None, xla_possible=True, keep=keep)
        self.active = trial.candidates[0]

    def switch(self, model: Any, candidate: Candidate) -> None:
        self.active = candidate


class JaxTrialRunner(JaxRunner):
    """The XLA on/off trial on JAX; its result is a `Decided` whose
    `kept` is None (the candidate trains on: `active`)."""

    def settle(
        self,
        model: Any,
        winner: Candidate | None,
        decision: Decision,
        skipped: tuple[str, str] | None = None,
    ) -> Decided:
        if winner is None:
            # As Keras resolves "auto" on JAX: the jitted step.
            self.active = self.trial.default
            decision.reason = (
                f"The XLA/precision trial was skipped: {skipped[0]}."
            )
            return Decided(decision, skipped=(decision.reason, skipped[1]))
        self.active = winner
        return Decided(decision)


def candidates(policy_name: str) -> tuple[list[Candidate], Candidate]:
    """The trial's candidates on JAX (XLA on first: the model's jitted
    step, then Keras's no-jit one) and Keras's default (XLA on)."""
    default = Candidate(True, policy_name)
    return [default, Candidate(False, policy_name)], default


def plan(
    policy_name: str,
    epoch_steps: int | None,
    epochs: int | None,
    spe: int,
    budget: float | int,
    t: policy.Tunables | None = None,
    memory_dir: str | None = None,
    model: Any = None,
) -> JaxTrialRunner | Decided:
    """The trial's runner for a fit whose first epoch has `epoch_steps`
    steps, or the `Decided` (skipped, XLA on) when there is no room.

    Args:
        policy_name: The model's dtype policy (kept).
        epoch_steps: Keras's steps per epoch, if known.
        epochs: The fit's epochs, if known.
        spe: `steps_per_execution`.
        budget: `XLATuner(trial_budget=...)`.
        t: The policy's numbers. Defaults to `policy.TUNABLES`.
        memory_dir: Where decisions are remembered across runs
            (`auto.memory`, keyed by `model`): an earlier run's for the
            same model, inputs, hardware and versions ends the trial at
            its first call. Defaults to `None` (not remembered).
        model: The model being fit (for the memory's key).
    """
    t = t or policy.TUNABLES
    found, default = candidates(policy_name)
    plan = policy.trial_plan(budget, epoch_steps, epochs, len(found), spe, t)
    if not isinstance(plan, policy.TrialPlan):
        rows = [trial_lib.candidate_row(c) for c in found]
        decision = Decision(Status.SKIPPED, None, "", rows)
        decision.reason = f"The XLA/precision trial was skipped: {plan[0]}."
        return Decided(decision, skipped=(decision.reason, plan[1]))
    memory = None
    if memory_dir:
        names = [c.name for c in found]
        memory = DecisionMemory(memory_dir, model, names, spe)
        # The likely winner first: a recalled run then never switches.
        likely = memory.likely()
        found.sort(key=lambda c: c.name != likely)
    trial = Trial(found, default, plan.calls, spe, plan.rounds, tunables=t)
    trial.run_steps = plan.run_steps
    runner = JaxTrialRunner(trial)
    runner.memory = memory
    runner.spans = plan.spans
    return runner
