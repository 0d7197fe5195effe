"""Flag hygiene for `TF_XLA_FLAGS` and `XLA_FLAGS`.

TensorFlow kills the process (exit status 1) on a flag it does not know:
`F... parse_flags_from_env.cc] Unknown flag in TF_XLA_FLAGS: --tf_xla_dump_to
=/tmp/x`, at its first op for `TF_XLA_FLAGS` (importing still works), at its
first XLA compilation for `XLA_FLAGS`. `--tf_xla_dump_to`, widely recommended,
does not exist: the HLO dump is `XLA_FLAGS=--xla_dump_to=DIR`. Also fatal:
`--noNAME`, a non-bool flag without `=VALUE`, a bad value, a value not
starting with `-` (read as a flags file) naming no file. A word not starting
with `-` silently ends parsing. `check_flags()` finds all this first.

Known flags come from the installed TensorFlow (`flag_tables`); at import
(`quick=True`) a variable whose flags are all well-known ones is checked
against the built-in table instead, without asking TensorFlow.
"""

from __future__ import annotations

import dataclasses
import difflib
import logging
import os
import re
from collections.abc import Iterable, Mapping

from keras_xla.tf_backend import flag_tables

logger = logging.getLogger(__name__)

VARIABLES = flag_tables.VARIABLES
_OTHER = {"TF_XLA_FLAGS": "XLA_FLAGS", "XLA_FLAGS": "TF_XLA_FLAGS"}
_SPACE = " \t\r\n"
_NAME = re.compile(r"[-_A-Za-z0-9]*")
_QUOTED = re.compile(r"""="((?:\\[\s\S]|[^"])*)"?|='([^']*)'?""")
_WORD = re.compile(r"[^ \t\r\n]*")
_INT = r"\s*[+-]?\d+"
_VALUES = {"bool": r"(?i)true|false|1|0", "int32": _INT, "int64": _INT}
# String flags whose parser takes only some values (measured: a value
# outside them aborts TensorFlow at its first op).
_ENUMS = {
    "tf_xla_auto_jit": (
        r"-?\d+|single-gpu\(-?\d+\)|fusible",
        "value of -1, 0, 1, 2, single-gpu(N) or fusible",
    )
}
_BOOL_WORDS = {"yes": "true", "on": "true", "no": "false", "off": "false"}
_WHEN = {"TF_XLA_FLAGS": "first op", "XLA_FLAGS": "first XLA compilation"}
_DIES = "TensorFlow aborts at its {when} ('Unknown flag in {variable}')."
# The one problem TensorFlow survives: it ignores the text.
HARMLESS = frozenset(("ignored-xla-flag-text",))
_MESSAGES = {
    "unknown-xla-flag": "`{flag}` is unknown in {variable}: " + _DIES,
    "xla-flag-wrong-variable": "`{flag}` is unknown in {variable}: " + _DIES,
    "negated-xla-flag": "`{flag}`: there is no `--no` form; " + _DIES,
    "xla-flag-missing-value": "`{flag}` needs `=VALUE` ({kind}); " + _DIES,
    "invalid-xla-flag-value": "`{flag}`: the value must be a {kind}; "
    "TensorFlow aborts at its {when} ('Flag parsing failed').",
    "ignored-xla-flag-text": "TensorFlow stops reading {variable} at `{flag}` "
    "and ignores the rest: a flag starts with `--`, with no space around `=`.",
    "missing-xla-flags-file": "`{flag}` does not start with `--`, so "
    "TensorFlow reads it as a flags file; there is none, so it aborts.",
}


@dataclasses.dataclass(frozen=True)
class Flag:
    """One flag, as TensorFlow splits it out of the variable: its `name`
    without leading dashes (`xla_dump_to`), its `value` after `=`
    (unquoted; None for `--name`) and its `raw` text as written (by
    default the canonical spelling)."""

    name: str
    value: str | None = None
    raw: str = ""

    def __post_init__(self) -> None:
        if not self.raw:
            object.__setattr__(self, "raw", _render(self.name, self.value))


