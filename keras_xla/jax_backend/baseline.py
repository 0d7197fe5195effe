"""The no-XLA baseline on JAX: the same step without `jax.jit`.

The schedule, the timing rule, the speedup's range and the extra rounds
while that range is not useful are the TensorFlow side's: an
`auto.trial.Trial` of two candidates (the model's policy with XLA, and
without) sized by `auto.policy`'s tunables, run by
`auto.runner.TrialRunner` (as `jax_backend.trial.JaxRunner`). What
differs is the switch: on JAX a candidate is a train function, not a
model setting. The no-XLA function is Keras's own (`jit_compile=False`,
`make_train_function(force=True)`), built once; the model's jitted
function is kept aside and put back, so XLA compiles nothing again.
The owner (`JaxFitRun`) puts the runner's `active` candidate's function
on the model.
"""

from __future__ import annotations

from typing import Any

from keras_xla.auto import policy
from keras_xla.auto.policy import Candidate
from keras_xla.auto.trial import Trial, baseline_trial
from keras_xla.core.report import BaselineSection
from keras_xla.jax_backend.trial import JaxRunner
from keras_xla.tf_backend import jit as jit_lib  # (no TensorFlow)

ENDED_REASON = "the fit ended during the no-XLA baseline window"


def build_no_jit(model: Any) -> Any:
    """Keras's train function without XLA for `model`, leaving the
    model's own (jitted) train function and setting in place."""
    own, setting = model.train_function, model.jit_compile
    try:
        jit_lib.set_xla(model, False)
        model.make_train_function(force=True)
        return model.train_function
    finally:
        jit_lib.set_xla(model, setting)
        model.train_function = own


class BaselineRunner(JaxRunner):
    """The baseline's windows on JAX (`jax_backend.trial.JaxRunner`):
    XLA first, then no XLA; XLA trains after them.

    Args:
        trial: The baseline's windows (XLA first, then no XLA).
        keep: The candidate that trains after the windows (XLA on).
    """

    def __init__(self, trial: Trial, keep: Candidate) -> None:
        super().__init__(trial, keep=keep)


def plan(
    enabled: bool,
    jit_on: bool,
    epoch_steps: int | None,
    spe: int,
    policy_name: str,
    epochs: int | None,
    budget: float | int,
    t: policy.Tunables | None = None,
) -> BaselineRunner | BaselineSection:
    """The baseline's runner for a fit whose first epoch has
    `epoch_steps` steps, or the section saying why there is none.

    The schedule is `auto.runner.plan_baseline`'s
    (`policy.baseline_plan`).
    """
    t = t or policy.TUNABLES
    if not enabled:
        why = "the baseline window is off (XLATuner(baseline=False))"
        return BaselineSection(reason=why)
    if not jit_on:
        return BaselineSection(reason="XLA is off in this fit")
    if not epoch_steps:
        why = "the first epoch's length is unknown (pass steps_per_epoch)"
        return BaselineSection(reason=why)
    schedule = policy.baseline_plan(epoch_steps, epochs, spe, budget, t)
    if isinstance(schedule, str):
        return BaselineSection(reason=schedule)
    trial, keep = baseline_trial(policy_name, schedule, spe, t)
    runner = BaselineRunner(trial, keep)
    runner.apply(schedule)
    return runner
