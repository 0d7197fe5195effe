"""What the "XLA" tab shows, as JSON-ready values: the run list, one
run's view (its report, step-time series and compilation markers), two
runs compared, and the page for a log dir without tuner data.

Pure logic over the report's JSON: nothing here imports TensorFlow,
TensorBoard or Keras. Two runs are compared by `keras_xla.core.compare`,
the same rows `keras-xla report A B` prints.
"""

from __future__ import annotations

import json
import math
from typing import Any

from keras_xla.core import compare, figures, reading, spikes
from keras_xla.core import findings as codes
from keras_xla.core.guard import ACTING
from keras_xla.core.report import XLAReport
from keras_xla.core.signatures import FINDING_CODES
from keras_xla.core.summaries import COMPARISON_RUN

# What the tab shows of a marker's recompilation, the HLO and compile
# cache sections, the trial's candidates and decision, a run's verdict,
# the guard, and a comparison's rows.
RECOMPILATION_KEYS = "input dim before after".split()
HLO_KEYS = (
    "kernels_per_step fusions fusion_ratio flops_per_step achieved_tflops"
    " utilization unfused_converts source".split()
)
CACHE_KEYS = "active hits misses seconds_saved".split()
CANDIDATE_KEYS = "name median_step_ms compile_seconds".split()
VERDICT_KEYS = "xla_enabled paid_back speedup".split()
DECISION_KEYS = (
    "status winner speedup_vs_default speedup_low speedup_high".split()
)
GUARD_KEYS = (
    "recompilations compile_seconds input projected_compilations"
    " projected_seconds action kept_shapes xla_steps xla_seconds plain_steps"
    " plain_seconds edges".split()
)
COMPARISON_KEYS = (
    "configuration ok why steps compilations compile_seconds step_ms seconds"
    " headline default backend_seen xla exit_codes".split()
)
# What the page shows when no run holds the tuner's report.
ADD_THE_TUNER = {
    "title": "No XLATuner data in this log dir",
    "text": "The XLA tab reads the report XLATuner writes at each epoch "
    "end. Add the tuner to fit with this log dir, then reload:",
    "code": "import keras_xla\n\n"
    "tuner = keras_xla.XLATuner(log_dir=LOG_DIR)\n"
    "model.fit(ds, epochs=EPOCHS, callbacks=[tuner])",
    "then": "tensorboard --logdir LOG_DIR",
}
# Where a worker of a job keeps its run (`core.workers.worker_dir`).
WORKERS_MARKER = "workers/"


def parse_report(text: str) -> XLAReport | None:
    """The report from its JSON text, read as far as it can be
    (`XLAReport.from_dict`), or None when it is not a report."""
    try:
        return XLAReport.from_dict(reading.parse(text))
    except (ValueError, TypeError):
        return None


def json_safe(value: Any) -> Any:
    """`value` with NaN and infinities as None, so a browser parses it."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value


def run_entry(run: str, report: XLAReport) -> dict:
    """One row of the run list: the run's name and verdict in brief."""
    verdict = report.verdict
    return json_safe(
        {
            "run": run,
            **{k: getattr(verdict, k, None) for k in VERDICT_KEYS},
            "headline": verdict.headline if verdict else "",
            "epochs": len(report.epochs),
            "compilations": report.total_compilations,
            "recompilations": len(report.recompilations),
        }
    )


def epoch_offsets(report: XLAReport) -> dict[int, tuple[int, int]]:
    """`{epoch: (global step of its first train call, its steps)}`, the
    steps `xla/step_time_ms` is written at."""
    offsets, done = {}, 0
    for e in report.epochs:
        offsets[e.epoch] = (done, e.steps)
        done += e.steps
    return offsets


