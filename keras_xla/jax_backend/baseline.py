"""The no-XLA baseline on JAX: the same step without `jax.jit`.

Early in the first epoch, windows of train calls without XLA interleave
with XLA's (real training steps: the same state flows through both, so
the same weights and optimizer state). The no-XLA function is Keras's own
(`jit_compile=False`, `make_train_function(force=True)`), built once; the
model's jitted function is kept aside and put back, so XLA compiles
nothing again. Each window's first call is left out of the timing (the
no-XLA step's first call compiles each primitive op by op), as is any
call that compiled.
"""

from __future__ import annotations

import statistics
from typing import Any

from keras_xla.core.report import BaselineSection
from keras_xla.core.timing import ms

# Steps of the baseline, both sides: `SHARE` of the first epoch, at least
# `STEPS`, at most `MAX_STEPS`; on a short epoch at most `SHORT_SHARE` of
# it. Windows of at least `MIN_WINDOW_CALLS` (the first is not timed).
SHARE, STEPS, MAX_STEPS, SHORT_SHARE = 0.05, 48, 120, 0.3
ROUNDS = (3, 2)
MIN_WINDOW_CALLS = 3
NO_XLA, XLA = "no_xla", "xla"


def build_no_jit(model: Any) -> Any:
    """Keras's train function without XLA for `model`, leaving the
    model's own (jitted) train function and setting in place."""
    own, setting = model.train_function, model.jit_compile
    try:
        model.jit_compile = False
        model.make_train_function(force=True)
        return model.train_function
    finally:
        model.jit_compile = setting
        model.train_function = own


def plan(
    enabled: bool, jit_on: bool, epoch_steps: int | None, spe: int
) -> tuple[BaselineWindows | None, BaselineSection | None]:
    """The windows for a first epoch of `epoch_steps`, or the section
    saying why there are none."""
    if not enabled:
        why = "the baseline window is off (XLATuner(baseline=False))"
        return None, BaselineSection(reason=why)
    if not jit_on:
        return None, BaselineSection(reason="XLA is off in this fit")
    if not epoch_steps:
        why = "the first epoch's length is unknown (pass steps_per_epoch)"
        return None, BaselineSection(reason=why)
    budget = min(max(int(SHARE * epoch_steps), STEPS), MAX_STEPS)
    budget = min(budget, max(int(SHORT_SHARE * epoch_steps), 12))
    calls_left = epoch_steps // spe - 2  # the compiling call, the last
    for rounds in ROUNDS:
        calls = min(budget // spe, calls_left) // (2 * rounds)
        if calls >= MIN_WINDOW_CALLS:
            return BaselineWindows(rounds, calls), None
    need = 2 * ROUNDS[-1] * MIN_WINDOW_CALLS * spe + 2 * spe
    why = f"the first epoch has {epoch_steps} steps; the baseline needs {need}"
    return None, BaselineSection(reason=why)


class BaselineWindows:
    """Which train call runs which side, and the section from the calls'
    records.

    Args:
        rounds: Rounds of one no-XLA and one XLA window.
        calls: Calls per window.
    """

    def __init__(self, rounds: int, calls: int) -> None:
        self.rounds, self.calls = rounds, calls
        # Call 0 compiles the XLA step: the windows start after it.
        self.schedule: dict[int, tuple[int, str]] = {}
        call = 1
        for r in range(rounds):
            for side in (NO_XLA, XLA):
                for _ in range(calls):
                    self.schedule[call] = (r, side)
                    call += 1
        self.last_call = call - 1

    def side(self, call: int) -> str:
        """The side call number `call` (0-based in the epoch) runs."""
        return self.schedule.get(call, (0, XLA))[1]

    def done(self, call: int) -> bool:
        return call > self.last_call

    def section(self, records: list, spe: int) -> BaselineSection:
        """The baseline from the epoch's train records (in call order)."""
        windows: dict[tuple[int, str], list[float]] = {}
        first_no_xla = None
        no_xla_seconds, no_xla_steps, run_steps = 0.0, 0, 0
        for record in records:
            call = record.first_step // spe
            if call not in self.schedule:
                continue
            r, side = self.schedule[call]
            run_steps += record.steps
            if side == NO_XLA:
                no_xla_seconds += record.seconds
                no_xla_steps += record.steps
                if first_no_xla is None:
                    first_no_xla = record
            key = (r, side)
            if key not in windows:
                windows[key] = []  # the window's first call: not timed
                continue
            if not record.compiled:
                windows[key].append(record.seconds_per_step)
        slow = [t for (r, s), t in sorted(windows.items()) if s == NO_XLA]
        fast = [t for (r, s), t in sorted(windows.items()) if s == XLA]
        pooled_slow = [t for w in slow for t in w]
        pooled_fast = [t for w in fast for t in w]
        if len(pooled_slow) < 2 or len(pooled_fast) < 2:
            return BaselineSection(
                reason="the baseline windows timed fewer than two steps"
            )
        no_xla = statistics.median(pooled_slow)
        xla = statistics.median(pooled_fast)
        ratios = [
            statistics.median(a) / statistics.median(b)
            for a, b in zip(slow, fast)
            if a and b
        ]
        trace = None
        if first_no_xla is not None:
            trace = round(
                max(first_no_xla.seconds - no_xla * first_no_xla.steps, 0.0),
                4,
            )
        return BaselineSection(
            steps=len(pooled_slow),
            no_xla_step_ms=ms(no_xla),
            xla_step_ms=ms(xla),
            cost_seconds=round(no_xla_seconds - no_xla_steps * xla, 4),
            reason="",
            run_steps=run_steps,
            window_seconds=round(no_xla_seconds, 4),
            trace_seconds=trace,
            speedup_low=round(min(ratios), 3) if ratios else None,
            speedup_high=round(max(ratios), 3) if ratios else None,
            rounds=self.rounds,
            span=[[0, min(self.schedule) * spe], [0, self.last_call * spe]],
        )
