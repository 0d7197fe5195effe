"""What only a job shows: the findings of its workers' reports together,
each naming its worker (`dict`s of the job's report):

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
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Iterator
from typing import Any

from keras_xla.core import findings as codes
from keras_xla.core import spikes
from keras_xla.core.report import XLAReport

# A straggler's steady step is this much slower than the median of the
# others' (ratio, and at least this many ms).
STRAGGLER_RATIO = 1.2
STRAGGLER_MIN_MS = 0.5


def job_findings(
    reports: dict[int, XLAReport], rows: list, count: int
) -> list[dict]:
    """Every finding of a job whose workers' reports (by index) gave
    `rows` (`core.job.WorkerRow`s); `count` workers were expected. The
    costliest first."""
    found = [_missing(i, count) for i in range(count) if i not in reports]
    found += [_unfinished(row, count) for row in rows if not row.finished]
    found += _compiled_alone(reports)
    found += _programs_differ(reports)
    found += _stragglers(rows)
    found.sort(key=lambda f: -(f.get("seconds") or 0.0))
    return found


def _finding(code: str, worker: int, message: str, fix: str, seconds=None):
    seconds = None if seconds is None else round(seconds, 3)
    return dict(
        code=code, worker=worker, message=message, fix=fix, seconds=seconds
    )


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


def _unfinished(row: Any, count: int) -> dict:
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
    """`(epoch, step, seconds)` of `report`'s unexplained spikes at the
    compilations `at` (another worker's): its wait at their collective."""
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
    """The others' wait (`waits`: each one's spikes, by worker) for a
    lone compilation of `seconds`: the seconds in all, and the sentence."""
    one = len(waits) == 1
    others = "the other worker" if one else f"the other {len(waits)} workers"
    if not all(waits.values()):
        each = "" if one else " each"
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
        if one
        else f"{waited / len(waits):.2f} s each on average "
        f"({waited:.2f} s in all)"
    )
    return waited, (
        f"{others} waited {much} for it at the next collective (measured: "
        f"their {where} stood out by that much, unexplained by anything of "
        "their own)"
    )


def _compiled_alone(reports: dict[int, XLAReport]) -> Iterator[dict]:
    if len(reports) < 2:
        return
    compiled = {i: _signatures(r) for i, r in reports.items()}
    for index, signatures in sorted(compiled.items()):
        elsewhere = set().union(*(s for i, s in compiled.items() if i != index))
        for (function, shapes), at in signatures.items():
            if (function, shapes) in elsewhere:
                continue
            inputs = json.loads(shapes)
            why, fix = _cause(reports[index], function, inputs)
            waits = {i: _waits(r, at) for i, r in reports.items() if i != index}
            waited, wait = _wait_text(waits, sum(c.compile_seconds for c in at))
            yield _finding(
                codes.WORKER_COMPILED_ALONE,
                index,
                f"Worker {index} compiled {function} for "
                + ", ".join(f"`{path}` {size}" for path, size in inputs.items())
                + f"{why}, which no other worker did: {wait}.",
                fix
                or "Give every worker the same shapes: shards of equal "
                "size (`drop_remainder=True`, or pad the last batch: "
                "`keras_xla.data.pad_batches`).",
                waited,
            )


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


def _programs_differ(reports: dict[int, XLAReport]) -> Iterator[dict]:
    """Compilations whose program differs from the first worker's there."""
    first: dict[tuple, tuple[int, object]] = {}
    for index in sorted(reports):
        for c in reports[index].compile_log:
            if not c.fingerprint:
                continue
            key = (c.function, c.epoch, c.step, c.replica)
            # The first worker's compilation of this step (this one if none).
            other, theirs = first.setdefault(key, (index, c))
            if theirs.fingerprint == c.fingerprint:
                continue
            difference = _first_difference(reports, {other: theirs, index: c})
            yield _finding(
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


# The settings of a worker's report that change the program it compiles.
PROGRAM_SETTINGS = ("tensorflow", "jax", "keras", "policy", "replicas")


def _first_difference(
    reports: dict[int, XLAReport], compiled: dict[int, object]
) -> str:
    """What first differs between two workers' compilations of one step
    (`compiled`, by worker)."""
    (i, a), (j, b) = sorted(compiled.items())

    def differs(what: str, mine, theirs) -> str | None:
        if mine != theirs:
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


def _stragglers(rows: list) -> Iterator[dict]:
    timed = [r for r in rows if r.step_ms is not None]
    for row in timed:
        others = [r.step_ms for r in timed if r is not row]
        if not others:
            continue
        pace = statistics.median(others)
        if row.step_ms < STRAGGLER_RATIO * pace:
            continue
        if row.step_ms - pace < STRAGGLER_MIN_MS:
            continue
        yield _finding(
            codes.STRAGGLER,
            row.index,
            f"Worker {row.index}'s steady step takes {row.step_ms:.2f} ms "
            f"against the others' {pace:.2f} ms: the job steps at its pace.",
            "Look at that worker's machine (another process, a slower "
            "device, its input pipeline: its report's `input-bound`), or "
            "give it a smaller share of the data.",
            (row.step_ms - pace) / 1000.0 * row.train_steps,
        )