@dataclasses.dataclass(frozen=True)
class FlagProblem:
    """A flag TensorFlow would abort on, or silently ignore.

    Attributes:
        variable: `"TF_XLA_FLAGS"` or `"XLA_FLAGS"`.
        flag: The offending text, as written.
        message: What is wrong, what TensorFlow does, the likely fix.
        suggestion: The likely intended setting, such as
            `XLA_FLAGS=--xla_dump_to=/tmp/x`, or None.
        code: `unknown-xla-flag`, `xla-flag-wrong-variable`,
            `negated-xla-flag`, `xla-flag-missing-value`,
            `invalid-xla-flag-value`, `ignored-xla-flag-text` or
            `missing-xla-flags-file`.
    """

    variable: str
    flag: str
    message: str
    suggestion: str | None
    code: str


def _render(name: str, value: str | None) -> str:
    if value is None:
        return f"--{name}"
    if value.startswith(("'", '"')) or any(c in _SPACE for c in value):
        escaped = value.replace("\\", "\\\\").replace('"', '\\"')
        return f'--{name}="{escaped}"'
    return f"--{name}={value}"


def _split(text: str) -> tuple[list[Flag], str]:
    """Splits as TensorFlow's ParseArgvFromString does: the flags, and the
    text from the first word that does not start with `-` (ignored)."""
    flags, i = [], len(text) - len(text.lstrip(_SPACE))
    while text[i : i + 1] == "-":
        name = _NAME.match(text, i).group()
        quoted = _QUOTED.match(text, i + len(name))
        if quoted and quoted[2] is not None:  # Single quotes: literal.
            value, end = quoted[2], quoted.end()
        elif quoted:  # Double quotes: a backslash escapes the next char.
            value, end = re.sub(r"\\([\s\S])", r"\1", quoted[1]), quoted.end()
        else:
            end = _WORD.match(text, i).end()
            name, equals, value = text[i:end].partition("=")
            value = value if equals else None
        flags.append(Flag(name.lstrip("-"), value, text[i:end]))
        i = end + len(text[end:]) - len(text[end:].lstrip(_SPACE))
    return flags, text[i:].strip(_SPACE)


def parse_flags(value: str) -> list[Flag]:
    """The flags of a `TF_XLA_FLAGS` / `XLA_FLAGS` value, split as
    TensorFlow does (`--name=value`, `--name`, `--name="quoted value"`
    with backslash escapes; up to a word that does not start with `-`),
    in order, duplicates kept (TensorFlow applies the last)."""
    return _split(value)[0]


def format_flags(flags: Iterable[Flag]) -> str:
    """Joins flags into a variable's text; inverse of `parse_flags()`."""
    return " ".join(flag.raw for flag in flags)


def without_flag(value: str, raw: str) -> str:
    """`value` without the flag written `raw` (its first occurrence),
    every other flag and any ignored text kept as written."""
    flags, ignored = _split(value)
    at = next((i for i, f in enumerate(flags) if f.raw == raw), None)
    kept = flags if at is None else flags[:at] + flags[at + 1 :]
    return " ".join(text for text in (format_flags(kept), ignored) if text)


def extensible(value: str) -> bool:
    """Whether a flag appended to `value` is read by TensorFlow with the
    rest unchanged: no quotes (TensorFlow reads an unclosed one in its own
    way, and `--a="2` with a flag after it aborts where `--a="2` alone
    does not), no flags file, and no ignored text the flag would join."""
    quoted = "'" in value or '"' in value
    flags_file = value.strip(_SPACE)[:1] not in ("", "-")
    return not (quoted or flags_file or _split(value)[1])


def with_flag(value: str, name: str, flag_value: str | None) -> str:
    """`value` with one flag set, every other flag kept as written.

    The flag's first occurrence is replaced in place and later ones are
    dropped; a new flag goes after the others (before any ignored text):
    `with_flag("--tf_xla_auto_jit=2", "tf_xla_persistent_cache_directory",
    "/c")` is `"--tf_xla_auto_jit=2 --tf_xla_persistent_cache_directory=/c"`.

    Args:
        value: The variable's current text; may be empty.
        name: The flag name, with or without the leading `--`.
        flag_value: The value, or None for the bare `--name` (bool flags).
    """
    name = name.removeprefix("--")
    if not re.fullmatch(r"\w+", name, re.ASCII):
        raise ValueError(f"Invalid flag name {name!r}: use [A-Za-z0-9_].")
    if value.strip(_SPACE)[:1] not in ("", "-"):
        raise ValueError(
            f"Cannot edit {value!r}: TensorFlow reads a value that does not "
            "start with `--` as a flags file. Put the flags in the variable."
        )
    flags, ignored = _split(value)
    kept = [flag for flag in flags if flag.name != name]
    at = next((i for i, f in enumerate(flags) if f.name == name), len(kept))
    kept.insert(at, Flag(name, flag_value))
    return " ".join(text for text in (format_flags(kept), ignored) if text)


