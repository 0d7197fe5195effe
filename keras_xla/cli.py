"""The `keras-xla` command line: `doctor` and `report`.

`keras-xla doctor [--json]` checks that XLA can work here: versions, devices,
CPU features, the XLA flag variables (checked before any TensorFlow op: a
bad `TF_XLA_FLAGS` aborts the process at its first op), op determinism and
a timed compile. `keras-xla report LOGDIR [LOGDIR2]` renders the
`xla_report.json` that `XLATuner(log_dir=...)` writes, or compares two.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Sequence
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # before TF loads

from keras_xla import flags as flags_lib  # noqa: E402
from keras_xla import hardware  # noqa: E402
from keras_xla import report as report_lib  # noqa: E402
from keras_xla.report import (  # noqa: E402
    REPORT_FILENAME,
    XLAReport,
    format_table,
)

# CPU flags (as /proc/cpuinfo names them) that decide XLA's CPU code
# generation and whether bfloat16 math is native.
X86_FEATURES = tuple(
    "sse4_2 avx avx2 fma f16c avx512f avx512bw avx512_vnni avx512_bf16 "
    "avx512_fp16 amx_tile amx_bf16 amx_int8".split()
)
ARM_FEATURES = tuple("asimd asimdhp sve sve2 bf16 i8mm".split())
USAGE_ERROR = 2
BUILD_KEYS = ("cpu_compiler", "is_cuda_build", "cuda_version", "is_rocm_build")
EPOCH_HEADER = tuple(
    "epoch|steps|compilations|recompilations|compile s|median ms|p90 ms|"
    "examples/s".split("|")
)
# The doctor's rows: key in the JSON -> label in the text.
DOCTOR_LABELS = {
    "python": "Python",
    "tensorflow": "TensorFlow",
    "tensorflow_build": "TensorFlow build",
    "xla": "XLA build",
    "keras": "Keras",
    "keras_backend": "Keras backend",
    "dtype_policy": "Dtype policy",
    "physical_devices": "Physical devices",
    "logical_devices": "Logical devices",
    "cpu_features": "CPU features",
    "cpu_features_absent": "CPU features absent",
    "TF_XLA_FLAGS": "TF_XLA_FLAGS",
    "XLA_FLAGS": "XLA_FLAGS",
    "deterministic_ops": "Deterministic ops",
    "smoke_compile": "Smoke compile",
}
RECOMPILATION_HEADER = tuple(
    "function|epoch|step|input|dim|before -> after|cause|seconds".split("|")
)


# Doctor.


def cpu_features(cpuinfo_path: str = "/proc/cpuinfo") -> dict[str, Any]:
    """The XLA-relevant CPU features in `/proc/cpuinfo`, as lists
    `{"present": [...], "absent": [...]}`; both `"unknown"` where the
    file cannot be read (not Linux)."""
    words = hardware.cpu_flags(cpuinfo_path)
    if not words:
        return {"present": "unknown", "absent": "unknown"}
    arm = platform.machine().lower() in ("aarch64", "arm64")
    relevant = ARM_FEATURES if arm else X86_FEATURES
    return {
        "present": [f for f in relevant if f in words],
        "absent": [f for f in relevant if f not in words],
    }


def _smoke_compile() -> dict[str, Any]:
    """Times a tiny XLA matmul: the first call compiles, later ones run."""
    import tensorflow as tf

    matmul = tf.function(jit_compile=True)(lambda a, b: tf.matmul(a, b))
    ones = tf.ones((64, 64))
    seconds = []
    for _ in range(3):  # Compile, warm-up, timed run.
        start = time.perf_counter()
        product = matmul(ones, ones).numpy()
        seconds.append(time.perf_counter() - start)
    return {  # Compile = first call (trace + XLA compile + run) - a run.
        "compile_seconds": round(seconds[0] - seconds[2], 4),
        "first_call_seconds": round(seconds[0], 4),
        "later_call_ms": round(seconds[2] * 1000, 3),
        "result_ok": bool((product == 64.0).all()),
    }


def _op_determinism() -> bool | None:
    try:  # No public getter; Keras reads this one.
        from tensorflow.python.framework import config

        return bool(config.is_op_determinism_enabled())
    except Exception:  # noqa: BLE001 - diagnostics never raise.
        return None


def _runtime(skip_compile: bool) -> dict[str, Any]:
    import keras
    import tensorflow as tf

    build = dict(tf.sysconfig.get_build_info())
    features = cpu_features()
    info = {
        "python": f"{platform.python_version()} ({sys.executable})",
        "tensorflow": tf.__version__,
        "tensorflow_build": f"{tf.version.GIT_VERSION}, "
        f"{tf.version.COMPILER_VERSION}",
        "xla": {"built_with_xla": tf.test.is_built_with_xla()}
        | {k: v for k, v in build.items() if k in BUILD_KEYS},
        "keras": keras.__version__,
        "keras_backend": keras.backend.backend(),
        "dtype_policy": keras.config.dtype_policy().name,
        "physical_devices": [d.name for d in tf.config.list_physical_devices()],
        "logical_devices": [d.name for d in tf.config.list_logical_devices()],
        "cpu_features": features["present"],
        "cpu_features_absent": features["absent"],
        "deterministic_ops": _op_determinism(),
        "smoke_compile": {"skipped": "bad XLA flags would abort the process"},
    }
    if not skip_compile:
        try:
            info["smoke_compile"] = _smoke_compile()
        except Exception as error:  # noqa: BLE001 - keep the doctor alive.
            info["smoke_compile"] = {"error": repr(error)}
    return info


def collect_diagnosis() -> dict[str, Any]:
    """Everything `keras-xla doctor` shows, as a JSON-ready dict.

    The flag variables are checked before any TensorFlow op. A variable
    with a problem is unset while the runtime checks run (TensorFlow
    would abort on it) and restored after; the smoke compile is skipped.
    """
    values = {v: os.environ.get(v) for v in flags_lib.VARIABLES}
    flag_problems = flags_lib.check_flags()
    unset = sorted({p.variable for p in flag_problems})
    for variable in unset:
        del os.environ[variable]
    try:
        diagnosis = _runtime(skip_compile=bool(flag_problems))
    finally:
        os.environ.update({v: values[v] for v in unset})
    diagnosis.update(values)
    diagnosis["flag_problems"] = [dataclasses.asdict(p) for p in flag_problems]
    diagnosis["unset_for_checks"] = unset
    problems = [f"{p.variable}: {p.message}" for p in flag_problems]
    if "error" in diagnosis["smoke_compile"]:
        problems.append(f"Smoke compile failed: {diagnosis['smoke_compile']}")
    notes = []
    if diagnosis["keras_backend"] != "tensorflow":
        notes.append("keras_xla needs KERAS_BACKEND=tensorflow.")
    if diagnosis["deterministic_ops"]:
        notes.append("Op determinism is on: Keras keeps jit_compile off.")
    diagnosis.update(notes=notes, problems=problems, healthy=not problems)
    return diagnosis


def _text(value: Any) -> str:
    if isinstance(value, dict):
        return ", ".join(f"{k}: {_text(v)}" for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return " ".join(map(str, value)) or "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return "(unset)" if value is None else str(value) or '""'


def render_diagnosis(diagnosis: dict[str, Any]) -> str:
    """The doctor's dict as aligned `name  value` lines, then problems."""
    width = max(len(label) for label in DOCTOR_LABELS.values())
    lines = ["keras-xla doctor"]
    for key, label in DOCTOR_LABELS.items():
        lines.append(f"  {label.ljust(width)}  {_text(diagnosis[key])}")
    for problem in diagnosis["flag_problems"]:
        lines.append(f"  Flag problem [{problem['code']}] {problem['flag']}")
        lines.append(f"    {problem['message']}")
        if problem["suggestion"]:
            lines.append(f"    Fix: set {problem['suggestion']}")
    if diagnosis["unset_for_checks"]:
        unset = " and ".join(diagnosis["unset_for_checks"])
        lines.append(f"  (devices were listed with {unset} unset)")
    lines += [f"  Note: {note}" for note in diagnosis["notes"]]
    count = len(diagnosis["problems"])
    lines.append(
        f"Status: {count} problem(s) found" if count else "Status: healthy"
    )
    return "\n".join(lines)


