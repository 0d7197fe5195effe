"""The `keras-xla` command line: `doctor`, `report` and `run`.

`keras-xla doctor [--json]` checks that XLA can work here: versions,
devices, CPU features, the XLA flag variables (checked before any
TensorFlow op: a bad `TF_XLA_FLAGS` aborts the process at its first op),
op determinism and a timed compile. `keras-xla report LOGDIR [LOGDIR2]`
renders reports (`cli.report`). `keras-xla run` runs a training script
under the tuner (`cli.run`), or compares backends and XLA settings on it
(`cli.compare`).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # before TF loads

from keras_xla import __version__, backends  # noqa: E402
from keras_xla.cli.report import run_report  # noqa: E402
from keras_xla.core.report import REPORT_FILENAME  # noqa: E402

COMMANDS = ("doctor", "report", "run")


def run_doctor(args: argparse.Namespace) -> int:
    checks = backends.doctor()
    diagnosis = checks.collect_diagnosis()
    if args.json:
        print(json.dumps(diagnosis, indent=2, default=str))
    else:
        print(checks.render_diagnosis(diagnosis))
    return 0 if diagnosis["healthy"] else 1


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="keras-xla",
        description="Check XLA's setup and read keras_xla reports.",
    )
    parser.add_argument(
        "--version", action="version", version=f"keras-xla {__version__}"
    )
    commands = parser.add_subparsers(dest="command", required=True)
    doctor = commands.add_parser(
        "doctor",
        help="versions, devices, CPU features, XLA flags, a smoke compile",
    )
    doctor.add_argument("--json", action="store_true", help="print JSON")
    doctor.set_defaults(run=run_doctor)
    report = commands.add_parser(
        "report",
        help="render xla_report.json, compare two runs, or merge a job's "
        "workers",
    )
    report.add_argument(
        "logdir",
        metavar="LOGDIR",
        help=f"a log dir holding {REPORT_FILENAME}, or that file",
    )
    report.add_argument(
        "more",
        nargs="*",
        metavar="LOGDIR2",
        help="a second run to compare with the first (ratio = second / "
        "first); or, for a job whose workers kept separate log dirs, every "
        "worker's log dir (merged into the job's table)",
    )
    report.add_argument(
        "--labels",
        nargs=2,
        metavar=("FIRST", "SECOND"),
        help="names of the two runs (default: their directory names)",
    )
    report.add_argument(
        "--json", action="store_true", help="print the result as JSON"
    )
    report.set_defaults(run=run_report)
    commands.add_parser(
        "run",
        add_help=False,
        help="run a training script with an XLATuner on every fit, no edit "
        "(`keras-xla run --help`); --compare backends and XLA settings",
    )
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
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["run"]:
        from keras_xla.cli import run

        return run.main(argv[1:])
    args = build_parser().parse_args(argv)
    return args.run(args)