def known_flags(variable: str) -> frozenset[str]:
    """Flag names (without `--`) the installed TensorFlow accepts in
    `variable`; the first call asks TensorFlow in child processes (a few
    seconds)."""
    if variable not in VARIABLES:
        raise ValueError(
            f"`known_flags({variable!r})`: use one of {VARIABLES}."
        )
    return frozenset(flag_tables.tables()[variable].types)


def _problem(code, variable, flag, fix=None, kind=None) -> FlagProblem:
    message = _MESSAGES[code].format(
        flag=flag, variable=variable, kind=kind, when=_WHEN[variable]
    )
    message += f" Did you mean `{fix}`?" if fix else ""
    return FlagProblem(variable, flag, message, fix, code)


def _likely(name: str, variable: str, tables) -> tuple[str, str] | None:
    """The (variable, flag) most likely meant, this variable first: the
    name itself, with `_` for `-`, `tf_` added or dropped; else a close
    spelling."""
    for var in (variable, _OTHER[variable]):
        known = tables[var].types
        names = (name, name.replace("-", "_"), "tf_" + name)
        exact = [n for n in (*names, name.removeprefix("tf_")) if n in known]
        close = exact or difflib.get_close_matches(name, known, 1, 0.8)
        if close:
            return var, close[0]
    return None


def _named(flag: Flag, types: Mapping[str, str | None]) -> bool:
    """Whether `flag` is written `--NAME` with a NAME in `types`: then its
    diagnosis needs only its type, not the rest of the table."""
    return bool(re.match(r"--[^-]", flag.raw)) and flag.name in types


def _diagnose(variable: str, flag: Flag, tables) -> FlagProblem | None:
    name, value, types = flag.name, flag.value, tables[variable].types
    if _named(flag, types):
        kind, raw = types[name], flag.raw
        if value is None and kind not in ("bool", None):
            fix = f"{variable}=--{name}=VALUE"
            return _problem("xla-flag-missing-value", variable, raw, fix, kind)
        pattern, kind = _ENUMS.get(name, (_VALUES.get(kind), kind))
        if value is not None and pattern and not re.fullmatch(pattern, value):
            word = _BOOL_WORDS.get(value.lower()) if kind == "bool" else None
            fix = word and f"{variable}={_render(name, word)}"
            return _problem("invalid-xla-flag-value", variable, raw, fix, kind)
        return None
    if name[:2] == "no" and types.get(name[2:], "") in ("bool", None):
        fix = f"{variable}=--{name[2:]}=false"
        return _problem("negated-xla-flag", variable, flag.raw, fix)
    likely = _likely(name, variable, tables)
    fix = likely and f"{likely[0]}={_render(likely[1], value)}"
    wrong = likely == (_OTHER[variable], name)
    code = "xla-flag-wrong-variable" if wrong else "unknown-xla-flag"
    # From the curated list only what is sure: a prefix no such flag has.
    prefix = "xla_" if variable == "TF_XLA_FLAGS" else "tf_"
    if fix or tables[variable].complete or name.startswith(prefix):
        return _problem(code, variable, flag.raw, fix)
    return None


def _tables(variable: str, flags: list[Flag], quick: bool) -> dict:
    """The tables to check `flags` against: the built-in ones when `quick`
    and every flag is a well-known one (the same diagnoses, no probe),
    else the installed TensorFlow's."""
    if not flags:
        return {}
    well_known = flag_tables.WELL_KNOWN[variable]
    if quick and all(_named(flag, well_known) for flag in flags):
        return flag_tables.well_known()
    return flag_tables.tables()


