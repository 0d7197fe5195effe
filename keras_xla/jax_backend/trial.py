"""`jit_compile="auto"` and `mixed_precision="auto"` on JAX: the live
trial.

The candidates, the schedule, the timing rule, the decision and the
speedup's range are the TensorFlow side's: `auto.model_state`'s
candidates (on JAX's devices), an `auto.trial.Trial` sized by
`auto.policy`, run by `auto.runner.TrialRunner` and decided by
`Trial.decide()`. What differs is what a candidate is: on JAX a train
function as well as a model setting. `JaxRunner.switch` puts the model
in the candidate's precision (its layers' policies: a jitted step reads
them when it traces); the owner, `jax_backend.fit_run.FitRun`, puts
the candidate's train function on the model (Keras's jitted one, or
its no-jit one, built for that precision). What the trial leaves
behind is `JaxTrialRunner.settle`'s: the winner, or the fit's own
configuration when it could not decide.
"""

from __future__ import annotations

from typing import Any

from keras_xla.auto import policy
from keras_xla.auto import runner as runner_lib
from keras_xla.auto import trial as trial_lib
from keras_xla.auto.memory import DecisionMemory
from keras_xla.auto.model_state import ModelState, plan_candidates
from keras_xla.auto.policy import Candidate, Status
from keras_xla.auto.runner import Decided, TrialRunner
from keras_xla.auto.trial import Trial
from keras_xla.core.report import Decision


class JaxRunner(TrialRunner):
    """`auto.runner.TrialRunner` on JAX: `switch` puts the model in the
    candidate's configuration, and the owner swaps the train functions
    (`active`'s).

    Args:
        trial: The windows to run.
        original: The model's state before the tuner changed it.
        keep: A baseline's candidate that trains after the windows (XLA
            on); None for a trial, which decides. Defaults to `None`.
    """

    def __init__(
        self,
        trial: Trial,
        original: ModelState,
        keep: Candidate | None = None,
    ) -> None:
        super().__init__(trial, original, xla_possible=True, keep=keep)

    def switch(self, model: Any, candidate: Candidate) -> None:
        if self.active is not None and candidate.policy != self.active.policy:
            # The fit loop holds the variables between steps: write them
            # back first, so a changed optimizer (loss scaling) is read
            # afresh at the next step (Keras re-reads a synced state).
            model.jax_state_sync()
        super().switch(model, candidate)


class JaxTrialRunner(JaxRunner):
    """The trial on JAX; without a decision the fit's own configuration
    (`fallback`) trains on.

    Args:
        trial: The windows to run.
        original: The model's state before the tuner changed it.
        fallback: The configuration the fit set up (its XLA setting and
            policy), kept when the trial cannot decide.
    """

    def __init__(
        self, trial: Trial, original: ModelState, fallback: Candidate
    ) -> None:
        super().__init__(trial, original)
        self.fallback = fallback

    def settle(
        self,
        model: Any,
        winner: Candidate | None,
        decision: Decision,
        skipped: tuple[str, str] | None = None,
    ) -> Decided:
        if winner is None:
            self.switch(model, self.fallback)
            return runner_lib.skipped(decision, *skipped)
        self.switch(model, winner)
        return Decided(decision)  # the JAX owner keeps no state across fits


def candidates(
    jit: Any, precision: Any, xla_on: bool, model: Any, devices: Any
) -> tuple[list[Candidate], Candidate]:
    """The trial's candidates on JAX, XLA's first (Keras's jitted step is
    the one the fit starts with), and Keras's default (XLA on, as Keras
    resolves "auto" on JAX, in float32). `devices` are JAX's, as the
    precision recommendation reads them."""
    found, _ = plan_candidates(jit, precision, xla_on, model, devices=devices)
    found.sort(key=lambda c: not c.jit)  # stable: the policies' order
    return found, Candidate(xla_on, "float32")


def plan(
    found: list[Candidate],
    default: Candidate,
    fallback: Candidate,
    original: ModelState,
    epoch_steps: int | None,
    epochs: int | None,
    spe: int,
    budget: float | int,
    t: policy.Tunables | None = None,
    memory_dir: str | None = None,
    model: Any = None,
) -> JaxTrialRunner | Decided:
    """The trial's runner for a fit whose first epoch has `epoch_steps`
    steps, or the `Decided` at once: a single candidate, or no room (the
    `fallback` trains).

    Args:
        found: The candidates (`candidates`).
        default: Keras's default configuration (the decision's reference).
        fallback: The fit's own configuration, kept without a decision.
        original: The model's state before the tuner changed it.
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
    rows = [trial_lib.candidate_row(c) for c in found]
    if len(found) == 1:
        decision = Decision(
            Status.SINGLE, found[0].name, "nothing else to try", rows
        )
        return Decided(decision)
    plan = policy.trial_plan(budget, epoch_steps, epochs, len(found), spe, t)
    if not isinstance(plan, policy.TrialPlan):
        decision = Decision(Status.SKIPPED, None, "", rows)
        return runner_lib.skipped(decision, *plan)
    memory = None
    if memory_dir:
        names = [c.name for c in found]
        memory = DecisionMemory(memory_dir, model, names, spe)
        # The likely winner first: a recalled run then never switches.
        likely = memory.likely()
        found.sort(key=lambda c: c.name != likely)
    trial = Trial(found, default, plan.calls, spe, plan.rounds, tunables=t)
    trial.run_steps = plan.run_steps
    runner = JaxTrialRunner(trial, original, fallback)
    runner.memory = memory
    runner.spans = plan.spans
    return runner
