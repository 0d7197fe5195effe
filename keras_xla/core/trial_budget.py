"""How many steps the XLA/precision trial takes, and how it lays them
out: `trial_budget` in steps, raised on a short first epoch, and windows
per candidate (`keras_xla.core.trial` runs the schedule). Pure Python.
"""

from __future__ import annotations

from typing import Any

ROUNDS = 3  # windows per candidate
MIN_ROUNDS = 2  # on a short budget
SHORT_ROUNDS = 1  # on a run too short for two
MIN_WINDOW_CALLS = 3  # one warm-up call and at least two timed calls
MAX_WINDOW_CALLS = 25
# A short run: two rounds may take up to this share of it. One round,
# the fewest steps that decide at all, may take all of it: every trial
# step is a training step, a clearly slower candidate ends its part
# early, and an XLA candidate whose compile cannot pay back in the steps
# left is dropped before it compiles.
MAX_RUN_SHARE = 0.6


def window_calls(
    budget_steps: int, n: int, steps_per_call: int, rounds: int = ROUNDS
) -> int:
    """Calls per window for a trial of `budget_steps` steps over `n`
    candidates in `rounds` rounds; 0 when the budget is too small."""
    calls = budget_steps // steps_per_call // (rounds * n)
    if calls < MIN_WINDOW_CALLS:
        return 0
    return min(calls, MAX_WINDOW_CALLS)


def schedule(budget_steps: int, n: int, steps_per_call: int) -> tuple[int, int]:
    """`(calls per window, rounds)` for a budget: three rounds where it
    allows, else two, else one; `(0, 0)` when not even one fits."""
    for rounds in (ROUNDS, MIN_ROUNDS, SHORT_ROUNDS):
        calls = window_calls(budget_steps, n, steps_per_call, rounds)
        if calls:
            return calls, rounds
    return 0, 0


def budget_steps(budget: Any, epoch_steps: int | None) -> int | None:
    """Trial steps for `trial_budget` (a fraction of the first epoch, or a
    number of steps); None when the epoch length is unknown."""
    if isinstance(budget, int):
        return budget
    if not epoch_steps:
        return None
    return int(budget * epoch_steps)


def validate_budget(budget: Any) -> None:
    ok = (isinstance(budget, int) and not isinstance(budget, bool)) and (
        budget >= 1
    )
    ok = ok or (isinstance(budget, float) and 0.0 < budget <= 1.0)
    if not ok:
        raise ValueError(
            f"Unsupported value `XLATuner(trial_budget={budget!r})`: pass a "
            "fraction of the first epoch in (0, 1] (e.g. 0.25) or a number "
            "of steps (e.g. 120)."
        )


def minimum_steps(
    n: int, steps_per_call: int, rounds: int = SHORT_ROUNDS
) -> int:
    """The fewest steps a trial of `n` candidates in `rounds` rounds can
    decide on (by default one round: the fewest at all)."""
    return rounds * n * MIN_WINDOW_CALLS * steps_per_call


def run_budget(
    budget: Any,
    epoch_steps: int | None,
    epochs: int | None,
    n: int,
    steps_per_call: int,
) -> int | None:
    """The trial's steps for `n` candidates: `trial_budget`, raised to the
    fewest steps of two rounds when they are at most `MAX_RUN_SHARE` of
    the run, or else of one round when the run holds them (the trial then
    spans epochs if the first is shorter); None when the epoch length is
    unknown."""
    steps = budget_steps(budget, epoch_steps)
    if steps is None or not epoch_steps:
        return steps
    run = epoch_steps * (epochs or 1)
    for rounds, share in ((MIN_ROUNDS, MAX_RUN_SHARE), (SHORT_ROUNDS, 1.0)):
        need = minimum_steps(n, steps_per_call, rounds)
        if steps < need <= share * run:
            return need
    return steps
