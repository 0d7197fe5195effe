"""The no-XLA baseline on JAX: the same step without `jax.jit`.

The plan, the schedule, the timing rule, the speedup's range and the
extra rounds while that range is not useful are the TensorFlow side's:
`auto.runner.plan_baseline` sizes an `auto.trial.Trial` of two candidates
(the model's policy with XLA, and without) by `auto.policy`'s tunables,
run by `auto.runner.TrialRunner` (as `jax_backend.trial.JaxRunner`). What
differs is the switch: on JAX a candidate is a train function as well as
a model setting. The no-XLA function is Keras's own (`jit_compile=False`,
`make_train_function(force=True)`), built once by the owner
(`jax_backend.fit_run.FitRun`), which puts the runner's `active`
candidate's function on the model; the model's jitted function is
kept aside and put back, so XLA compiles nothing again.
"""

from __future__ import annotations

from typing import Any

from keras_xla.auto import policy
from keras_xla.auto.model_state import ModelState
from keras_xla.auto.policy import Candidate
from keras_xla.auto.runner import Measured, Request, plan_baseline
from keras_xla.auto.trial import Trial
from keras_xla.core.report import BaselineSection
from keras_xla.jax_backend.trial import JaxRunner


class BaselineRunner(JaxRunner):
    """The baseline's windows on JAX (`jax_backend.trial.JaxRunner`):
    XLA first, then no XLA; XLA trains after them.

    Args:
        trial: The baseline's windows (XLA first, then no XLA).
        original: The model's state as the fit set it up.
        keep: The candidate that trains after the windows (XLA on).
    """

    def __init__(
        self, trial: Trial, original: ModelState, keep: Candidate
    ) -> None:
        super().__init__(trial, original, keep=keep)


def plan(
    enabled: bool,
    jit_on: bool,
    epoch_steps: int | None,
    spe: int,
    epochs: int | None,
    budget: float | int,
    model: Any,
    original: ModelState,
    t: policy.Tunables | None = None,
    workers: int = 1,
) -> BaselineRunner | BaselineSection:
    """The baseline's runner for a fit whose first epoch has
    `epoch_steps` steps, or the section saying why there is none:
    `auto.runner.plan_baseline`'s, as on TensorFlow, with JAX's runner.
    Data of unknown length runs the windows in the first epoch: at the
    end of the data Keras's JAX trainer stops at `next(iterator)` before
    any step runs (no state changes, with or without jit). One of a
    job's `workers` switches at the steps the counts alone set."""
    if not jit_on:
        return BaselineSection(reason="XLA is off in this fit")
    request = Request(
        jit=True,
        precision=None,
        budget=budget,
        xla_possible=True,
        epoch_steps=epoch_steps,
        steps_per_call=spe,
        probed=True,
        baseline=enabled,
        epochs=epochs,
        defer_unknown=False,
        tunables=t,
        workers=workers,
    )
    planned = plan_baseline(model, request, original, BaselineRunner)
    if isinstance(planned, Measured):
        return planned.baseline
    return planned
