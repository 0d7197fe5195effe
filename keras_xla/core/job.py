"""One job's answer from its workers' reports.

A job that trains on several workers (TensorFlow's
`MultiWorkerMirroredStrategy`, JAX's multi-process runtime) runs one
tuner per worker. Each knows its `Worker` (index, count, host) and keeps
its report under the job's log dir, `<log_dir>/workers/<index>/`; the
chief (worker 0) reads them all at the end of training (a bounded wait,
never a collective of its own) and writes the job's report,
`<log_dir>/xla_job_report.json`; `keras-xla report DIR DIR ...` merges
workers' reports kept in separate log dirs the same way.

What only a job shows, each a finding with the worker named:

- `worker-missing`: a worker whose report never came, or whose last one
  is not its final one (it died, its log dir is not shared, or it is
  still training when the wait ran out);
- `worker-compiled-alone`: a worker compiled a step for shapes no other
  worker compiled (an uneven shard's partial batch, a worker-local
  shape): every other worker waited for that compilation at the next
  collective, measured by their own step there (it stands out, with
  nothing of theirs to explain it), else estimated by its compile time;
- `worker-program-differs`: at one step, two workers compiled different
  programs (their HLO fingerprints differ): the first differing input
  (shape or dtype) or setting (versions, dtype policy) is named, else the
  code. Workers that lower different programs for one step can hang at
  their collectives;
- `straggler`: a worker whose steady step is clearly slower than the
  others' (the job steps at its pace).

The job's verdict: a step of the job is as slow as its slowest worker,
and its compiling as long as the longest; the speedup is the slowest
worker's no-XLA step over the slowest worker's XLA step.

Pure logic: nothing here imports TensorFlow, Keras or JAX.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import statistics
import time
from collections.abc import Iterable

from keras_xla.core import figures, files, spikes
from keras_xla.core import findings as codes
from keras_xla.core.report import REPORT_FILENAME, XLAReport

JOB_FILENAME = "xla_job_report.json"
JOB_SCHEMA = "keras_xla.job/1"
WORKERS_DIR = "workers"
# The chief waits at most this long at the end of its training for the
# other workers' final reports (the job's workers end together; a
# bounded wait is all it costs).
GATHER_SECONDS = 30.0
# It looks again after FIRST_POLL_SECONDS, each pause twice the last up
# to POLL_SECONDS: the workers end together, so the others' final
# reports come within milliseconds, and the chief waits at most about
# twice as long as it had to (a fixed 0.2 s poll cost every job 0.2 s).
FIRST_POLL_SECONDS = 0.005
POLL_SECONDS = 0.2
# A straggler's steady step is this much slower than the median of the
# others' (ratio, and at least this many ms).
STRAGGLER_RATIO = 1.2
STRAGGLER_MIN_MS = 0.5


@dataclasses.dataclass(frozen=True)
class Worker:
    """Which worker of a job this process is.

    Attributes:
        index: Its index in the job (0 is the chief).
        count: How many workers the job has.
        host: The machine's name.
        engine: What runs the job (`tf.distribute`, `jax.distributed`).
        job: What the job's workers share and another job's do not (the
            cluster's addresses), where known.
    """

    index: int
    count: int
    host: str
    engine: str
    job: str | None = None

    @property
    def chief(self) -> bool:
        return self.index == 0

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def from_tf_config(text: str | None, host: str) -> Worker | None:
    """This process's `Worker` from TensorFlow's `TF_CONFIG` (JSON: the
    cluster's `chief` and `worker` addresses, this `task`'s type and
    index); None outside a cluster of several workers. The chief, where
    the cluster names one, is worker 0."""
    try:
        config = json.loads(text) if text else None
        cluster = config["cluster"]
        task = config["task"]
        chiefs = list(cluster.get("chief") or [])
        workers = list(cluster.get("worker") or [])
        kind, number = task["type"], int(task["index"])
    except (ValueError, KeyError, TypeError, AttributeError):
        return None
    count = len(chiefs) + len(workers)
    if count < 2 or kind not in ("chief", "worker"):
        return None
    index = number if kind == "chief" else len(chiefs) + number
    job = ",".join(chiefs + workers)
    return Worker(index, count, host, "tf.distribute", job)


def worker_dir(log_dir: str, index: int) -> str:
    """Where worker `index` keeps its report and TensorBoard run."""
    return os.path.join(log_dir, WORKERS_DIR, str(index))


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
    # Each compiled step's program: function, epoch, step, shapes and its
    # HLO fingerprint (None where the backend gave none).
    programs: list = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class JobReport:
    """The job's answer: a row per worker, the job's findings and its
    verdict."""

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
    step_ms = figures.MEDIAN_STEP.over(report.epochs)
    verdict = report.verdict
    return WorkerRow(
        index=index,
        host=worker.get("host"),
        compilations=report.total_compilations,
        recompilations=[
            {
                "function": r.function,
                "epoch": r.epoch,
                "step": r.step,
                "input": r.input,
                "dim": r.dim,
                "after": r.after,
                "cause": r.cause,
                "compile_seconds": r.compile_seconds,
            }
            for r in report.recompilations
        ],
        compile_seconds=round(
            sum(c.compile_seconds for c in report.compile_log), 3
        ),
        step_ms=figures.rounded(step_ms),
        train_steps=sum(e.steps for e in report.epochs),
        finished=bool(worker.get("finished")),
        xla_step_ms=verdict.xla_step_ms if verdict else None,
        baseline_step_ms=verdict.baseline_step_ms if verdict else None,
        programs=[
            {
                "function": c.function,
                "epoch": c.epoch,
                "step": c.step,
                "shapes": c.shapes,
                "fingerprint": c.fingerprint,
            }
            for c in report.compile_log
        ],
    )


def build(
    reports: dict[int, XLAReport], count: int, job: str | None = None
) -> JobReport:
    """The job's report from its workers' reports (by index); `count`
    workers were expected."""
    rows = [row_of(reports[i], i) for i in sorted(reports)]
    missing = [i for i in range(count) if i not in reports]
    found = [_missing(i, count) for i in missing]
    found += [_unfinished(row, count) for row in rows if not row.finished]
    found += _compiled_alone(reports)
    found += _programs_differ(reports)
    found += _stragglers(rows)
    found.sort(key=lambda f: -(f.get("seconds") or 0.0))
    return JobReport(
        count=count,
        workers=rows,
        missing=missing,
        findings=found,
        verdict=_verdict(rows, found, count),
        job=job,
    )


def _finding(code: str, worker: int, message: str, fix: str, seconds=None):
    return {
        "code": code,
        "worker": worker,
        "message": message,
        "fix": fix,
        "seconds": None if seconds is None else round(seconds, 3),
    }


def _missing(index: int, count: int) -> dict:
    return _finding(
        codes.WORKER_MISSING,
        index,
        f"Worker {index} of {count} wrote no report: it died, its log dir "
        "is not the job's, or it had not finished when the chief gave up "
        "waiting.",
        "Give every worker the same log_dir on a shared file system, or "
        "merge their log dirs: `keras-xla report DIR DIR ...`.",
    )


def _unfinished(row: WorkerRow, count: int) -> dict:
    return _finding(
        codes.WORKER_MISSING,
        row.index,
        f"Worker {row.index} of {count} never wrote its final report: its "
        f"last one stops after {row.train_steps} train steps (it died, or "
        "was still training when the chief gave up waiting). Its row is "
        "that report's.",
        "Look at that worker's log for why it stopped; a worker still "
        "training: `keras-xla report LOGDIR` once it has finished.",
    )


def _signatures(report: XLAReport) -> dict[tuple, list]:
    """The worker's compilations by (function, shapes)."""
    out: dict[tuple, list] = {}
    for c in report.compile_log:
        key = (c.function, json.dumps(c.shapes, sort_keys=True))
        out.setdefault(key, []).append(c)
    return out


def _waits(report: XLAReport, at: list) -> list[tuple]:
    """The seconds by which `report`'s worker's own steps at the
    compilations `at` (another worker's) stood out with nothing of its
    own to explain them: what it waited at that step's collective, as
    `(epoch, step, seconds)`."""
    unexplained = {
        (e.epoch, s["step"]): s["seconds"]
        for e in report.epochs
        for s in e.spikes
        if s["kind"] == spikes.UNEXPLAINED
    }
    return [
        (c.epoch, c.step, unexplained[(c.epoch, c.step)])
        for c in at
        if (c.epoch, c.step) in unexplained
    ]


def _wait_text(waits: dict[int, list], seconds: float) -> tuple[float, str]:
    """The others' wait for a lone compilation of `seconds`, from each
    waiting worker's own spikes there (`waits`, by worker): measured
    where every one showed it, else its compile time for each; the
    seconds in all and the sentence."""
    others = (
        "the other worker"
        if len(waits) == 1
        else f"the other {len(waits)} workers"
    )
    if not all(waits.values()):
        each = "" if len(waits) == 1 else " each"
        return seconds * len(waits), (
            f"{others} waited about {seconds:.2f} s{each} for it at the "
            "next collective (its compile time: their own steps there did "
            "not show the wait)"
        )
    waited = sum(w for ws in waits.values() for _, _, w in ws)
    steps = sorted({(e, s) for ws in waits.values() for e, s, _ in ws})
    where = ", ".join(f"step {s} of epoch {e}" for e, s in steps)
    much = (
        f"{waited:.2f} s"
        if len(waits) == 1
        else f"{waited / len(waits):.2f} s each on average "
        f"({waited:.2f} s in all)"
    )
    return waited, (
        f"{others} waited {much} for it at the next collective (measured: "
        f"their {where} stood out by that much, unexplained by anything of "
        "their own)"
    )


def _compiled_alone(reports: dict[int, XLAReport]) -> list[dict]:
    """A worker's compilations that no other worker made, with the
    seconds the others waited for them: measured where every other
    worker's step there stood out unexplained (its own spike), else
    the compilation's seconds for each."""
    if len(reports) < 2:
        return []
    compiled = {i: _signatures(r) for i, r in reports.items()}
    found = []
    for index, signatures in sorted(compiled.items()):
        elsewhere = set().union(*(s for i, s in compiled.items() if i != index))
        for (function, shapes), at in signatures.items():
            if (function, shapes) in elsewhere:
                continue
            why = _cause(reports[index], function, json.loads(shapes))
            seconds = sum(c.compile_seconds for c in at)
            waits = {i: _waits(r, at) for i, r in reports.items() if i != index}
            waited, wait = _wait_text(waits, seconds)
            found.append(
                _finding(
                    codes.WORKER_COMPILED_ALONE,
                    index,
                    f"Worker {index} compiled {function} for "
                    f"{_shapes(json.loads(shapes))}{why[0]}, which no other "
                    f"worker did: {wait}.",
                    why[1]
                    or "Give every worker the same shapes: shards of equal "
                    "size (`drop_remainder=True`, or pad the last batch: "
                    "`keras_xla.data.pad_batches`).",
                    waited,
                )
            )
    return found


def _cause(report: XLAReport, function: str, shapes: dict) -> tuple[str, str]:
    """The worker's explanation of a compilation for `shapes`: its
    recompilation's input, dimension and cause, and its fix."""
    for r in report.recompilations:
        if (
            r.function == function
            and r.input
            and shapes.get(r.input) == r.after
        ):
            return (
                f" (input `{r.input}` dim {r.dim}: {r.before} -> {r.after}, "
                f"{r.cause.replace('_', ' ')})",
                r.fix,
            )
    return "", ""


def _programs_differ(reports: dict[int, XLAReport]) -> list[dict]:
    """Steps at which a worker compiled another program than the first
    worker that compiled the same step (by their HLO fingerprints)."""
    first: dict[tuple, tuple[int, object]] = {}
    found = []
    for index in sorted(reports):
        for c in reports[index].compile_log:
            if not c.fingerprint:
                continue
            key = (c.function, c.epoch, c.step, c.replica)
            if key not in first:
                first[key] = (index, c)
                continue
            other, theirs = first[key]
            if theirs.fingerprint == c.fingerprint:
                continue
            difference = _first_difference(reports, {other: theirs, index: c})
            found.append(
                _finding(
                    codes.WORKER_PROGRAM_DIFFERS,
                    index,
                    f"At {c.function} step {c.step} of epoch {c.epoch}, "
                    f"worker {index} compiled another program than worker "
                    f"{other} (HLO fingerprints {c.fingerprint} and "
                    f"{theirs.fingerprint}): {difference}. Workers whose "
                    "programs differ for one step can hang at their "
                    "collectives.",
                    "Run the same code, package versions, dtype policy and "
                    "XLA flags on every worker, with inputs of the same "
                    "shapes and dtypes at each step.",
                    c.compile_seconds,
                )
            )
    return found


# The settings of a worker's report that change the program it compiles.
PROGRAM_SETTINGS = ("tensorflow", "jax", "keras", "policy", "replicas")


def _first_difference(
    reports: dict[int, XLAReport], compiled: dict[int, object]
) -> str:
    """What first differs between two workers' compilations of one step
    (`compiled`, by worker): an input's shape or dtype, else a setting,
    else their code."""
    (i, a), (j, b) = sorted(compiled.items())

    def differs(what: str, mine, theirs) -> str | None:
        if mine == theirs:
            return None
        return f"{what} is {mine} on worker {i} and {theirs} on worker {j}"

    dtypes_a, dtypes_b = a.dtypes or {}, b.dtypes or {}
    for path in list(a.shapes) + [p for p in b.shapes if p not in a.shapes]:
        found = differs(
            f"input `{path}`", a.shapes.get(path), b.shapes.get(path)
        ) or differs(
            f"input `{path}`'s dtype", dtypes_a.get(path), dtypes_b.get(path)
        )
        if found:
            return found
    for key in PROGRAM_SETTINGS:
        found = differs(
            f"`{key}`",
            reports[i].environment.get(key),
            reports[j].environment.get(key),
        )
        if found:
            return found
    return (
        "their inputs and settings are the same, so the model's code or "
        "its arguments differ"
    )


def _shapes(shapes: dict) -> str:
    return ", ".join(f"`{path}` {shape}" for path, shape in shapes.items())


def _stragglers(rows: list[WorkerRow]) -> list[dict]:
    timed = [r for r in rows if r.step_ms is not None]
    found = []
    for row in timed:
        others = [r.step_ms for r in timed if r is not row]
        if not others:
            continue
        pace = statistics.median(others)
        if (
            row.step_ms >= STRAGGLER_RATIO * pace
            and row.step_ms - pace >= STRAGGLER_MIN_MS
        ):
            lost = (row.step_ms - pace) / 1000.0 * row.train_steps
            found.append(
                _finding(
                    codes.STRAGGLER,
                    row.index,
                    f"Worker {row.index}'s steady step takes "
                    f"{row.step_ms:.2f} ms against the others' "
                    f"{pace:.2f} ms: the job steps at its pace.",
                    "Look at that worker's machine (another process, a "
                    "slower device, its input pipeline: its report's "
                    "`input-bound`), or give it a smaller share of the "
                    "data.",
                    lost,
                )
            )
    return found


def _verdict(rows: list[WorkerRow], found: list[dict], count: int) -> dict:
    """Did XLA pay off for the job: as slow as its slowest worker."""
    xla = [r.xla_step_ms for r in rows if r.xla_step_ms is not None]
    base = [r.baseline_step_ms for r in rows if r.baseline_step_ms]
    compile_s = max((r.compile_seconds for r in rows), default=0.0)
    steps = max((r.train_steps for r in rows), default=0)
    job_xla = max(xla) if xla else None
    job_base = max(base) if base else None
    speedup = break_even = paid_back = None
    if job_xla and job_base:
        speedup = round(job_base / job_xla, 3)
        saved = (job_base - job_xla) / 1000.0
        if saved > 0:
            break_even = math.ceil(compile_s / saved)
            paid_back = steps >= break_even
        else:
            paid_back = False
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


def read_workers(log_dir: str) -> dict[int, XLAReport]:
    """The reports kept under `<log_dir>/workers/<index>/` (those that
    cannot be read are left out: their worker counts as missing)."""
    root = os.path.join(log_dir, WORKERS_DIR)
    found: dict[int, XLAReport] = {}
    try:
        names = os.listdir(root)
    except OSError:
        return found
    for name in names:
        if not name.isdigit():
            continue
        path = os.path.join(root, name, REPORT_FILENAME)
        try:
            found[int(name)] = XLAReport.load(path)
        except (OSError, ValueError):
            continue
    return found


def gather(
    log_dir: str,
    count: int,
    wait_seconds: float | None = None,
    clock=time.monotonic,
    sleep=time.sleep,
    own: XLAReport | None = None,
) -> dict[int, XLAReport]:
    """The workers' reports under `log_dir`, waiting up to
    `wait_seconds` (`GATHER_SECONDS`) for each of the `count` workers'
    final report; `own`, the gathering worker's report, is taken as it
    is."""
    wait = GATHER_SECONDS if wait_seconds is None else wait_seconds
    deadline = clock() + wait
    mine = None if own is None else (own.worker or {}).get("index")
    pause = FIRST_POLL_SECONDS
    while True:
        reports = read_workers(log_dir)
        if mine is not None:
            reports[int(mine)] = own
        done = [r for r in reports.values() if (r.worker or {}).get("finished")]
        if len(done) >= count or clock() >= deadline:
            return reports
        sleep(pause)
        pause = min(2 * pause, POLL_SECONDS)


def chief_report(job_dir: str, worker: Worker, own: XLAReport) -> JobReport:
    """The job's report, as the chief makes it at its fit's end: every
    worker's report under `job_dir` (a bounded wait for them; `own` is
    the chief's), built and written beside them."""
    reports = gather(job_dir, worker.count, own=own)
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
