"""Text and Markdown renderings of an `XLAReport`.

One renderer for every place a report is read: the train-end summary,
`keras-xla report` (two runs compared: `core/compare.py`), and
TensorBoard's text summaries. The same epoch table, with the same
column names, serves the summary and the command line.

Pure logic: nothing here imports TensorFlow or Keras.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from keras_xla.core import figures
from keras_xla.core import guard as guard_lib

if TYPE_CHECKING:  # render reads a report; it never builds one
    from keras_xla.core.report import (
        Decision,
        EpochStats,
        Finding,
        Verdict,
        XLAReport,
    )

RECOMPILATION_HEADER = tuple(
    "function|epoch|step|input|dim|before -> after|cause|seconds".split("|")
)

# What a terminal acts on instead of showing: C0 controls (escape
# sequences, carriage returns, newlines), DEL, C1 controls, line and
# paragraph separators, bidirectional overrides and lone surrogates.
_CONTROLS = re.compile(
    "[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]"
)


def printable(text: str) -> str:
    """`text` with its control characters written as escapes (`\\x1b`,
    `\\r`, `\\n`, `\\u202e`), so it shows as one line and moves no
    cursor."""
    return _CONTROLS.sub(
        lambda m: m.group().encode("unicode_escape").decode("ascii"), text
    )


def printable_report(value: Any) -> Any:
    """A copy of a report (or of any value in it) whose every string
    (values and keys, in every section and row) is `printable`: what a
    report file holds cannot forge lines on a terminal."""
    if isinstance(value, str):
        return printable(value)
    if isinstance(value, dict):
        return {
            printable_report(k): printable_report(v) for k, v in value.items()
        }
    if isinstance(value, (list, tuple)):
        return type(value)(map(printable_report, value))
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        changes = {
            f.name: printable_report(getattr(value, f.name))
            for f in dataclasses.fields(value)
            if f.init
        }
        return dataclasses.replace(value, **changes)
    return value


def json_text(value: Any) -> str:
    """`value` as strict JSON (a report read from a file may hold
    anything), indented: NaN and infinities are written as null, tuples
    as lists; control characters are escaped (ASCII only)."""
    # Read back with NaN and infinities as None, then written strictly.
    plain = json.loads(json.dumps(value), parse_constant=lambda _: None)
    return json.dumps(plain, indent=2, allow_nan=False)


def number(value: float | None, digits: int = 2) -> str:
    """A figure with `digits` decimals; `-` for a missing one."""
    return "-" if value is None else f"{value:.{digits}f}"


def size(count: float | None) -> str:
    """A number of bytes in KiB, MiB or GiB; `-` for a missing one."""
    if count is None:
        return "-"
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if count >= 1 << shift:
            return f"{count / (1 << shift):.1f} {unit}"
    return f"{count:.0f} B"


def format_table(rows: list[tuple[str, ...]]) -> list[str]:
    """Left-aligns the first column and right-aligns the others."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = []
    for r in rows:
        cells = [r[0].ljust(widths[0])]
        cells += [c.rjust(w) for c, w in zip(r[1:], widths[1:])]
        lines.append("  ".join(cells).rstrip())
    return lines


def epoch_row(e: EpochStats, shown: Sequence) -> tuple[str, ...]:
    cells = (figures.cell(f, f.value(e)) for f in shown)
    return (str(e.epoch), str(e.steps), *cells)


def epoch_table(report: XLAReport, totals: bool = False) -> list[str]:
    """One row per epoch of its figures; with `totals`, a last row of run
    totals (the figures that add up over epochs)."""
    epochs = report.epochs
    shown = figures.columns(epochs)
    header = ("epoch", "steps", *(f.column for f in shown))
    rows = [header, *(epoch_row(e, shown) for e in epochs)]
    if totals:
        sums = (
            figures.cell(f, f.over(epochs)) if f.across == "sum" else ""
            for f in shown
        )
        rows.append(("total", str(sum(e.steps for e in epochs)), *sums))
    return format_table(rows)


def spikes_line(report: XLAReport) -> list[str]:
    """The train steps that stood out, by what explains them (the
    seconds of those nothing explains); nothing when none did."""
    counts = Counter(s["kind"] for e in report.epochs for s in e.spikes)
    unexplained = sum(e.unexplained_seconds for e in report.epochs)
    if not counts:
        return []
    kinds = ", ".join(f"{n} {kind}" for kind, n in sorted(counts.items()))
    tail = f" ({unexplained:.2f} s unexplained)" if unexplained else ""
    return [f"Steps that stood out: {kinds}{tail}."]


