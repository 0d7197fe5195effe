"""Every train step that stands out, and what explains it.

A call stands out when each of its steps took at least `FACTOR` times
the epoch's median step and the call at least `MIN_SECONDS` more than
its steps at that median. Each is labelled by what the tuner measured of
it, in this order: it compiled (`COMPILE`, with its causes in the
report's recompilations; or the backend recorded another function's
compilation during it: JAX's compile events, TensorFlow's compile
ledger, so no compilation is called a host pause), it waited for its
batch for at least half the excess (`INPUT`, where the wait is timed
apart), it was a first call (of a function, or of an epoch) or a
baseline's no-XLA call (`WARMUP`), or nothing explains it
(`UNEXPLAINED`: a host pause, another process, a callback, the garbage
collector). The seconds that nothing explains are an epoch figure
(`unexplained_seconds`).
"""

from __future__ import annotations

from collections.abc import Sequence

from keras_xla.core.figures import rounded
from keras_xla.core.timing import StepRecord, ms

FACTOR = 2.0
MIN_SECONDS = 0.002
COMPILE, INPUT, WARMUP = "compile", "input", "warm-up"
UNEXPLAINED = "unexplained"


def label(
    records: Sequence[StepRecord], median_seconds: float | None
) -> list[dict]:
    """The calls among `records` that stand out against the median step
    (`median_seconds`): each call's first step, its time per step, its
    excess over the median and what explains it."""
    if not median_seconds:
        return []
    out = []
    for record in records:
        excess = record.seconds - median_seconds * record.steps
        slow = record.seconds_per_step >= FACTOR * median_seconds
        if not slow or excess < MIN_SECONDS:
            continue
        if (
            record.new
            or record.measured_compile_seconds
            or record.other_compilations
        ):
            kind = COMPILE
        elif (record.input_seconds or 0.0) >= excess / 2:  # None: not seen
            kind = INPUT
        elif record.warmup or record.first_step == 0:
            # A function's first call, a baseline's no-XLA call, or an
            # epoch's first call (its iterator starts, its prefetch fills).
            kind = WARMUP
        else:
            kind = UNEXPLAINED
        out.append(
            {
                "step": record.first_step,
                "ms": ms(record.seconds_per_step),
                "seconds": rounded(excess),
                "kind": kind,
            }
        )
    return out


def unexplained_seconds(spikes: Sequence[dict]) -> float:
    """The excess seconds of the spikes nothing explains."""
    return sum((s["seconds"] for s in spikes if s["kind"] == UNEXPLAINED), 0.0)
