"""The no-XLA baseline window: real training steps without XLA early in
the first epoch, in windows interleaved with XLA's, by the trial's own
mechanism (`trial_runner.TrialRunner`); the model keeps XLA after it.
The verdict's speedup comes from these windows.
"""

from __future__ import annotations

import logging
from typing import Any

from keras_xla.core import trial_budget
from keras_xla.core.report import BaselineSection
from keras_xla.core.trial import Candidate, Trial
from keras_xla.core.trial_budget import MIN_WINDOW_CALLS
from keras_xla.trial_runner import (
    RETRACE_FILTER,
    ModelState,
    Request,
    Settlement,
    TrialRunner,
)

# The no-XLA baseline: windows per configuration (fewer on a short epoch),
# and its steps (both sides): `BASELINE_SHARE` of the first epoch, at
# least `BASELINE_STEPS` (three rounds of eight calls each) and at most
# `BASELINE_MAX_STEPS`; on a short epoch at most `BASELINE_SHORT_SHARE`
# of it, and never under `BASELINE_MIN_STEPS` (two rounds of three).
BASELINE_ROUNDS = (3, 2)
BASELINE_SHARE = 0.05
BASELINE_STEPS = 48
BASELINE_MAX_STEPS = 120
BASELINE_SHORT_SHARE = 0.3
BASELINE_MIN_STEPS = 12


# Why a fit on data of unknown length has no baseline yet: it runs in
# the second epoch, whose length the first told.
DEFERRED_REASON = (
    "the first epoch's length is unknown; the baseline runs in the second"
)


def baseline_steps(epoch_steps: int) -> int:
    """The baseline's steps, XLA's and no XLA's, for a first epoch of
    `epoch_steps` (see `BASELINE_SHARE`)."""
    budget = int(BASELINE_SHARE * epoch_steps)
    budget = min(max(budget, BASELINE_STEPS), BASELINE_MAX_STEPS)
    short = max(int(BASELINE_SHORT_SHARE * epoch_steps), BASELINE_MIN_STEPS)
    return min(budget, short, epoch_steps)


def plan_baseline(
    model: Any, request: Request, original: ModelState
) -> TrialRunner | Settlement:
    """A no-XLA baseline for a fit with XLA on: windows without XLA
    interleaved with XLA's (`BASELINE_ROUNDS`: three each, or two where
    the budget allows no more), `baseline_steps` of the first epoch; the
    model keeps XLA after it."""
    spe, steps = request.steps_per_call, request.epoch_steps
    if not request.baseline:
        off = "the baseline window is off (XLATuner(baseline=False))"
        return Settlement(None, baseline=BaselineSection(reason=off))
    if not steps and (request.epochs or 1) > 1:
        # The second epoch's length is the first's: the owner starts the
        # baseline there (`plan_baseline` again, with that length).
        return Settlement(
            None, baseline=BaselineSection(reason=DEFERRED_REASON)
        )
    if not steps:
        # Measured: Keras's end-of-data call of a non-XLA train function
        # advances optimizer.iterations (12 for 10 batches over two
        # epochs; 10 with XLA), so no-XLA windows must not meet it.
        return Settlement(
            None,
            baseline=BaselineSection(
                reason="the first epoch's length is unknown, and a no-XLA "
                "call at the end of the data would advance the optimizer's "
                "step count in Keras (pass steps_per_epoch to fit)"
            ),
        )
    budget = baseline_steps(steps)
    # A first epoch too short for the fewest windows: they span epochs
    # (as the trial does) where the run holds them.
    run = steps * (request.epochs or 1)
    spans = budget < BASELINE_MIN_STEPS <= run
    if spans:
        budget = BASELINE_MIN_STEPS
    for rounds in BASELINE_ROUNDS:
        calls = budget // spe // (2 * rounds)
        if calls >= MIN_WINDOW_CALLS:
            break
    if not request.probed or calls < MIN_WINDOW_CALLS:
        need = 2 * rounds * MIN_WINDOW_CALLS * spe
        why = (
            "the model's steps carry no probe (a plain model under a "
            "multi-replica strategy)"
            if not request.probed
            else f"the first epoch has {steps} steps; the baseline needs {need}"
        )
        return Settlement(None, baseline=BaselineSection(reason=why))
    policy = model.dtype_policy.name
    keep = Candidate(True, policy)
    # No dropping: the baseline measures both sides, however clear.
    trial = Trial(
        [keep, Candidate(False, policy)],
        keep,
        calls,
        spe,
        rounds=rounds,
        drop=False,
    )
    runner = TrialRunner(trial, original, True, keep=keep)
    runner.spans = spans
    # More rounds while the speedup's range is not useful: within the
    # tuner's trial_budget, and within the first epoch.
    limit = trial_budget.budget_steps(request.budget, steps) or 0
    if not spans:
        limit = min(limit, steps - spe)
    runner.extend_to = max(limit, 0) // spe
    runner.switch(model, keep)
    logging.getLogger("tensorflow").addFilter(RETRACE_FILTER)
    return runner