def guard_line(guard) -> list[str]:
    """The recompilation guard's storm: when, why, what it did and what a
    fallback avoided."""
    if guard is None:
        return []
    g = guard
    where = f"`{g.input}`" if g.input else "the inputs"
    if g.input and guard_lib.dimensions(g):
        where += f" {guard_lib.dimensions(g)}"
    found = (
        f"Recompilation storm at epoch {g.epoch}, step {g.step}: "
        f"{g.recompilations} recompilations for new sizes of {where} "
        f"({g.compile_seconds:.2f} s; XLA had saved {g.saved_seconds:.2f} s)"
    )
    if g.action not in guard_lib.ACTING or not g.off_from:
        return [f"{found}: {'raised' if g.action == 'raise' else 'warned'}."]
    epoch, step = g.off_from
    if g.action == "bucket":
        grown = f" (grown: {g.grown})" if g.grown else ""
        lines = [
            f"{found}: from epoch {epoch}, step {step} padded up to "
            f"{g.edges}{grown}, {g.padding_share:.0%} padding, about "
            f"{g.bucket_saved_seconds:.1f} s saved."
        ]
        if g.edge_bytes:
            # The memory's cap, where it is within reach of the edges.
            near = g.largest_fitting is not None and g.edges
            above = (
                f"; sizes above {g.largest_fitting} would not fit and run "
                "per shape"
                if near and g.largest_fitting < 2 * max(g.edges)
                else ""
            )
            lines.append(
                f"  Memory: the largest edge's program about "
                f"{size(max(g.edge_bytes))} of the device's "
                f"{size(g.memory_limit_bytes)}{above}."
            )
        return lines
    avoided = (
        f"; {g.projected_compilations:.0f} compilations "
        f"({g.projected_seconds:.1f} s) avoided"
        if g.projected_compilations
        else ""
    )
    if g.action == "fallback":
        return [f"{found}: no XLA from epoch {epoch}, step {step}{avoided}."]
    return [
        f"{found}: from epoch {epoch}, step {step} XLA ran the "
        f"{g.kept_shapes} shapes it compiled, new ones ran without "
        f"XLA{avoided}.",
        f"  Per shape: {sides(g)}.",
    ]


def sides(guard) -> str:
    """The per-shape fallback's steps each way and what they cost."""
    sides = []
    for steps, seconds, how in (
        (guard.xla_steps, guard.xla_seconds, "ran XLA"),
        (guard.plain_steps, guard.plain_seconds, "without XLA"),
    ):
        each = f", {seconds / steps * 1000:.1f} ms each" if steps else ""
        sides.append(f"{steps} steps {how} ({seconds:.2f} s{each})")
    return ", ".join(sides)


def jit_line(report: XLAReport) -> list[str]:
    if report.jit is None:
        return []
    clustering = report.clustering
    if clustering is not None and clustering.mode == "auto-clustering":
        return [
            f"XLA auto-clustering on: {report.jit.reason}",
            clusters_line(clustering),
        ]
    return [f"XLA {'on' if report.jit.enabled else 'off'}: {report.jit.reason}"]


def clusters_line(clustering) -> str:
    """Which clusters auto-clustering compiled, per function, and how much
    of the train step they hold."""
    if not clustering.clusters:
        return "Auto-clustering compiled no cluster."
    by_function: dict[str, list[str]] = {}
    for name in sorted(clustering.clusters):
        function, _, cluster = name.partition("/")
        by_function.setdefault(function, []).append(cluster)
    listed = "; ".join(f"{f}: {', '.join(c)}" for f, c in by_function.items())
    text = (
        f"Auto-clustering compiled {len(clustering.clusters)} cluster(s) "
        f"({listed}) in {sum(clustering.clusters.values())} compilation(s)"
    )
    share = clustering.share
    if share is not None:
        text += (
            f"; the train step's clusters hold {clustering.ops_in_clusters} "
            f"of its {clustering.step_ops} TensorFlow ops ({share:.0%}), "
            "the rest runs without XLA"
        )
    return text + "."


