"""The verdict: did XLA pay off in this run, why not, and what next.

It follows the question's own order: is XLA on (and if not, why)? did
each step get faster, against a no-XLA baseline measured in the same run
(same weights, same precision, interleaved windows)? did the compile time
pay back over the run's steps? what cost the most seconds (recompilations
by cause, a slower step, compile time not paid back)? Every number comes
from the report of this run.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from keras_xla.core import figures
from keras_xla.core import findings as codes
from keras_xla.core.report import BaselineSection, Verdict, XLAReport
from keras_xla.core.signatures import FINDING_CODES

XLA_SLOWER = "xla-slower"
COMPILE_NOT_PAID_BACK = "compile-not-paid-back"


def baseline_medians(report: XLAReport) -> tuple[float | None, float | None]:
    """`(no-XLA, XLA)` steady median step ms measured side by side in this
    run, same precision: the baseline window's, else the trial's."""
    if report.baseline is not None:
        return report.baseline.no_xla_step_ms, report.baseline.xla_step_ms
    decision = report.decision
    if decision is None or not decision.winner:
        return None, None
    mode, policy = decision.winner.split("/", 1)
    rows = {c.name: c.median_step_ms for c in decision.candidates}
    # XLA as the winner used it: auto-clustering's clusters, or the step.
    xla = "autoclustering" if mode == "autoclustering" else "xla"
    return rows.get(f"no_xla/{policy}"), rows.get(f"{xla}/{policy}")


def build(report: XLAReport) -> Verdict:
    """The verdict of a run, from its report."""
    enabled = bool(report.jit and report.jit.enabled) or bool(
        report.clustering and report.clustering.mode == "auto-clustering"
    )
    steps = sum(e.steps for e in report.epochs)
    compile_s = round(report.total_compile_seconds, 3)
    base, xla = baseline_medians(report) if enabled else (None, None)
    speedup, break_even, paid_back = payback(base, xla, compile_s, steps)
    low, high = speedup_range(report) if speedup is not None else (None,) * 2
    if within_noise(low, high):
        # In the noise: not paid back if even the range's top would not pay
        # back; else unknown.
        best = best_case_break_even(base, high, compile_s)
        paid_back = False if best is None or best > steps else None
    # The most the run could save, even with an XLA step of no time.
    bound_ms = (base or no_xla_bound_ms(report)) if enabled else None
    bound = round(bound_ms / 1000.0 * steps, 3) if bound_ms else None
    if bound is not None and compile_s > bound:
        paid_back = False
    # Each step's wait for its batch, where it was measured apart.
    wait_ms = figures.INPUT_WAIT.over(report.epochs)
    compute = None
    if wait_ms is not None and base and xla and min(base, xla) > wait_ms:
        compute = round((base - wait_ms) / (xla - wait_ms), 3)
    verdict = Verdict(
        xla_enabled=enabled,
        speedup=speedup,
        baseline_step_ms=base,
        xla_step_ms=xla,
        compile_seconds=compile_s,
        break_even_steps=break_even,
        paid_back=paid_back,
        headline="",
        next_steps=next_steps(report, base, xla, steps, compile_s, wait_ms),
        train_steps=steps,
        speedup_low=low,
        speedup_high=high,
        saving_bound_seconds=bound,
        input_share=figures.share(wait_ms, xla),
        compute_speedup=compute,
    )
    verdict.headline = headline(report, verdict)
    return verdict


def payback(
    base: float | None, xla: float | None, compile_s: float, steps: int
) -> tuple[float | None, int | None, bool | None]:
    """`(speedup, break-even steps, paid back)` of `xla` ms steps against
    `base` ms, compiling `compile_s` s (None unless both were measured)."""
    if not (base and xla):
        return None, None, None
    break_even = None
    if base > xla:
        break_even = math.ceil(compile_s / ((base - xla) / 1000.0))
    paid_back = break_even is not None and steps >= break_even
    return round(base / xla, 3), break_even, paid_back


def against_run(
    report: XLAReport,
    no_xla_step_ms: float,
    no_xla_steps: int,
    xla_step_ms: float | None,
) -> XLAReport:
    """`report` with a no-XLA run of the same model timed apart (a
    script's own, a comparison's) as its baseline, and its verdict. Where
    every XLA step compiled (`xla_step_ms` None), the no-XLA step still
    bounds what XLA could have saved."""
    measured = dataclasses.replace(
        report,
        baseline=BaselineSection(
            steps=no_xla_steps,
            no_xla_step_ms=no_xla_step_ms,
            xla_step_ms=xla_step_ms or None,
            reason=""
            if xla_step_ms
            else "every step with XLA compiled, so none was timed",
        ),
        decision=None,
    )
    measured.verdict = build(measured)
    return measured


def planned_steps(params: dict | None) -> int | None:
    """Steps per epoch times epochs, when Keras knows both."""
    params = params or {}
    steps, epochs = params.get("steps"), params.get("epochs")
    if isinstance(steps, int) and isinstance(epochs, int):
        return steps * epochs
    return None


COMPILE_FIX = (
    "Train longer, use the persistent compile cache "
    "(XLATuner(compile_cache=DIR)), or train without XLA."
)


def compile_dominates(
    report: XLAReport, planned: int | None
) -> tuple[str, str] | None:
    """`(message, fix)` where compiling costs this run more than XLA
    saves it, read from the verdict (`report.verdict`), so no finding
    says otherwise: where the no-XLA step was measured, compiling does
    not pay back in the run's `planned` steps (its whole length, where
    Keras knows it); where it was not, compiling took more than half the
    planned training time. None where it pays back, or XLA is off."""
    v = report.verdict
    if v is None or not v.xla_enabled or not v.compile_seconds:
        return None
    steps = max(planned or 0, v.train_steps or 0)
    spent = f"Compiling took {v.compile_seconds:.1f} s"
    if v.speedup is not None:
        noisy = within_noise(v.speedup_low, v.speedup_high)
        needed = v.break_even_steps
        if noisy:  # what the range's top would need
            needed = best_case_break_even(
                v.baseline_step_ms, v.speedup_high, v.compile_seconds
            )
        if needed is not None and needed <= steps:
            return None
        why = (
            f"it would pay back after {needed:,} steps"
            + (f" even at {v.speedup_high:.2f}x" if noisy else "")
            if needed is not None
            else "XLA's step is not faster"
        )
        return (
            f"{spent} and {why}; this run has {steps:,}: XLA does not pay "
            "back its compile time here (the verdict).",
            COMPILE_FIX,
        )
    if v.paid_back is False:
        return (
            f"{spent}, more than this run's {v.train_steps:,} steps could "
            "save even if XLA's step took no time (the verdict).",
            COMPILE_FIX,
        )
    median_ms = figures.MEDIAN_STEP.over(report.epochs)
    if not median_ms or not steps:
        return None
    train_seconds = steps * median_ms / 1000.0
    if v.compile_seconds <= 0.5 * train_seconds:
        return None
    needed = (train_seconds + v.compile_seconds) / train_seconds
    return (
        f"{spent} against about {train_seconds:.2f} s of training "
        f"({steps:,} steps): to pay it back, XLA must make each step "
        f"{needed:.1f}x faster than without it; no no-XLA step was "
        "measured to say whether it does.",
        COMPILE_FIX + " Keep the tuner's baseline on to measure it.",
    )


def within_noise(low: float | None, high: float | None) -> bool:
    """Whether a speedup's range holds 1.0 (XLA's effect is noise)."""
    return low is not None and high is not None and low <= 1.0 <= high


def best_case_break_even(
    base_ms: float | None, high: float | None, compile_s: float
) -> int | None:
    """The steps compiling needs to pay back were XLA's speedup the top
    of its range, `high`; None where even that saves nothing."""
    if not base_ms or high is None or high <= 1.0:
        return None
    saved_ms = base_ms - base_ms / high
    return math.ceil(compile_s / (saved_ms / 1000.0))


def no_xla_bound_ms(report: XLAReport) -> float | None:
    """An upper bound on the no-XLA step (ms) where no median was timed:
    the baseline windows' wall time over their steps (each window's
    first call, which pays more than a step, included)."""
    b = report.baseline
    if b is None or not b.run_steps or not b.window_seconds:
        return None
    return b.window_seconds / b.run_steps * 1000.0


def speedup_range(report: XLAReport) -> tuple[float | None, float | None]:
    """The speedup's range from the baseline windows' spread."""
    b = report.baseline
    if b is None or b.speedup_low is None or b.speedup_high is None:
        return None, None
    return b.speedup_low, b.speedup_high


def headline(report: XLAReport, v: Verdict) -> str:
    """One sentence with the numbers (and one more on the bound where
    compiling cost more than the run could save)."""
    text = _headline(report, v)
    share = v.input_share
    # Input first where the epochs were found input-bound (`lints`' rule).
    input_bound = codes.INPUT_BOUND in report.finding_codes()
    if v.xla_enabled and share is not None and input_bound:
        rest = ""
        if v.compute_speedup is not None and v.speedup is not None:
            rest = (
                f": XLA made the rest {v.compute_speedup:.2f}x faster, the "
                f"whole step {v.speedup:.2f}x"
            )
        text = (
            f"The input comes first: {share:.0%} of each step waits for "
            f"its batch{rest}. Fix the input pipeline, then XLA's speedup "
            f"shows. {text}"
        )
    bound = v.saving_bound_seconds
    if v.xla_enabled and bound is not None and v.compile_seconds > bound:
        measured = "at" if v.baseline_step_ms else "at most"
        step_ms = v.baseline_step_ms or no_xla_bound_ms(report)
        text += (
            f" Even if XLA's step took no time, this run's "
            f"{v.train_steps:,} steps {measured} {step_ms:.2f} ms each "
            f"without XLA could save at most {bound:.2f} s, less than "
            f"the {v.compile_seconds:.1f} s of compiling."
        )
    return text


def _speedup_text(v: Verdict) -> str:
    """`0.63x, 0.55-0.74` (the range where there is one)."""
    if v.speedup_low is None or v.speedup_high is None:
        return f"{v.speedup:.2f}x"
    return f"{v.speedup:.2f}x, {v.speedup_low:.2f}-{v.speedup_high:.2f}"


def _headline(report: XLAReport, v: Verdict) -> str:
    if not v.xla_enabled:
        reason = report.jit.reason if report.jit else "not configured"
        return f"XLA is off: {reason.rstrip('.')}."
    if v.speedup is None and v.paid_back is False:
        return (
            f"XLA is on and compiling cost {v.compile_seconds:.1f} s: it "
            "did not pay off."
        )
    if v.speedup is None:
        why = (
            report.baseline.reason
            if report.baseline is not None and report.baseline.reason
            else "no no-XLA baseline was measured in this run"
        )
        return (
            f"XLA is on and compiling cost {v.compile_seconds:.1f} s; "
            f"whether it paid off is unknown: {why}."
        )
    times = f"{v.baseline_step_ms:.2f} -> {v.xla_step_ms:.2f} ms"
    if within_noise(v.speedup_low, v.speedup_high):
        noise = (
            f"XLA's effect is within the noise of this run "
            f"({_speedup_text(v)}, {times} in the baseline windows)"
        )
        best = best_case_break_even(
            v.baseline_step_ms, v.speedup_high, v.compile_seconds
        )
        if v.paid_back is None:
            return (
                f"Whether XLA paid off is unknown: {noise}; at "
                f"{v.speedup_high:.2f}x its "
                f"{v.compile_seconds:.1f} s of compiling would pay back "
                f"after {best:,} of this run's {v.train_steps:,} steps."
            )
        at_best = (
            f"; even at {v.speedup_high:.2f}x it would pay back only after "
            f"{best:,} steps"
            if best is not None
            else ""
        )
        return (
            f"{noise} and compiling cost {v.compile_seconds:.1f} s"
            f"{at_best}: it did not pay off."
        )
    if v.speedup <= 1.0:
        return (
            f"XLA made each step slower ({times}, {_speedup_text(v)}) and "
            f"compiling cost {v.compile_seconds:.1f} s: it did not pay off."
        )
    verb = "paid back" if v.paid_back else "pays back"
    tail = "so it paid off" if v.paid_back else "so it did not pay off yet"
    return (
        f"XLA made each step {_speedup_text(v)} faster ({times}) but "
        f"compiling cost {v.compile_seconds:.1f} s; it {verb} after "
        f"{v.break_even_steps:,} steps and this run had {v.train_steps:,}, "
        f"{tail}."
    )


def next_steps(
    report: XLAReport,
    base: float | None,
    xla: float | None,
    steps: int,
    compile_s: float,
    wait_ms: float | None = None,
) -> list[dict]:
    """`{code, seconds, fix}` ranked by the seconds each cost in this run
    (or would save), the largest first; steps without a measured cost
    come last."""
    fixes = {f.code: f.fix for f in report.findings}
    out: dict[Any, dict] = {}
    for r in report.recompilations:
        # One step per cause and input (its seconds and fix name it).
        code = FINDING_CODES.get(r.cause, r.cause)
        entry = out.setdefault(
            (code, r.input),
            {"code": code, "seconds": 0.0, "fix": r.fix or fixes.get(code)},
        )
        entry["seconds"] = round(entry["seconds"] + r.compile_seconds, 3)
    if base and xla and xla > base:
        out[XLA_SLOWER] = {
            "code": XLA_SLOWER,
            "seconds": round((xla - base) / 1000.0 * steps + compile_s, 3),
            "fix": "Train without XLA (jit_compile=False): the step is "
            f"faster without it here ({base:.2f} vs {xla:.2f} ms).",
        }
    elif base and xla and (saved := (base - xla) / 1000.0 * steps) < compile_s:
        out[COMPILE_NOT_PAID_BACK] = {
            "code": COMPILE_NOT_PAID_BACK,
            "seconds": round(compile_s - saved, 3),
            "fix": "Train longer, or keep compiled steps across runs with "
            "XLATuner(compile_cache=DIR), or train without XLA for runs this "
            "short.",
        }
    if wait_ms and codes.INPUT_BOUND in fixes:
        out[codes.INPUT_BOUND] = {
            "code": codes.INPUT_BOUND,
            "seconds": round(wait_ms / 1000.0 * steps, 3),
            "fix": fixes[codes.INPUT_BOUND],
        }
    for code in (
        codes.UNSUPPORTED_OP,
        codes.DISPATCH_BOUND_STEPS,
        codes.LOW_PRECISION_OUTPUT,
        codes.MISSING_LOSS_SCALE,
        codes.AUTO_CLUSTERING_INACTIVE,
    ):
        if code in fixes and code not in out:
            out[code] = {"code": code, "seconds": None, "fix": fixes[code]}
    return sorted(
        out.values(),
        key=lambda e: (e["seconds"] is None, -(e["seconds"] or 0.0)),
    )
