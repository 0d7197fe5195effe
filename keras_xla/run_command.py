"""`keras-xla run`: the command line of a script run under the tuner.

`keras-xla run [options] script.py [args...]` and `keras-xla run
[options] -m module [args...]`: everything after the script (or the
module's name) is the script's own. The tuner's arguments are flags of
the same names (`--jit-compile auto`, `--mixed-precision
mixed_bfloat16`, `--no-baseline`, ...), made from `XLATuner`'s signature
and its docstring's help, so the two never drift apart; `--log-dir`
(default `logs`) is where each fit's reports go, `--steps N` ends each
fit after N train steps. `--compare AXIS=V1,V2 ...` runs the script once
per configuration instead (`run_compare`).

The script's output comes first; then one line per fit on stderr: its
log dir and its verdict. Bad input gets one line naming it, exit 2.
"""

from __future__ import annotations

import argparse
import ast
import functools
import importlib
import importlib.util
import inspect
import json
import os
import re
import sys
from collections.abc import Sequence
from typing import Any

USAGE_ERROR = 2
DEFAULT_LOG_DIR = "logs"
# XLATuner arguments that are the command's own business.
OWN = ("log_dir",)
# Keras's backends and the package each needs.
BACKEND_PACKAGES = {"tensorflow": "tensorflow", "jax": "jax"}
BACKEND_PACKAGES |= {"torch": "torch", "numpy": "numpy"}
# Words for None, True and False in a flag's value.
WORDS = {"none": None, "true": True, "on": True, "false": False}
WORDS["off"] = False