def decision_line(decision: Decision | None) -> list[str]:
    if decision is not None and decision.status == "remembered":
        return [f"Trial: {decision.winner}, remembered ({decision.reason})."]
    if decision is None or decision.status != "decided":
        return []
    speedup = decision.speedup_vs_default
    tail = (
        f"{speedup:.2f}x{_speedup_range(decision)} Keras's default "
        f"{decision.default}, paying back "
        f"its compile in {decision.break_even_steps} steps."
        if speedup
        else "Keras's default was not a candidate."
    )
    return [f"Trial: {decision.winner} won ({decision.reason}); " + tail]


def _speedup_range(d: Decision | Verdict) -> str:
    """` (low-high)` of a speedup (the trial's, the verdict's), where it
    has one."""
    if d.speedup_low is None or d.speedup_high is None:
        return ""
    return f" ({d.speedup_low:.2f}-{d.speedup_high:.2f})"


def baseline_line(baseline) -> list[str]:
    """The no-XLA baseline: its steps, its medians and what it cost."""
    b = baseline
    if b is None or b.no_xla_step_ms is None or b.xla_step_ms is None:
        return []
    trace = (
        f", {b.trace_seconds:.2f} s of it the no-XLA step's first call"
        if b.trace_seconds is not None
        else ""
    )
    return [
        f"Baseline: {b.run_steps} steps without XLA ({b.steps} timed), "
        f"{b.no_xla_step_ms:.2f} ms against XLA's {b.xla_step_ms:.2f} ms"
        f"{_windows_where(b)}; they cost {b.cost_seconds:.2f} s beyond "
        f"training them with XLA{trace}. `XLATuner(baseline=False)` skips it."
    ]


def _windows_where(b) -> str:
    """Where the baseline's medians come from, so that a reader sees why
    XLA's differs from the epoch table's median (all of an epoch's
    steady steps, later ones too)."""
    span = b.get("span") or []
    if len(span) != 2 or not all(len(s) == 2 for s in span):
        return " (medians of its interleaved windows)"
    (e0, s0), (e1, s1) = span
    where = (
        f"epoch {e0} steps {s0}-{s1}"
        if e0 == e1
        else f"epoch {e0} step {s0} to epoch {e1} step {s1}"
    )
    rounds = f"{b.rounds} rounds of " if b.rounds else ""
    if rounds and b.settling_rounds:
        rounds = f"the last {b.rounds - b.settling_rounds} of {rounds}"
    return (
        f" (medians of {rounds}interleaved windows, {where}; the epoch "
        "table's median is over all of an epoch's steady steps)"
    )


def verdict_lines(verdict: Verdict | None) -> list[str]:
    """The verdict's headline, then the most valuable next step."""
    if verdict is None:
        return []
    lines = [f"Verdict: {verdict.headline}"]
    if verdict.next_steps:
        step = verdict.next_steps[0]
        seconds = step["seconds"]
        cost = f" ({seconds:.2f} s in this run)" if seconds is not None else ""
        lines.append(f"Next: [{step['code']}]{cost} {step['fix']}")
    return lines


def verdict_markdown(verdict: Verdict, baseline=None) -> str:
    """The verdict as Markdown: the headline, the measured figures (and
    the baseline's cost), and the next steps ranked by seconds."""
    v = verdict
    lines = [f"**{_md(v.headline)}**", ""]
    speedup = number(v.speedup)
    if v.speedup is not None:
        speedup += _speedup_range(v)
    lines += [
        "| no-XLA step ms (baseline windows) | XLA step ms (baseline "
        "windows) | speedup (range) | compile s | "
        "break-even steps | train steps | paid back |",
        "| --- | --- | --- | --- | --- | --- | --- |",
        f"| {number(v.baseline_step_ms)} | {number(v.xla_step_ms)} | "
        f"{speedup} | {number(v.compile_seconds)} | "
        f"{v.break_even_steps if v.break_even_steps is not None else '-'} | "
        f"{v.train_steps} | "
        f"{'-' if v.paid_back is None else ('yes' if v.paid_back else 'no')} |",
    ]
    cost = baseline_line(baseline)
    lines += ["", *map(_md, cost)] if cost else []
    if v.next_steps:
        lines += ["", "| next step | seconds | fix |", "| --- | --- | --- |"]
        for step in v.next_steps:
            lines.append(
                f"| `{step['code']}` | {number(step['seconds'])} | "
                f"{_md(step['fix'])} |"
            )
    return "\n".join(lines)