def run_doctor(args: argparse.Namespace) -> int:
    diagnosis = collect_diagnosis()
    if args.json:
        print(json.dumps(diagnosis, indent=2, default=str))
    else:
        print(render_diagnosis(diagnosis))
    return 0 if diagnosis["healthy"] else 1


# Report.


class ReportError(Exception):
    """A report path that does not hold a readable keras_xla report."""


def load_report(path: str) -> tuple[XLAReport, str]:
    """Loads a report from a log dir or a JSON file path.

    Raises:
        ReportError: Naming the path and what was expected.
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
        return XLAReport.load(file_path), file_path
    except (ValueError, TypeError, AttributeError, OSError) as error:
        bad_json = isinstance(error, json.JSONDecodeError)
        kind = "valid JSON" if bad_json else "a keras_xla report"
        raise ReportError(
            f"{file_path} is not {kind} ({error}): {expected}."
        ) from error


def _num(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def render_report(report: XLAReport, path: str) -> str:
    """One report as text: jit, epochs, recompilations, trial, findings."""
    lines = [f"Report: {path}"]
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
    epochs = report.epochs
    totals = (sum(e.steps for e in epochs), report.total_compilations)
    totals += (sum(e.recompilations for e in epochs),)
    rows = [EPOCH_HEADER, *map(_epoch_row, epochs)]
    compile_seconds = _num(report.total_compile_seconds)
    rows.append(("total", *map(str, totals), compile_seconds, "", "", ""))
    lines += ["", *format_table(rows)]
    lines += ["", f"Recompilations ({len(report.recompilations)})"]
    rows = [RECOMPILATION_HEADER]
    for r in report.recompilations:
        where = map(str, (r.function, r.epoch, r.step, r.input, r.dim))
        change = f"{r.before} -> {r.after}"
        rows.append((*where, change, r.cause, _num(r.compile_seconds)))
    lines += format_table(rows) if report.recompilations else []
    if report.decision:
        lines += ["", "Trial decision", report.decision_markdown()]
    lines += ["", f"Findings ({len(report.findings)})"]
    for f in report.findings:
        lines.append(
            f"[{f.code}] {f.severity}, count {f.count}, "
            f"{f.compile_seconds:.2f} s compiling"
        )
        lines.append(f"  {f.message}")
        lines.append(f"  Fix: {f.fix}")
    return "\n".join(lines)


def _epoch_row(e: report_lib.EpochStats) -> tuple[str, ...]:
    counts = (e.epoch, e.steps, e.compilations, e.recompilations)
    times = (e.compile_seconds, *map(e.step_time_ms.get, ("median", "p90")))
    return (
        *map(str, counts),
        *map(_num, times),
        _num(e.examples_per_second, 1),
    )


def run_totals(report: XLAReport) -> dict[str, float | None]:
    """Per-run totals; step time and examples/s are medians over epochs."""
    medians = [e.step_time_ms.get("median") for e in report.epochs]
    rates = [e.examples_per_second for e in report.epochs]
    medians = [m for m in medians if m is not None]
    rates = [r for r in rates if r is not None]
    return {
        "epochs": len(report.epochs),
        "total compilations": report.total_compilations,
        "recompilations": sum(e.recompilations for e in report.epochs),
        "compile seconds": report.total_compile_seconds,
        "median step ms": statistics.median(medians) if medians else None,
        "examples/s": statistics.median(rates) if rates else None,
    }


def render_comparison(runs: Sequence[tuple[XLAReport, str]]) -> str:
    """Two reports side by side with a `run2 / run1` ratio column."""
    (first, first_path), (second, second_path) = runs
    lines = [f"run1: {first_path}", f"run2: {second_path}"]
    lines += ["(median step ms and examples/s: medians over epochs)", ""]
    jit = [
        ("on" if r.jit.enabled else "off") if r.jit else "-"
        for r in (first, second)
    ]
    rows = [("", "run1", "run2", "run2/run1"), ("XLA", *jit, "")]
    totals = run_totals(first), run_totals(second)
    for name in totals[0]:
        a, b = totals[0][name], totals[1][name]
        integer = name in ("epochs", "total compilations", "recompilations")
        digits = 1 if name == "examples/s" else 2
        cells = [str(v) if integer else _num(v, digits) for v in (a, b)]
        ratio = "-" if not a or b is None else f"{b / a:.2f}"
        rows.append((name, *cells, ratio))
    lines += format_table(rows)
    return "\n".join(lines)


def run_report(args: argparse.Namespace) -> int:
    try:
        paths = [args.logdir] + ([args.logdir2] if args.logdir2 else [])
        runs = [load_report(path) for path in paths]
    except ReportError as error:
        print(f"keras-xla report: {error}", file=sys.stderr)
        return USAGE_ERROR
    if len(runs) == 1:
        print(render_report(*runs[0]))
    else:
        print(render_comparison(runs))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="keras-xla",
        description="Check XLA's setup and read keras_xla reports.",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    doctor = commands.add_parser(
        "doctor",
        help="versions, devices, CPU features, XLA flags, a smoke compile",
    )
    doctor.add_argument("--json", action="store_true", help="print JSON")
    doctor.set_defaults(run=run_doctor)
    report = commands.add_parser(
        "report", help="render xla_report.json, or compare two runs"
    )
    report.add_argument(
        "logdir",
        metavar="LOGDIR",
        help=f"a log dir holding {REPORT_FILENAME}, or that file",
    )
    report.add_argument(
        "logdir2",
        nargs="?",
        metavar="LOGDIR2",
        help="a second run to compare with the first (ratio = run2 / run1)",
    )
    report.set_defaults(run=run_report)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Runs `keras-xla`; returns the exit status.

    Args:
        argv: The arguments after the program name. Defaults to
            `sys.argv[1:]`.

    Returns:
        0 on success; 1 when `doctor` found a problem; 2 for a usage
        error or an unreadable report.
    """
    args = build_parser().parse_args(argv)
    return args.run(args)
