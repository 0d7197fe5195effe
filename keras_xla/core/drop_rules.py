"""Which trial candidates get no more windows, and why.

Pure functions of the trial's measurements (`keras_xla.core.trial` owns
them and applies what these return at each window boundary):

- a measured candidate whose fastest timed step is clearly slower than
  the best measured median (`DROP_FACTOR`): `SLOWER`;
- an unmeasured one whose median the XLA x precision grid predicts
  clearly slower: `PREDICTED` (it is never compiled);
- an unmeasured XLA candidate whose compile the run's steps left cannot
  pay back, even at zero step time (`PAYBACK`), or are not expected to
  at the speed the grid predicts (`PREDICTED_PAYBACK`).

The first two hold for any run length; the last two for this run's
(`RUN_LENGTH_DROPS`), so a decision made with them holds for runs up to
that length only.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

# A candidate whose fastest timed step is this much slower than the best
# candidate's median is clearly slower: it gets no more windows.
DROP_FACTOR = 1.3
# Why a candidate got no more windows (`CandidateResult.dropped_because`).
SLOWER = "clearly slower"
PREDICTED = "predicted clearly slower"
PAYBACK = "its compile cannot pay back in the steps left"
PREDICTED_PAYBACK = "predicted not to pay back its compile in the steps left"
# Drops that hold for this run's length only: a longer run may try them.
RUN_LENGTH_DROPS = (PAYBACK, PREDICTED_PAYBACK)
# The share of the only measured first call that bounds an XLA one.
SINGLE_TRACE = 0.3


def slower(
    live: list, best: float, medians: dict, seconds: dict, candidates: list
) -> dict[Any, str]:
    """`SLOWER` and `PREDICTED` drops among `live` against the `best`
    measured median, given each measured candidate's median and timed
    steps (`seconds`); none under two measured candidates (slower than
    what?)."""
    measured = [c for c in live if c in medians]
    if len(measured) < 2:
        return {}
    out = {}
    for c in measured:
        if min(seconds[c]) > DROP_FACTOR * best:
            out[c] = SLOWER
    for c in live:
        guess = None if c in medians else predicted(c, candidates, medians)
        if guess is not None and guess > DROP_FACTOR * best:
            out[c] = PREDICTED
    return out


def cannot_pay_back(
    untried: list,
    left: int,
    best: float,
    traces: list,
    compiles: list,
    predict: Any,
) -> dict[Any, str]:
    """The untried XLA candidates whose compile `left` steps cannot pay
    back, each with why.

    Even if their step took no time at all (`PAYBACK`): those steps at the
    `best` measured median take less than the cheapest measured first
    call (`traces`: the measured candidates' first calls beyond a step).
    An XLA candidate's first call compiles the step its no-XLA twin
    traced; measured on this CPU (TF 2.21; a Conv1D model, a residual MLP,
    ResNet-50), it cost 1.1-2.8x the cheapest no-XLA first call, which
    traced the step at the other precision, and 0.43-0.84x the first
    candidate's, which also paid the fit's start and the trace: with one
    first call measured, `SINGLE_TRACE` of it is the bound.

    At the speed the grid predicts (`predict(c)`, None where it cannot):
    what it is expected to save a step against `best`
    (`expected_saving`), over the steps left, is less than the cheapest
    measured XLA first call (`compiles`: the other XLA candidate's, the
    same step at the other precision), so it is `PREDICTED_PAYBACK`.
    """
    if not traces:
        return {}
    bound = min(traces) if len(traces) > 1 else SINGLE_TRACE * traces[0]
    if left * best < bound:
        return {c: PAYBACK for c in untried}
    out = {}
    for c in untried:
        guess = predict(c)
        if guess is None or not compiles:
            continue
        if expected_saving(best, guess) * left < min(compiles):
            out[c] = PREDICTED_PAYBACK
    return out


def expected_saving(best: float, guess: float) -> float:
    """What a candidate predicted at `guess` seconds a step is expected to
    save a step against the `best` measured median, where its real median
    lies anywhere (uniformly) from `DROP_FACTOR` times faster to
    `DROP_FACTOR` times slower than predicted; a step slower than `best`
    saves nothing, since the trial would drop it.

    The band is the margin the trial gives a prediction of "clearly
    slower". On ResNet-50 on a 2-core CPU the grid put XLA at bfloat16
    15% and 25% too fast: inside it. Counting only the band's fast end
    (as this rule once did) compiled a candidate predicted slower than
    the best, which has little chance to save anything; the expected
    saving still compiles one on a run long enough for that chance to
    pay.
    """
    if math.isinf(DROP_FACTOR):  # no band: only `PAYBACK`'s bound holds
        return best
    low, high = guess / DROP_FACTOR, guess * DROP_FACTOR
    if best <= low:
        return 0.0
    if best >= high:
        return best - (low + high) / 2
    return (best - low) ** 2 / (2 * (high - low))


def predicted(c: Any, candidates: list, medians: dict) -> float | None:
    """An unmeasured candidate's median from the other three corners of
    the XLA x precision grid (each factor acting alone: its XLA setting at
    the other policy, times the other setting at its policy, over the
    other setting at the other policy)."""
    policies = {x.policy for x in candidates}
    if c.clustering is not None or len(policies) != 2:
        return None
    (other,) = policies - {c.policy}
    flipped = dataclasses.replace(c, jit=not c.jit)
    corners = (
        dataclasses.replace(c, policy=other),
        flipped,
        dataclasses.replace(flipped, policy=other),
    )
    if not all(k in medians for k in corners):
        return None
    a, b, base = (medians[k] for k in corners)
    return a * b / base