def _check_variable(
    variable: str, value: str, quick: bool = False
) -> list[FlagProblem]:
    text = value.strip(_SPACE)
    if text[:1] not in ("", "-"):
        if not os.path.isfile(value):
            fix = f"{variable}=--{text}" if re.match(r"\w", text) else None
            return [_problem("missing-xla-flags-file", variable, value, fix)]
        with open(value) as f:
            text = f.read()
    flags, ignored = _split(text)
    tables = _tables(variable, flags, quick)
    problems = [_diagnose(variable, flag, tables) for flag in flags]
    if ignored:
        # `--name = 2` or `--name =2`: the value is the word after `=`.
        words = ignored.lstrip("=").split() if ignored[0] == "=" else ()
        word, fix = (words or ignored.split())[0], None
        if flags and not flags[-1].value and word[0] not in "-=":
            fix = f"{variable}={_render(flags[-1].name, word)}"
        problems.append(
            _problem("ignored-xla-flag-text", variable, ignored, fix)
        )
    return [problem for problem in problems if problem is not None]


def check_flags(
    environ: Mapping[str, str] | None = None, *, quick: bool = False
) -> list[FlagProblem]:
    """Finds the flags TensorFlow would abort on, or silently ignore.

    Nothing here goes through TensorFlow's parser: it is safe before
    TensorFlow reads the variables. Never raises; failures are logged.
    E.g. `TF_XLA_FLAGS=--tf_xla_dump_to=/x` is an `unknown-xla-flag` whose
    suggestion is `XLA_FLAGS=--xla_dump_to=/x`.

    Args:
        environ: The environment to check. Defaults to `os.environ`.
        quick: Check a variable whose flags are all well-known ones
            (`flag_tables.WELL_KNOWN`, each written `--NAME`) against
            that built-in table, without asking TensorFlow for its own
            (a child process of seconds where no table is kept yet). The
            problems found are the same: such a flag's diagnosis needs
            only its type, so `--tf_xla_auto_jit=yes` is still an
            `invalid-xla-flag-value`. Another flag is checked against
            TensorFlow's table. `import keras_xla` checks this way.
            Defaults to `False`.

    Returns:
        One `FlagProblem` per problem, `TF_XLA_FLAGS` first.
    """
    environ = os.environ if environ is None else environ
    problems = []
    for variable in VARIABLES:
        try:
            value = environ.get(variable, "")
            problems += _check_variable(variable, value, quick)
        except Exception:  # Diagnostics never raise.
            logger.exception("Could not check %s.", variable)
    return problems


def validate_flags(environ: Mapping[str, str] | None = None) -> None:
    """Raises `ValueError` naming each variable, flag and likely intended
    flag if `check_flags(environ)` finds a problem."""
    problems = check_flags(environ)
    if problems:
        raise ValueError(
            "TensorFlow would abort on (or ignore) these XLA flags:\n"
            + "\n".join(f"  {p.variable}: {p.message}" for p in problems)
        )


def hlo_dump_env(
    directory: str, environ: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The environment update that dumps XLA's HLO as text to `directory`.

    Sets `--xla_dump_to=DIR` and `--xla_dump_hlo_as_text=true` in
    `XLA_FLAGS`, keeping its other flags, and drops the nonexistent
    `--tf_xla_dump_to` from `TF_XLA_FLAGS`. XLA reads `XLA_FLAGS` once, at a
    process's first compilation: give the update to a child process, or
    apply it before anything compiles.

    Args:
        directory: Where XLA writes its `module_*.txt` files.
        environ: The environment to start from. Defaults to `os.environ`.

    Returns:
        The variables to set, such as `{"XLA_FLAGS": "--xla_dump_to=/tmp/hlo
        --xla_dump_hlo_as_text=true"}`.
    """
    environ = os.environ if environ is None else environ
    xla = with_flag(environ.get("XLA_FLAGS", ""), "xla_dump_to", directory)
    update = {"XLA_FLAGS": with_flag(xla, "xla_dump_hlo_as_text", "true")}
    tf_value = environ.get("TF_XLA_FLAGS", "")
    kept = [f for f in parse_flags(tf_value) if f.name != "tf_xla_dump_to"]
    if kept != parse_flags(tf_value):
        update["TF_XLA_FLAGS"] = format_flags(kept)
    return update
