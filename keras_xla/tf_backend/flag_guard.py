"""Bad XLA flags caught at `import keras_xla`, before TensorFlow reads them.

TensorFlow kills the process at its first op on a `TF_XLA_FLAGS` flag it
cannot parse, and at its first XLA compilation on such an `XLA_FLAGS`
flag (`flags` explains which). That is long before any callback runs, so
the only place to keep the process alive is the import: `guard()` checks
both variables and, for each flag TensorFlow would abort on, applies the
intended flag when the check knows it for sure (`--tf_xla_dump_to=DIR` is
`XLA_FLAGS=--xla_dump_to=DIR`, `=yes` is `=true`) or drops the flag. Text
TensorFlow merely ignores is left alone. What was changed is kept in
`FIXES`, and every XLATuner reports it as findings (`strict=True` raises);
the values as the user set them stay readable (`original()`), so
`keras-xla doctor` diagnoses the environment as it was.

The check asks TensorFlow for its flag table (a child process of seconds,
kept in the cache home) only for a flag outside the built-in table of
well-known ones (`flag_tables.WELL_KNOWN`): where nothing can be kept, a
usual flag costs no probe at import.

`KERAS_XLA_FIX_FLAGS=0` turns this off. Once TensorFlow has started it
does nothing: TensorFlow read the flags already.
"""

from __future__ import annotations

import dataclasses
import logging
import os

from keras_xla.tf_backend import flags as flags_lib

OFF_VARIABLE = "KERAS_XLA_FIX_FLAGS"
logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class FlagFix:
    """One flag changed at import: the `problem` TensorFlow would have
    aborted on, and the `action` taken, in words ("dropped", ...)."""

    problem: flags_lib.FlagProblem
    action: str

    def finding(self) -> tuple[str, str, str, tuple]:
        """`(code, message, fix, place)` for the tuner's report."""
        p = self.problem
        return (
            p.code,
            f"{p.message} At import, keras_xla {self.action} for this "
            "process, so TensorFlow did not abort.",
            f"Correct {p.variable} where it is set"
            + (f": {p.suggestion}." if p.suggestion else "."),
            (p.variable, p.flag),
        )


FIXES: list[FlagFix] = []
_ORIGINAL: dict[str, str | None] = {}


def guard(environ=None, tensorflow_started: bool = False) -> list[FlagFix]:
    """Fixes the flags TensorFlow would abort on; see the module
    docstring. Never raises."""
    environ = os.environ if environ is None else environ
    if (
        tensorflow_started
        or environ.get(OFF_VARIABLE) == "0"
        or not any(environ.get(v) for v in flags_lib.VARIABLES)
    ):
        return []
    try:
        fixes = []
        for problem in flags_lib.check_flags(environ, quick=True):
            if problem.code not in flags_lib.HARMLESS:
                variable = problem.variable
                _ORIGINAL.setdefault(variable, environ.get(variable))
                fixes.append(FlagFix(problem, _apply(environ, problem)))
    except Exception:  # noqa: BLE001 - never break an import
        logger.exception("keras_xla: could not check the XLA flags.")
        return []
    FIXES.extend(fixes)
    return fixes


def _apply(environ, problem) -> str:
    """Applies the intended flag, or drops the bad one; returns what was
    done."""
    variable, suggestion = problem.variable, problem.suggestion
    sure = suggestion and "VALUE" not in suggestion
    if problem.code == "missing-xla-flags-file":
        if sure:
            environ[variable] = suggestion.split("=", 1)[1]
            return f"set `{suggestion}`"
        del environ[variable]
        return f"unset {variable}"
    value = flags_lib.without_flag(environ.get(variable, ""), problem.flag)
    _set(environ, variable, value)
    if not sure:
        return f"dropped `{problem.flag}` from {variable}"
    target, text = suggestion.split("=", 1)
    for flag in flags_lib.parse_flags(text):
        value = environ.get(target, "")
        value = flags_lib.with_flag(value, flag.name, flag.value)
        _set(environ, target, value)
    return f"replaced `{problem.flag}` by `{suggestion}`"


def _set(environ, variable: str, value: str) -> None:
    if value.strip():
        environ[variable] = value
    else:
        environ.pop(variable, None)


def original(values: dict[str, str | None]) -> dict[str, str | None]:
    """`values` (the flag variables) with each variable the guard changed
    back as the user set it."""
    return {**values, **_ORIGINAL}


def strict_error() -> str | None:
    """The `XLATuner(strict=True)` error for the flags fixed at import,
    or None."""
    if not FIXES:
        return None
    return "TensorFlow would have aborted on these XLA flags:\n" + "\n".join(
        f"  {f.problem.variable}: {f.problem.message} (keras_xla {f.action})"
        for f in FIXES
    )