def summary(report: XLAReport, max_findings: int = 3) -> str:
    """The train-end summary: the verdict first, then XLA on or off, the
    epoch table, the trial, the top findings (warnings first, then by
    compile seconds lost)."""
    lines = verdict_lines(report.verdict)
    lines += jit_line(report)
    lines += epoch_table(report)
    lines += spikes_line(report)
    lines += guard_line(report.guard)
    lines += baseline_line(report.baseline)
    lines += decision_line(report.decision)
    top = sorted(
        report.findings,
        key=lambda f: (f.severity != "warning", -f.compile_seconds),
    )
    for f in top[:max_findings]:
        lines.append(f"[{f.code}] {f.message} Fix: {f.fix}")
    return "\n".join(lines)


def _md(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def findings_markdown(findings: Sequence[Finding]) -> str:
    """Findings as a Markdown table (TensorBoard's text plugin renders
    Markdown)."""
    if not findings:
        return "No findings."
    out = ["| code | severity | count | compile s | message | fix |"]
    out.append("| --- | --- | --- | --- | --- | --- |")
    for f in findings:
        out.append(
            f"| `{f.code}` | {f.severity} | {f.count} | "
            f"{f.compile_seconds:.2f} | {_md(f.message)} | {_md(f.fix)} |"
        )
    return "\n".join(out)


def decision_markdown(decision: Decision | None) -> str:
    """The trial's decision as Markdown: a sentence and a table of the
    candidates."""
    if not decision:
        return "No trial."
    d = decision
    lines = [f"**{d.status}**: winner `{d.winner}`. {_md(d.reason)}"]
    if d.speedup_vs_default is not None:
        lines.append(
            f"Speedup over Keras's default (`{d.default}`): "
            f"{d.speedup_vs_default:.2f}x{_speedup_range(d)}; the winner's "
            f"compile pays back in {d.break_even_steps} steps. Trial: "
            f"{d.trial_steps} steps, {number(d.trial_seconds, 1)} s."
        )
    if d.trial_cost_seconds is not None:
        saving = (
            f"; the winner saves {d.saving_seconds:.1f} s against the "
            "default over the rest of the run"
            if d.saving_seconds is not None
            else ""
        )
        split = (
            f": {d.first_call_seconds:.1f} s in first calls (traces, XLA "
            "compilations) beyond the one a run on the winner makes, "
            f"{d.slow_window_seconds:.1f} s in slower windows"
            if d.first_call_seconds is not None
            and d.slow_window_seconds is not None
            else " (compilations, slower windows)"
        )
        lines.append(
            f"The trial cost {d.trial_cost_seconds:.1f} s beyond a run on "
            f"the winner alone{split}{saving}."
        )
    lines += [
        "",
        "| candidate | timed steps | median step ms | compile s | dropped |",
        "| --- | --- | --- | --- | --- |",
    ]
    for c in d.candidates:
        dropped = c.dropped_after_steps
        when = "-" if dropped is None else f"after {dropped} steps"
        when += f" ({c.dropped_because})" if c.dropped_because else ""
        lines.append(
            f"| `{c.name}` | {c.measured_steps} | "
            f"{number(c.median_step_ms)} | {number(c.compile_seconds)} | "
            f"{when} |"
        )
    return "\n".join(lines)


def full_report(report: XLAReport, path: str) -> str:
    """One report as `keras-xla report` prints it."""
    lines = [f"Report: {path}", *verdict_lines(report.verdict)]
    if report.jit is not None:
        jit = report.jit
        lines.append(
            f"jit: requested {jit.requested!r}, enabled {jit.enabled!r}. "
            f"{jit.reason}"
        )
    env = report.environment
    if env:
        lines.append(
            ", ".join(f"{k} {v}" for k, v in env.items() if k != "devices")
        )
    lines += ["", *epoch_table(report, totals=True)]
    lines += ["", f"Recompilations ({len(report.recompilations)})"]
    rows = [RECOMPILATION_HEADER]
    for r in report.recompilations:
        where = map(str, (r.function, r.epoch, r.step, r.input))
        dims, causes = recompilation_cells(r)
        change = f"{r.before} -> {r.after}"
        rows.append((*where, dims, change, causes, number(r.compile_seconds)))
    lines += format_table(rows) if report.recompilations else []
    for block in (guard_line(report.guard), baseline_line(report.baseline)):
        lines += ["", *block] if block else []
    if report.decision:
        lines += ["", "Trial decision", decision_markdown(report.decision)]
    lines += hlo_lines(report.hlo) + profile_lines(report.profile)
    lines += ["", f"Findings ({len(report.findings)})"]
    for f in report.findings:
        lines += [
            f"[{f.code}] {f.severity}, count {f.count}, "
            f"{f.compile_seconds:.2f} s compiling",
            f"  {f.message}",
            f"  Fix: {f.fix}",
        ]
    return "\n".join(lines)


def recompilation_cells(r) -> tuple[str, str]:
    """The recompilation's dimensions that changed with its cause (`1, 2`;
    its `dim` where fewer than two did) and its causes (its own, then
    every other of the same step: `partial_batch + dynamic_dim`), as its
    message names them."""
    changes = [c for c in r.changes or () if isinstance(c, dict)]
    dims = [
        c["dim"]
        for c in changes
        if c.get("input") == r.input
        and c.get("cause") == r.cause
        and c.get("dim") is not None
    ]
    causes = [r.cause]
    for cause in (c.get("cause") for c in changes):
        if isinstance(cause, str) and cause not in causes:
            causes.append(cause)
    dims_text = ", ".join(map(str, dims)) if len(dims) > 1 else str(r.dim)
    return dims_text, " + ".join(map(str, causes))


def hlo_lines(hlo) -> list[str]:
    """The HLO section: what XLA made of the train step."""
    if hlo is None:
        return []
    source = hlo.source or "compiled again"
    lines = [
        "",
        f"HLO of the train step (epoch {hlo.epoch}, shapes {hlo.shapes}; "
        f"from the {source}, {hlo.analysis_seconds:.3f} s)",
        f"  kernels per step {hlo.kernels_per_step}, fusions {hlo.fusions},"
        f" fusion ratio {hlo.fusion_ratio:.3f}, converts {hlo.converts} "
        f"({hlo.unfused_converts} unfused), FLOPs per step "
        f"{hlo.flops_per_step:,}",
    ]
    if hlo.achieved_tflops is not None:
        peak = (
            f" of {hlo.peak_tflops:g} peak, utilization "
            f"{100 * hlo.utilization:.1f}%"
            if hlo.utilization is not None and hlo.peak_tflops is not None
            else " (no peak measured: keras-xla doctor measures it)"
        )
        lines.append(f"  achieved {hlo.achieved_tflops:g} TFLOP/s{peak}")
    if hlo.largest_unfused:
        lines.append("  largest unfused: " + "; ".join(hlo.largest_unfused))
    return lines


def profile_lines(profile) -> list[str]:
    """The profile window: its trace, and whether the profiler's count of
    compilations agrees with the tuner's."""
    if profile is None:
        return []
    start, stop = profile.steps
    tuner, seen = profile.tuner_compilations, profile.profiler_compilations
    agree = "agrees" if tuner == seen else "DIFFERS from the tuner's count"
    return [
        "",
        f"Profile of train steps {start}-{stop} ({profile.directory})",
        f"  the profiler saw {seen} XLA compilations, the tuner {tuner}: "
        f"{agree}",
    ]


JOB_HEADER = ("worker", "host", "compiles", "recompiles", "compile s")
JOB_HEADER += ("median ms", "steps")


def job_summary(job: Any) -> list[str]:
    """A job's answer (`core.job.JobReport`): its verdict, a row per
    worker, and what only the job shows, worst first."""
    lines = [job.verdict["headline"], ""]
    rows = [JOB_HEADER]
    for w in job.workers:
        rows.append(
            (
                str(w.index),
                w.host or "-",
                str(w.compilations),
                str(len(w.recompilations)),
                f"{w.compile_seconds:.2f}",
                "-" if w.step_ms is None else f"{w.step_ms:.2f}",
                str(w.train_steps),
            )
        )
    for index in job.missing:
        rows.append((str(index), "(missing)", *("-",) * 5))
    lines += format_table(rows)
    if job.findings:
        lines += ["", f"Job findings ({len(job.findings)}):"]
        for f in job.findings:
            cost = f" ({f['seconds']:.2f} s)" if f.get("seconds") else ""
            lines.append(f"[{f['code']}] worker {f['worker']}{cost}: ")
            lines[-1] += f"{f['message']} Fix: {f['fix']}"
    return lines
