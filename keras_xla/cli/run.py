"""`keras-xla run`: the command line of a script run under the tuner.

`keras-xla run [options] script.py [args...]` and `keras-xla run
[options] -m module [args...]`: everything after the script (or the
module's name) is the script's own. The tuner's arguments are flags of
the same names (`--jit-compile auto`, `--mixed-precision
mixed_bfloat16`, `--no-baseline`, ...), made from `XLATuner`'s signature
and its docstring's help, so the two never drift apart. `--compare
AXIS=V1,V2 ...` runs the script once per configuration instead
(`cli.compare`).

The script's output comes first; then one line per fit on stderr: its
log dir and its verdict. Bad input gets one line naming it, exit 2.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import os
import sys
from collections.abc import Sequence

from keras_xla.cli import tuner_flags

USAGE_ERROR = 2
DEFAULT_LOG_DIR = "logs"
# Keras's backends and the package each needs.
BACKEND_PACKAGES = {b: b for b in ("tensorflow", "jax", "torch", "numpy")}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="keras-xla run",
        description="Run a training script with an XLATuner on every "
        "fit, without editing it; or compare backends and XLA settings.",
        usage="keras-xla run [options] (script.py | -m module) [args ...]",
    )
    parser.add_argument(
        "--log-dir",
        default=DEFAULT_LOG_DIR,
        help="where each fit's reports go: <log-dir>/<script>/fit-<n> "
        f"(default: {DEFAULT_LOG_DIR})",
    )
    parser.add_argument(
        "--steps",
        type=int,
        help="end each fit cleanly after this many train steps",
    )
    parser.add_argument(
        "--compare",
        nargs="+",
        metavar="AXIS=V1,V2",
        help="run the script once per configuration and compare: "
        "backend=tensorflow,jax and jit=on,off (each in its own process)",
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=2,
        help="with --compare: rounds at least (each runs every "
        "configuration once, alternate rounds in reverse order; more run "
        "while the lead is unclear, up to 3) (default: 2)",
    )
    parser.add_argument(
        "--json", action="store_true", help="with --compare: print JSON"
    )
    parser.add_argument("--result", help=argparse.SUPPRESS)
    parser.add_argument("-m", dest="module", help="run a module as a script")
    helps = tuner_flags.tuner_help()
    tuner = parser.add_argument_group(
        "the tuner's arguments (XLATuner's, same names and meaning)"
    )
    for name, p in tuner_flags.tuner_parameters().items():
        text = helps.get(name, "") + f" (default: {p.default!r})"
        text = text.replace("%", "%%")  # argparse formats help with %
        kind = {"type": tuner_flags.value, "metavar": "VALUE"}
        if p.annotation in (bool, "bool"):
            kind = {"action": argparse.BooleanOptionalAction}
        tuner.add_argument(
            tuner_flags.flag(name),
            dest=name,
            default=argparse.SUPPRESS,
            help=text,
            **kind,
        )
    return parser


def split(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """`argv` cut into the command's options and the script's part (the
    script, or `-m module`, and its arguments)."""
    argv = list(argv)
    parser = build_parser()
    takes_value = {
        option
        for action in parser._actions  # argparse keeps no public list
        if action.nargs != 0 and action.option_strings
        for option in action.option_strings
    }
    ours: list[str] = []
    i = 0
    while i < len(argv):
        token = argv[i]
        if token == "-m":
            return ours + argv[i : i + 2], argv[i + 2 :]
        if token == "--":  # the rest is the script's, as with python
            return ours, argv[i + 1 :]
        if token == "--compare":
            ours.append(token)
            i += 1
            while i < len(argv) and "=" in argv[i] and not argv[i][:1] == "-":
                ours.append(argv[i])
                i += 1
            continue
        if not token.startswith("-") or token == "-":
            return ours, argv[i:]
        ours.append(token)
        if token in takes_value and "=" not in token and i + 1 < len(argv):
            ours.append(argv[i + 1])
            i += 1
        i += 1
    return ours, []


def tell(message: str) -> None:
    """Prints `message` as one `keras-xla run:` line on stderr."""
    print(f"keras-xla run: {message}", file=sys.stderr)


def main(argv: Sequence[str]) -> int:
    """Runs `keras-xla run`; returns the exit status (the script's, or
    2 for a usage error)."""
    ours, theirs = split(argv)
    args = build_parser().parse_args(ours)
    given = tuner_flags.tuner_arguments(args)
    problem = tuner_flags.check_tuner_arguments(given)
    if problem:
        tell(problem)
        return USAGE_ERROR
    if not 1 <= args.rounds <= 3:
        tell(f"--rounds {args.rounds}: pass 1, 2 or 3.")
        return USAGE_ERROR
    if args.steps is not None and args.steps < 1:
        tell(f"--steps {args.steps}: pass a number of train steps >= 1.")
        return USAGE_ERROR
    backend = os.environ.get("KERAS_BACKEND")
    package = BACKEND_PACKAGES.get(backend or "")
    if package and importlib.util.find_spec(package) is None:
        tell(
            f"KERAS_BACKEND={backend}: {package} is not installed here "
            f"(pip install {package}), so Keras cannot load that backend."
        )
        return USAGE_ERROR
    module = args.module
    if module is None and not theirs:
        tell("no script: give `script.py [args ...]` or `-m module`.")
        return USAGE_ERROR
    target = module if module is not None else theirs[0]
    script_args = theirs if module is not None else theirs[1:]
    if module is None and not os.path.isfile(target):
        tell(f"{target}: no such script (give the path of a .py file).")
        return USAGE_ERROR
    if args.compare:
        from keras_xla.cli import compare

        return compare.main(args, given, target, script_args)
    return run_script(args, given, target, script_args)


def run_script(
    args: argparse.Namespace, given: dict, target: str, script_args: list
) -> int:
    from keras_xla.cli import script as script_lib

    module = args.module is not None
    name = target if module else os.path.splitext(os.path.basename(target))[0]
    hook = script_lib.FitHook(args.log_dir, name, given, args.steps)
    code, error = script_lib.execute(target, script_args, hook, module=module)
    sys.stdout.flush()
    if not hook.fits:
        tell(f"no fit() ran in {target}.")
    for fit in hook.fits:
        tell(script_lib.describe(fit))
    if args.result:  # the run as JSON, for `--compare`
        fits = [fit.figures() for fit in hook.fits]
        with open(args.result, "w", encoding="utf-8") as f:
            json.dump({"code": code, "error": error, "fits": fits}, f)
    return code
