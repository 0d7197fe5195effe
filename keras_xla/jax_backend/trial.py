"""`jit_compile="auto"` and `mixed_precision="auto"` on JAX: the live
trial.

The plan, the candidates, the schedule, the timing rule, the decision
and the speedup's range are the TensorFlow side's: the owner asks
`auto.runner.plan` (with JAX's devices, and `JaxTrialRunner` as the
runner), which sizes an `auto.trial.Trial` by `auto.policy`, run by
`auto.runner.TrialRunner` and decided by `Trial.decide()`. What
differs is what a candidate is: on JAX a train function as well as a
model setting. `JaxRunner.switch` puts the model
in the candidate's precision (its layers' policies: a jitted step reads
them when it traces); the owner, `jax_backend.fit_run.FitRun`, puts
the candidate's train function on the model (Keras's jitted one, or
its no-jit one, built for that precision). What the trial leaves
behind is `JaxTrialRunner.settle`'s: the winner, or the fit's own
configuration when it could not decide.
"""

from __future__ import annotations

from typing import Any

from keras_xla.auto import runner as runner_lib
from keras_xla.auto.model_state import ModelState
from keras_xla.auto.policy import Candidate
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