@functools.cache
def _tuner_source() -> tuple[ast.ClassDef, dict[str, str]]:
    """XLATuner's class as written in `tuner.py`, and the module each
    name `tuner.py` imports comes from. Read, not imported: importing the
    tuner imports Keras, which would pick its backend before the script
    could pick its own."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tuner.py")
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    imported = {
        alias.asname or alias.name: node.module
        for node in tree.body
        if isinstance(node, ast.ImportFrom) and node.module
        for alias in node.names
    }
    tuner = next(
        node
        for node in tree.body
        if isinstance(node, ast.ClassDef) and node.name == "XLATuner"
    )
    return tuner, imported


def _default(node: ast.expr | None, imported: dict[str, str]) -> Any:
    """A default's value: a literal, or a constant `tuner.py` imports
    from a module that needs no backend (`DEFAULT_BUDGET`)."""
    if node is None:
        return inspect.Parameter.empty
    try:
        return ast.literal_eval(node)
    except ValueError:
        name = ast.unparse(node)
        return getattr(importlib.import_module(imported[name]), name)


def tuner_parameters() -> dict[str, inspect.Parameter]:
    """XLATuner's arguments (its signature), but the command's own."""
    tuner, imported = _tuner_source()
    init = next(
        node
        for node in tuner.body
        if isinstance(node, ast.FunctionDef) and node.name == "__init__"
    )
    arguments = init.args.args[1:]  # after self
    defaults = init.args.defaults
    defaults = [None] * (len(arguments) - len(defaults)) + defaults
    return {
        a.arg: inspect.Parameter(
            a.arg,
            inspect.Parameter.POSITIONAL_OR_KEYWORD,
            default=_default(d, imported),
            annotation=ast.unparse(a.annotation) if a.annotation else None,
        )
        for a, d in zip(arguments, defaults)
        if a.arg not in OWN
    }


def tuner_help() -> dict[str, str]:
    """Each argument's help: the first sentence of XLATuner's docstring
    entry for it."""
    doc = ast.get_docstring(_tuner_source()[0]) or ""
    args = doc.split("Args:", 1)[-1]
    found: dict[str, str] = {}
    for match in re.finditer(
        r"^    (\w+): (.*?)(?=^    \w+: |^\S|\Z)", args, re.M | re.S
    ):
        text = " ".join(match.group(2).split())
        found[match.group(1)] = text.split(". ")[0].rstrip(".") + "."
    return found


def flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def value(text: str) -> Any:
    """A flag's text as the tuner's argument: none/true/false (on/off),
    an int, a float, `a,b` as a pair of ints, else the text."""
    word = text.strip().lower()
    if word in WORDS:
        return WORDS[word]
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    if "," in text:
        parts = text.split(",")
        try:
            return tuple(int(p) for p in parts)
        except ValueError:
            return text
    return text


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
        default=None,
        help="end each fit cleanly after this many train steps",
    )
    parser.add_argument(
        "--compare",
        nargs="+",
        metavar="AXIS=V1,V2",
        default=None,
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
    helps = tuner_help()
    tuner = parser.add_argument_group(
        "the tuner's arguments (XLATuner's, same names and meaning)"
    )
    for name, p in tuner_parameters().items():
        text = helps.get(name, "") + f" (default: {p.default!r})"
        text = text.replace("%", "%%")  # argparse formats help with %
        if p.annotation in (bool, "bool"):
            tuner.add_argument(
                flag(name),
                dest=name,
                action=argparse.BooleanOptionalAction,
                default=argparse.SUPPRESS,
                help=text,
            )
        else:
            tuner.add_argument(
                flag(name),
                dest=name,
                type=value,
                default=argparse.SUPPRESS,
                metavar="VALUE",
                help=text,
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


def _tell(message: str) -> None:
    print(f"keras-xla run: {message}", file=sys.stderr)


def tuner_arguments(args: argparse.Namespace) -> dict:
    """The tuner arguments given as flags."""
    return {
        name: getattr(args, name)
        for name in tuner_parameters()
        if hasattr(args, name)
    }


def check_tuner_arguments(given: dict) -> str | None:
    """None if `XLATuner(**given)` would accept them, else the line that
    names the flag, its value and the fix."""
    from keras_xla.settings import ARGUMENTS, Settings

    defaults = {n: p.default for n, p in tuner_parameters().items()}
    arguments = {**defaults, **given, "log_dir": None}
    try:
        Settings.checked(**{n: arguments[n] for n in ARGUMENTS})
    except (TypeError, ValueError) as error:
        names = [n for n in given if f"{n}=" in str(error)]
        which = flag(names[0]) if names else "a tuner flag"
        return f"{which}: {error}"
    return None


def main(argv: Sequence[str]) -> int:
    """Runs `keras-xla run`; returns the exit status (the script's, or
    2 for a usage error)."""
    ours, theirs = split(argv)
    parser = build_parser()
    args = parser.parse_args(ours)
    given = tuner_arguments(args)
    problem = check_tuner_arguments(given)
    if problem:
        _tell(problem)
        return USAGE_ERROR
    if not 1 <= args.rounds <= 3:
        _tell(f"--rounds {args.rounds}: pass 1, 2 or 3.")
        return USAGE_ERROR
    if args.steps is not None and args.steps < 1:
        _tell(f"--steps {args.steps}: pass a number of train steps >= 1.")
        return USAGE_ERROR
    backend = os.environ.get("KERAS_BACKEND")
    package = BACKEND_PACKAGES.get(backend or "")
    if package and importlib.util.find_spec(package) is None:
        _tell(
            f"KERAS_BACKEND={backend}: {package} is not installed here "
            f"(pip install {package}), so Keras cannot load that backend."
        )
        return USAGE_ERROR
    module = args.module
    if module is None and not theirs:
        _tell("no script: give `script.py [args ...]` or `-m module`.")
        return USAGE_ERROR
    target = module if module is not None else theirs[0]
    script_args = theirs if module is not None else theirs[1:]
    if module is None and not os.path.isfile(target):
        _tell(f"{target}: no such script (give the path of a .py file).")
        return USAGE_ERROR
    if args.compare:
        from keras_xla import run_compare

        return run_compare.main(args, given, target, script_args)
    return run_script(args, given, target, script_args)


def run_script(
    args: argparse.Namespace, given: dict, target: str, script_args: list
) -> int:
    from keras_xla import script_run

    module = args.module is not None
    name = target if module else os.path.splitext(os.path.basename(target))[0]
    runner = script_run.Runner(args.log_dir, name, given, args.steps)
    result = script_run.run(target, script_args, runner, module=module)
    sys.stdout.flush()
    if not result.fits:
        _tell(f"no fit() ran in {target}.")
    for fit in result.fits:
        _tell(script_run.describe(fit))
    if args.result:
        with open(args.result, "w", encoding="utf-8") as f:
            json.dump(script_run.result_dict(result), f)
    return result.code
