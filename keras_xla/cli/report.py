"""`keras-xla report`: a report, two side by side, or a job's.

`keras-xla report LOGDIR [LOGDIR2]` renders the `xla_report.json` that
`XLATuner(log_dir=...)` writes, or compares two; a job's log dir (its
workers' reports under `workers/`), or the log dirs of one job's
workers, give the job's table (`core.job`). Whatever a report file
holds, it prints what it could read (and notes on stderr what it
skipped) or exits 2 with one line naming the file and what was wrong,
never a traceback; strings from reports and paths are escaped for the
terminal, and `--json` is strict JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from keras_xla.core import compare, reading, render, workers
from keras_xla.core import job as job_lib
from keras_xla.core.report import REPORT_FILENAME, XLAReport

USAGE_ERROR = 2


class ReportError(Exception):
    """A report path that does not hold a readable keras_xla report."""


def load_report(path: str) -> tuple[XLAReport, str]:
    """Loads a report from a log dir or a JSON file path, read as far as
    it can be (`keras_xla.core.reading`).

    Raises:
        ReportError: Naming the path and what was expected or wrong.
    """
    file_path = path
    if os.path.isdir(path):
        file_path = os.path.join(path, REPORT_FILENAME)
    expected = (
        f"expected a log dir holding {REPORT_FILENAME} (written by "
        "keras_xla.XLATuner(log_dir=...)) or the path of that file"
    )
    if not os.path.isfile(file_path):
        raise ReportError(f"No report at {file_path}: {expected}.")
    try:
        with open(file_path, encoding="utf-8") as f:
            return XLAReport.from_dict(reading.parse(f.read())), file_path
    except Exception as error:  # Whatever the file holds: never a trace.
        bad_json = isinstance(error, json.JSONDecodeError)
        kind = "valid JSON" if bad_json else "a keras_xla report"
        raise ReportError(
            f"{file_path} is not {kind} ({_detail(error)}): {expected}."
        ) from error


def _detail(error: Exception) -> str:
    """The error's message (or its type's name), cut to 200 characters."""
    text = str(error) or type(error).__name__
    return text if len(text) <= 200 else text[:197] + "..."


def _emit(text: str, stream) -> None:
    """Prints `text` to `stream`; a character its encoding lacks is
    written as an escape rather than failing the print."""
    encoding = getattr(stream, "encoding", None) or "utf-8"
    text = text.encode(encoding, "backslashreplace").decode(encoding)
    print(text, file=stream)


def _tell(message: str) -> None:
    """Prints `message` as one `keras-xla report:` line on stderr, its
    control characters escaped."""
    _emit(f"keras-xla report: {render.printable(message)}", sys.stderr)


def render_report(args: argparse.Namespace, runs: list) -> str:
    """The text `keras-xla report` prints for the loaded `runs`: JSON
    with `--json`, else text whose strings from the reports, paths and
    labels are escaped for a terminal (`render.printable`)."""
    labels = args.labels or [
        os.path.basename(os.path.dirname(os.path.abspath(path)))
        for _, path in runs
    ]
    reports = [report for report, _ in runs]
    if args.json and len(runs) == 1:
        return render.json_text(reports[0].to_dict())
    if args.json:
        return render.json_text(compare.compare(*reports, labels))
    shown = [
        (render.printable_report(report), render.printable(path))
        for report, path in runs
    ]
    if len(shown) == 1:
        return render.full_report(*shown[0])
    return compare.comparison(shown, [render.printable(x) for x in labels])


def _job_dir(path: str) -> bool:
    """Whether `path` is a job's log dir: the chief's job report, or
    workers' reports under `workers/`, and no report of its own."""
    if not os.path.isdir(path):
        return False
    if os.path.isfile(os.path.join(path, job_lib.JOB_FILENAME)):
        return True
    own = os.path.isfile(os.path.join(path, REPORT_FILENAME))
    return not own and os.path.isdir(os.path.join(path, workers.WORKERS_DIR))


def _job_of_dir(path: str) -> job_lib.JobReport:
    """A job log dir's job report: rebuilt from the workers' reports
    there (the chief's file where none can be read)."""
    reports = workers.read_workers(path)
    if reports:
        return job_lib.merge(reports.values())
    return job_lib.JobReport.load(os.path.join(path, job_lib.JOB_FILENAME))


def _print_job(args: argparse.Namespace, job: job_lib.JobReport) -> int:
    if args.json:
        _emit(render.json_text(job.to_dict()), sys.stdout)
    else:
        lines = render.job_summary(job)
        _emit("\n".join(render.printable(line) for line in lines), sys.stdout)
    return 0


def run_report(args: argparse.Namespace) -> int:
    paths = [args.logdir, *args.more]
    if len(paths) == 1 and _job_dir(paths[0]):
        try:
            return _print_job(args, _job_of_dir(paths[0]))
        except (OSError, ValueError) as error:
            _tell(f"{paths[0]}: no job report could be read ({error}).")
            return USAGE_ERROR
    try:
        runs = [load_report(path) for path in paths]
    except ReportError as error:
        _tell(str(error))
        return USAGE_ERROR
    if all(report.worker is not None for report, _ in runs) and len(runs) > 1:
        return _print_job(args, job_lib.merge(report for report, _ in runs))
    if len(runs) > 2:
        _tell(
            f"{len(runs)} reports: give one run, two to compare, or the "
            "log dirs of one job's workers (their reports name them)."
        )
        return USAGE_ERROR
    try:
        text = render_report(args, runs)
    except Exception as error:  # A report read but not renderable.
        names = " and ".join(path for _, path in runs)
        _tell(
            f"{names}: cannot be rendered ({type(error).__name__}: "
            f"{_detail(error)})."
        )
        return USAGE_ERROR
    for report, path in runs:
        if report.skipped:
            _tell(
                f"{path}: read without {len(report.skipped)} part(s) it "
                "could not read: " + "; ".join(report.skipped)
            )
    _emit(text, sys.stdout)
    return 0
