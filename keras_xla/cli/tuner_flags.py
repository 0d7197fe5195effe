"""XLATuner's arguments as `keras-xla run` flags, never written twice.

The flags' names, defaults and help are read from `tuner.py`'s source
(XLATuner's signature and its docstring's `Args:`), not by importing it:
importing the tuner imports Keras, which would pick its backend before
the script could pick its own. A flag's text becomes the argument's
value (`value`), and the arguments are checked as XLATuner checks them
(`keras_xla.settings`), before the script runs.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import functools
import importlib
import inspect
import os
import re
from typing import Any

# XLATuner arguments that are the command's own business.
OWN = ("log_dir",)
# Words for None, True and False in a flag's value.
WORDS = {"none": None, "true": True, "on": True, "false": False, "off": False}
TUNER = os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tuner.py"
)


@functools.cache
def _tuner_source() -> tuple[ast.ClassDef, dict[str, str]]:
    """XLATuner's class as written in `tuner.py`, and the module each
    name `tuner.py` imports comes from."""
    with open(TUNER, encoding="utf-8") as f:
        tree = ast.parse(f.read(), TUNER)
    imported = {
        alias.asname or alias.name: node.module
        for node in tree.body
        if isinstance(node, ast.ImportFrom) and node.module
        for alias in node.names
    }
    return _named(tree.body, ast.ClassDef, "XLATuner"), imported


def _named(nodes: list[ast.stmt], kind: type, name: str) -> Any:
    """The first of `nodes` that is a `kind` named `name`."""
    return next(n for n in nodes if isinstance(n, kind) and n.name == name)


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
    init = _named(tuner.body, ast.FunctionDef, "__init__")
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
        with contextlib.suppress(ValueError):
            return kind(text)
    if "," in text:
        with contextlib.suppress(ValueError):
            return tuple(int(p) for p in text.split(","))
    return text


def tuner_arguments(args: argparse.Namespace) -> dict:
    """The tuner arguments given as flags."""
    return {n: getattr(args, n) for n in tuner_parameters() if hasattr(args, n)}


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