def markers(report: XLAReport) -> list[dict]:
    """One marker per compilation of the compile log, at the global train
    step it happened: a train compilation at its step, a validation (or
    predict) one at its epoch's end (`validation`). Each is labelled with
    its cause (`first compile`, the recompilation's finding code, or a
    `bucket edge` the guard's buckets compiled) and carries the
    recompilation's input, dimension, shapes and seconds."""
    offsets = epoch_offsets(report)
    explained = {
        (r.function, r.epoch, r.step): r for r in report.recompilations
    }
    g = report.guard
    padded_from = g.off_from if g and g.action == "bucket" else None
    out = []
    for c in report.compile_log:
        start, steps = offsets.get(c.epoch, (0, 0))
        train = c.function == "train"
        rec = explained.get((c.function, c.epoch, c.step))
        label = "first compile"
        if rec is not None:
            label = FINDING_CODES.get(rec.cause, rec.cause)
        elif padded_from and [c.epoch, c.step] >= padded_from and train:
            label = "bucket edge"  # the guard's plan, not the pipeline
        elif not c.first:
            label = "recompile"
        out.append(
            {
                "function": c.function,
                "validation": not train,
                "epoch": c.epoch,
                "step": c.step,
                "global_step": start + c.step if train else start + steps - 0.5,
                "label": label,
                "seconds": c.compile_seconds,
                "shapes": c.shapes,
                "cache": c.cache,
                **{k: getattr(rec, k, None) for k in RECOMPILATION_KEYS},
                "message": rec.message if rec else "",
            }
        )
    return out


def slow_steps(report: XLAReport) -> list[dict]:
    """The train calls that stood out and no compilation explains (the
    compilations have their markers), at their global train step, with
    their kind (`input`, `warm-up`, `unexplained`), ms and excess
    seconds."""
    offsets = epoch_offsets(report)
    return [
        {
            "global_step": offsets[e.epoch][0] + s["step"],
            **{k: s[k] for k in ("kind", "ms", "seconds")},
        }
        for e in report.epochs
        for s in e.spikes
        if s["kind"] != spikes.COMPILE
    ]


def baseline_band(report: XLAReport) -> dict | None:
    """The global train steps the no-XLA baseline windows ran (XLA and
    no-XLA windows in turn: step times there are of both, and the no-XLA
    function's first call builds its graph without compiling), with
    their medians; None without baseline windows."""
    b = report.baseline
    if b is None or len(b.span) != 2:
        return None
    offsets = epoch_offsets(report)
    (e0, s0), (e1, s1) = b.span
    if e0 not in offsets or e1 not in offsets:
        return None
    return {
        "start": offsets[e0][0] + s0,
        "end": offsets[e1][0] + s1,
        "no_xla_step_ms": b.no_xla_step_ms,
        "xla_step_ms": b.xla_step_ms,
        "first_call_seconds": b.trace_seconds,
    }


def guard_fallback(report: XLAReport) -> dict | None:
    """Where the recompilation guard turned XLA off (the global train
    step the rest of the fit trained without it from: for every shape,
    or per shape for new ones, with the steps each way), with what the
    storm cost and what the fallback avoided; None where it did not."""
    g = report.guard
    if g is None or g.action not in ACTING or len(g.off_from) != 2:
        return None
    offsets = epoch_offsets(report)
    epoch, step = g.off_from
    if epoch not in offsets:
        return None
    return {
        "global_step": offsets[epoch][0] + step,
        "dims": g.dims or ([] if g.dim is None else [g.dim]),
        **{k: getattr(g, k) for k in GUARD_KEYS},
    }


def xla_figures(report: XLAReport) -> dict:
    """XLA's mode, auto-clustering's clusters and share, the HLO figures,
    compile-cache hits and the trial's decision, each None when absent."""
    data = report.to_dict()
    jit = data["jit"] or {}
    clustering = data["clustering"] or {}
    decision = data["decision"]
    return {
        "mode": clustering.get("mode")
        or ("jit_compile" if jit.get("enabled") else "off"),
        "requested": jit.get("requested"),
        "enabled": jit.get("enabled"),
        "reason": jit.get("reason", ""),
        "clusters": clustering.get("clusters") or {},
        "cluster_share": report.clustering.share if report.clustering else None,
        "hlo": _picked(data["hlo"], HLO_KEYS),
        "cache": _picked(data["compile_cache"], CACHE_KEYS),
        "decision": None
        if not decision
        else {
            **_picked(decision, DECISION_KEYS),
            "reason": decision.get("reason", ""),
            "candidates": [
                {k: c.get(k) for k in CANDIDATE_KEYS}
                for c in decision.get("candidates") or []
            ],
        },
    }


def _picked(data: dict | None, keys: list[str]) -> dict | None:
    """`keys` of `data` (None for a missing one), or None without data."""
    return {k: data.get(k) for k in keys} if data else None


def epoch_table(report: XLAReport) -> dict:
    """The epoch table, as the summary's (`core.figures.columns`):
    columns as `[header, digits]` (None: an integer) and one row of
    values per epoch."""
    shown = figures.columns(report.epochs)
    columns = [["epoch", None], ["steps", None]]
    columns += [[f.column, f.digits] for f in shown]
    rows = [
        [e.epoch, e.steps, *(f.value(e) for f in shown)] for e in report.epochs
    ]
    return {"columns": columns, "rows": rows}


