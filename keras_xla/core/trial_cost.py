"""What a decided trial cost, and what its winner gains over Keras's
default.

Pure functions of the trial's measurements (`keras_xla.core.trial`
owns them and puts what these return in the report's `decision`).
"""

from __future__ import annotations

import math
from typing import Any


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

    The first calls count beyond the one a run on the winner alone makes;
    the slow windows are the rest of `wall` (slower steps, each window's
    switching call).

    That run's first call pays the fit's start and the winner's trace (and
    compile). It is taken as the larger of the trial's first call, which
    paid the fit's start, and the winner's own. Measured on ResNet-50
    (2-core CPU), the winner's first call in the trial cost 5.4-9.5 s and
    the same step's first call as a fit's 14.2-20.3 s: in six runs,
    leaving out only the winner's own overstated the cost by 6-13 s, and
    the larger of the two put it 4 s under to 6 s over.

    A winner whose first call traced nothing, where a candidate of its
    precision traced in its own, called the step that one traced (an XLA
    winner after its no-XLA twin); alone, it would pay that trace too, so
    that run's first call is taken as the trace plus the winner's first
    call (at least the trial's first). On the residual MLP of
    `benchmarks/verdict_truth.py`, where XLA wins, that put the cost
    within 0.6 s of what auto took beyond a tuned run on the winner alone
    at 300 and 600 steps, in medians of 4-8 rounds
    (`benchmarks/auto_short.py` prints both); in the same scratch runs the
    larger of the two first calls overstated it by 0.8-1.5 s, and their
    sum understated it by 0.55-1.35 s.
    """
    excess = {c: t or 0.0 for c, t in first_calls.items()}
    opening = next(iter(excess))
    own = excess.get(winner, 0.0)
    twin_trace = max(
        (
            traced[c]
            for c in excess
            if c != winner and c.policy == winner.policy
        ),
        default=0.0,
    )
    shared = winner in traced and not traced[winner]
    if winner != opening and shared and twin_trace:
        alone = max(excess[opening], twin_trace + own)
    else:
        alone = max(excess[opening], own)
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
    seconds = compile_seconds or 0.0
    if winner == default:
        steps = 0
    elif gain > 0:
        steps = math.ceil(seconds / gain)
    else:
        steps = None
    return round(base / medians[winner], 4), steps
