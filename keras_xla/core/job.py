"""One job's answer from its workers' reports (`core.workers`): the
job's report, `<log_dir>/xla_job_report.json`, written by the chief at
the end of training, or merged from workers' reports in separate log
dirs (`keras-xla report DIR DIR ...`). What only a job shows (a worker
missing, compiling alone, compiling a different program, straggling) is
`core.job_findings`'.

The job's verdict: a step of the job is as slow as its slowest worker,
and its compiling as long as the longest; the speedup is the slowest
worker's no-XLA step over the slowest worker's XLA step.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Iterable

from keras_xla.core import figures, files, workers
from keras_xla.core.job_findings import job_findings
from keras_xla.core.report import XLAReport
from keras_xla.core.verdict import payback

JOB_FILENAME = "xla_job_report.json"
JOB_SCHEMA = "keras_xla.job/1"
# What a worker's row keeps of each recompilation and compilation.
RECOMPILATION = (
    "function epoch step input dim after cause compile_seconds".split()
)
PROGRAM = "function epoch step shapes fingerprint".split()


@dataclasses.dataclass
class WorkerRow:
    """One worker's line in the job's table."""

    index: int
    host: str | None
    compilations: int
    recompilations: list
    compile_seconds: float
    step_ms: float | None
    train_steps: int
    finished: bool
    xla_step_ms: float | None = None
    baseline_step_ms: float | None = None
    # Each compiled step's `PROGRAM` (fingerprint None: the backend gave none).
    programs: list = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class JobReport:
    """The job's answer: a row per worker, its findings and its verdict."""

    count: int
    workers: list
    missing: list
    findings: list
    verdict: dict
    job: str | None = None
    schema: str = JOB_SCHEMA

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)

    def write(self, log_dir: str) -> str:
        path = os.path.join(log_dir, JOB_FILENAME)
        return files.write_into_own_directory(path, self.to_json())

    @classmethod
    def load(cls, path: str) -> JobReport:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        if not isinstance(data, dict) or data.get("schema") != JOB_SCHEMA:
            raise ValueError(f"{path} is not a keras_xla job report")
        data["workers"] = [WorkerRow(**w) for w in data.get("workers", [])]
        return cls(**data)

    def codes(self) -> list[str]:
        return [f["code"] for f in self.findings]


def row_of(report: XLAReport, index: int) -> WorkerRow:
    """A worker's row from its report."""
    worker = report.worker or {}
    verdict = report.verdict
    return WorkerRow(
        index=index,
        host=worker.get("host"),
        compilations=report.total_compilations,
        recompilations=[
            _picked(r, RECOMPILATION) for r in report.recompilations
        ],
        compile_seconds=round(
            sum(c.compile_seconds for c in report.compile_log), 3
        ),
        step_ms=figures.rounded(figures.MEDIAN_STEP.over(report.epochs)),
        train_steps=sum(e.steps for e in report.epochs),
        finished=bool(worker.get("finished")),
        xla_step_ms=verdict.xla_step_ms if verdict else None,
        baseline_step_ms=verdict.baseline_step_ms if verdict else None,
        programs=[_picked(c, PROGRAM) for c in report.compile_log],
    )


def _picked(item, names: list[str]) -> dict:
    return {name: getattr(item, name) for name in names}


def build(
    reports: dict[int, XLAReport], count: int, job: str | None = None
) -> JobReport:
    """The job's report from its workers' reports (by index); `count`
    workers were expected."""
    rows = [row_of(reports[i], i) for i in sorted(reports)]
    found = job_findings(reports, rows, count)
    return JobReport(
        count=count,
        workers=rows,
        missing=[i for i in range(count) if i not in reports],
        findings=found,
        verdict=_verdict(rows, found, count),
        job=job,
    )


def _verdict(rows: list[WorkerRow], found: list[dict], count: int) -> dict:
    """Did XLA pay off for the job: as slow as its slowest worker."""
    xla = [r.xla_step_ms for r in rows if r.xla_step_ms is not None]
    base = [r.baseline_step_ms for r in rows if r.baseline_step_ms]
    compile_s = max((r.compile_seconds for r in rows), default=0.0)
    steps = max((r.train_steps for r in rows), default=0)
    job_xla = max(xla) if xla else None
    job_base = max(base) if base else None
    speedup, break_even, paid_back = payback(
        job_base, job_xla, compile_s, steps
    )
    slow = max(rows, key=lambda r: r.step_ms or 0.0) if rows else None
    present = f"{len(rows)} of {count} workers"
    if speedup is None:
        headline = (
            f"The job ({present}): no no-XLA baseline on the slowest "
            f"worker, so no speedup; compiling took up to {compile_s:.1f} s."
        )
    else:
        paid = (
            "it paid off"
            if paid_back
            else "it did not pay off"
            if break_even is None
            else f"it pays back after {break_even} steps and the job ran "
            f"{steps}, so it did not pay off yet"
        )
        headline = (
            f"The job ({present}): XLA made each of its steps "
            f"{speedup:.2f}x faster (slowest worker: {job_base:.2f} -> "
            f"{job_xla:.2f} ms) and compiling took up to {compile_s:.1f} s: "
            f"{paid}."
        )
    return {
        "speedup": speedup,
        "baseline_step_ms": job_base,
        "xla_step_ms": job_xla,
        "compile_seconds": round(compile_s, 3),
        "break_even_steps": break_even,
        "paid_back": paid_back,
        "train_steps": steps,
        "slowest_worker": slow.index if slow else None,
        "headline": headline,
        "next_steps": [
            {"code": f["code"], "worker": f["worker"], "seconds": f["seconds"]}
            for f in found
            if f.get("seconds")
        ],
    }


def chief_report(
    job_dir: str, worker: workers.Worker, own: XLAReport
) -> JobReport:
    """The job's report as the chief makes it at its fit's end, from every
    worker's report under `job_dir` (`gather`), written beside them."""
    reports = workers.gather(job_dir, worker.count, own=own)
    job = build(reports, worker.count, worker.job)
    job.write(job_dir)
    return job


def merge(reports: Iterable[XLAReport]) -> JobReport:
    """The job report of workers' reports read from separate log dirs
    (each names its worker)."""
    by_index: dict[int, XLAReport] = {}
    count, job = 0, None
    for report in reports:
        worker = report.worker or {}
        index = worker.get("index")
        if index is None:
            raise ValueError(
                "a report without its worker (a fit that was not one "
                "worker of a job)"
            )
        by_index[int(index)] = report
        count = max(count, int(worker.get("count") or 0), int(index) + 1)
        job = job or worker.get("job")
    return build(by_index, count, job)