def run_view(run: str, report: XLAReport, step_times: list) -> dict:
    """Everything the tab shows for one run; its step-time `series` is
    `[[global step, ms], ...]`."""
    data = report.to_dict()
    return json_safe(
        {
            "run": run,
            "verdict": data["verdict"],
            "epochs": data["epochs"],
            "epoch_table": epoch_table(report),
            "train_steps": sum(e.steps for e in report.epochs),
            "series": [[int(s), float(v)] for s, v in step_times],
            "markers": markers(report),
            "slow_steps": slow_steps(report),
            "baseline": baseline_band(report),
            "guard": guard_fallback(report),
            "recompilations": [
                {**r, "code": FINDING_CODES.get(r["cause"], r["cause"])}
                for r in data["recompilations"]
            ],
            "findings": data["findings"],
            "xla": xla_figures(report),
            "environment": data["environment"],
            "skipped": list(report.skipped),
        }
    )


def comparison_view(runs: list[tuple[str, XLAReport]]) -> dict:
    """Two runs side by side (`keras_xla.core.compare.compare`): each
    row's values, B / A and the better run, the conclusion, and each
    run's XLA mode and verdict headline."""
    labels, reports = zip(*runs)
    result = compare.compare(*reports, labels=labels)
    result["rows"] = [
        {"key": key, "digits": digits, **result["rows"][key]}
        for key, _, _, digits in compare.COMPARED
    ]
    result["xla"] = [
        None if r.jit is None else bool(r.jit.enabled) for r in reports
    ]
    result["headlines"] = [
        r.verdict.headline if r.verdict else "" for r in reports
    ]
    return json_safe(result)


def chief_run(run: str) -> str | None:
    """The run of the chief of the job `run` is a worker's run of
    (`.../workers/<index>/train` -> `.../workers/0/train`), or None."""
    head, marker, tail = run.rpartition(WORKERS_MARKER)
    index, _, rest = tail.partition("/")
    if not marker or not index.isdigit() or not rest:
        return None
    return f"{head}{WORKERS_MARKER}0/{rest}"


def job_view(job: dict, run: str) -> dict:
    """A job's table for the tab (`core.job`'s report): its verdict, a
    row per worker (the one `run` shows, and those that made the others
    wait: a compilation of their own, a slower step), missing workers
    named, and its findings, worst first."""
    _, _, tail = run.rpartition(WORKERS_MARKER)
    this = int(tail.split("/", 1)[0])
    verdict = job.get("verdict") or {}
    waiting = (codes.WORKER_COMPILED_ALONE, codes.STRAGGLER)
    made_wait = {
        f.get("worker")
        for f in job.get("findings") or []
        if f.get("code") in waiting
    }
    rows = [
        {
            "worker": w["index"],
            "host": w.get("host"),
            "compilations": w.get("compilations"),
            "recompilations": len(w.get("recompilations") or []),
            "compile_seconds": w.get("compile_seconds"),
            "step_ms": w.get("step_ms"),
            "steps": w.get("train_steps"),
            "this": w["index"] == this,
            "made_wait": w["index"] in made_wait,
        }
        for w in job.get("workers") or []
    ]
    return {
        "headline": verdict.get("headline", ""),
        "workers": rows,
        "missing": list(job.get("missing") or []),
        "findings": list(job.get("findings") or []),
    }


def comparison_entry(run: str, text: str) -> dict | None:
    """`keras-xla run --compare`'s result, written in run `run`, for the
    tab: its answer and a row per configuration, each naming its runs as
    TensorBoard lists them (beside the comparison's run); None if it
    cannot be read."""
    try:
        comparison = json.loads(text)
        rows = comparison["rows"]
    except (ValueError, KeyError, TypeError):
        return None
    prefix = run[: -len(COMPARISON_RUN)] if run.endswith(COMPARISON_RUN) else ""
    return {
        "run": run,
        "script": comparison.get("script"),
        "answer": comparison.get("answer"),
        "rows": [
            {
                **{k: r.get(k) for k in COMPARISON_KEYS},
                "runs": [prefix + name for name in r.get("runs") or []],
            }
            for r in rows
            if isinstance(r, dict)
        ],
    }
