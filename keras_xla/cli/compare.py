"""`keras-xla run --compare`: which backend and XLA setting trains a
script fastest here.

`--compare backend=tensorflow,jax jit=on,off` runs the script once per
configuration (every combination of the axes' values), each in its own
`keras-xla run` process (`KERAS_BACKEND` set before Keras is imported),
plus the script's own default (no override) to measure against. A round
runs every configuration once, alternate rounds in reverse order so that
none always goes first (the first process of a comparison starts cold);
`--rounds` rounds (2 by default: each configuration once early, once
late), and more, up to `MAX_ROUNDS`, while the fastest is not clearly
ahead (`settled`). The table, the answer and the JSON (`xla_compare.json`
in the log dir, `--json`) say which configuration trained the script's
steps fastest, by how much against its default, and why. A
configuration that cannot run (a backend not installed, a
TensorFlow-only train step on JAX) is a row that says why.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
from typing import Any

from keras_xla.cli.run import USAGE_ERROR, tell
from keras_xla.cli.tuner_flags import flag
from keras_xla.core import verdict as verdicts
from keras_xla.core.report import XLAReport

AXES = {"backend": ("tensorflow", "jax"), "jit": ("on", "off", "auto")}
BACKEND_NAMES = {"tensorflow": "TensorFlow", "jax": "JAX"}
JIT_NAMES = {"on": "with XLA", "off": "without XLA", "auto": "XLA auto"}
COMPARE_FILENAME = "xla_compare.json"
# The command's own stderr lines (verdicts, progress), and how many of
# the script's last lines say why a run failed.
OWN_LINE = "keras-xla run:"
LAST_LINES = 2
# One round is enough when the fastest beats the next by this share.
CLEAR_MARGIN = 0.10
MAX_ROUNDS = 3


@dataclasses.dataclass(frozen=True)
class Configuration:
    """One way to run the script: a backend and an XLA setting (None:
    the script's own)."""

    backend: str | None = None
    jit: str | None = None

    @property
    def default(self) -> bool:
        return self.backend is None and self.jit is None

    @property
    def label(self) -> str:
        if self.default:
            return "the script's default"
        names = BACKEND_NAMES.get(self.backend), JIT_NAMES.get(self.jit)
        return " ".join(name for name in names if name)

    @property
    def slug(self) -> str:
        if self.default:
            return "default"
        fields = dataclasses.asdict(self).items()
        return "-".join(f"{k}-{v}" for k, v in fields if v)


def parse_axes(items: list[str]) -> dict[str, tuple[str, ...]]:
    """`["backend=tensorflow,jax", "jit=on,off"]` as axes; `ValueError`
    naming the item and the choices."""
    axes: dict[str, tuple[str, ...]] = {}
    for item in items:
        name, _, values = item.partition("=")
        if name not in AXES:
            raise ValueError(
                f"--compare {item}: compare by {' or '.join(AXES)} "
                "(e.g. backend=tensorflow,jax jit=on,off)."
            )
        chosen = tuple(v.strip() for v in values.split(",") if v.strip())
        wrong = [v for v in chosen if v not in AXES[name]]
        if not chosen or wrong:
            raise ValueError(
                f"--compare {item}: {name} takes "
                f"{', '.join(AXES[name])} (comma-separated)."
            )
        axes[name] = tuple(dict.fromkeys(chosen))
    return axes


def configurations(axes: dict[str, tuple[str, ...]]) -> list[Configuration]:
    """The script's default, then every combination of the axes."""
    combos = itertools.product(*axes.values())
    configs = [Configuration(**dict(zip(axes, c))) for c in combos]
    return [Configuration()] + [c for c in configs if not c.default]


def command(
    config: Configuration,
    jit: str,
    passed: list[str],
    script: list[str],
    log_dir: str,
) -> list[str]:
    """The `keras-xla run` command of one configuration (`script` its
    script's part), its result file `{result}`; `jit` is the
    `--jit-compile` of a configuration without its own (the user's flag,
    else `none`: the tuner keeps the script's setting)."""
    out = [sys.executable, "-m", "keras_xla", "run", *passed]
    out += ["--log-dir", os.path.join(log_dir, config.slug)]
    out += ["--result", "{result}"]
    out += ["--jit-compile", config.jit or jit]  # on/off: the flag's words
    return out + script


def run_once(config: Configuration, argv: list[str]) -> dict:
    """Runs one configuration (the user's environment, with its backend);
    its result (`cli.run.run_script`'s JSON), its exit code, and the last
    lines the script printed on stderr (the command's own lines left out:
    they are verdicts, not failures)."""
    from keras_xla import backends

    env = backends.user_environment()
    if config.backend is not None:
        env["KERAS_BACKEND"] = config.backend
    with tempfile.TemporaryDirectory(prefix="keras_xla_compare_") as tmp:
        path = os.path.join(tmp, "result.json")
        argv = [path if a == "{result}" else a for a in argv]
        done = subprocess.run(
            argv, env=env, capture_output=True, text=True, check=False
        )
        try:
            with open(path, encoding="utf-8") as f:
                result = json.load(f)
        except (OSError, ValueError):
            result = {"code": done.returncode, "error": None, "fits": []}
    lines = [
        line.rstrip()
        for line in done.stderr.splitlines()
        if line.strip() and not line.startswith(OWN_LINE)
    ]
    result["code"] = done.returncode
    result["last_lines"] = lines[-LAST_LINES:]
    if not result.get("error"):
        # A traceback printed before the result was written (or none).
        result["error"] = next(
            (line for line in reversed(lines) if _exception_line(line)), None
        )
    return result


def _exception_line(line: str) -> bool:
    """Whether `line` is a traceback's last (`SomeError: message`)."""
    head = line.split(":", 1)[0]
    return head.endswith(("Error", "Exception")) and " " not in head


def completed(fits: list[dict]) -> list[dict]:
    """The fits that returned (a fit that raised has no time)."""
    return [f for f in fits if f.get("seconds") is not None]


def failure(result: dict) -> str:
    """Why a run completed no fit: the script's exception, else its exit
    code and last lines, else that it ran no fit."""
    if result["code"] == 0 and not result.get("fits"):
        return "no fit() ran"
    shown = result.get("error") or " / ".join(result.get("last_lines") or [])
    tail = f": {shown}" if shown else ""
    if result["code"] == 0:
        return "no fit() completed" + tail
    return f"exit code {result['code']}" + tail


def row(
    config: Configuration, results: list[dict], default: bool = False
) -> dict:
    """A configuration's row from its rounds' results. Every round whose
    fits completed counts, whatever the script's exit code: fit seconds
    and step time are medians over them, the step's range spans all of
    theirs (the rest is the last one's). Where no round completed a fit,
    the row says why (`failure`). `default`: the script's default ran as
    this configuration."""
    trained = [r for r in results if completed(r["fits"])]
    out: dict[str, Any] = {
        "configuration": config.label,
        "backend": config.backend,
        "jit": config.jit,
        "default": config.default or default,
        "rounds": len(trained) or len(results),
        "ok": bool(trained),
        "exit_codes": sorted({r["code"] for r in results}),
        "why": None,
    }
    if not trained:
        out["why"] = failure(results[-1])
        return out
    summaries = [_summary(completed(r["fits"])) for r in trained]
    seconds = [s["seconds"] for s in summaries]
    out.update(summaries[-1])
    steps_ms = [s["step_ms"] for s in summaries if s["step_ms"] is not None]
    out["step_ms"] = statistics.median(steps_ms) if steps_ms else None
    ranges = [s["step_ms_range"] for s in summaries if s["step_ms_range"]]
    out["step_ms_range"] = (
        [min(r[0] for r in ranges), max(r[1] for r in ranges)]
        if ranges
        else None
    )
    out["seconds"] = statistics.median(seconds)
    out["seconds_range"] = [min(seconds), max(seconds)]
    return out


def _summary(fits: list[dict]) -> dict:
    """One run's figures over its fits: times, steps and compilations
    summed; the step time and verdict of its longest fit."""
    longest = max(fits, key=lambda f: f["steps"])
    return {
        "seconds": round(sum(f["seconds"] for f in fits), 3),
        "steps": sum(f["steps"] for f in fits),
        "fits": len(fits),
        "compilations": sum(f["compilations"] for f in fits),
        "compile_seconds": round(sum(f["compile_seconds"] for f in fits), 3),
        "step_ms": longest["step_ms"],
        "step_ms_range": longest["step_ms_range"],
        "log_dirs": [f["log_dir"] for f in fits],
        "report_dir": longest["log_dir"],
        "dispatch_ms_median": longest["dispatch_ms_median"],
        "input_ms_median": longest["input_ms_median"],
        "backend_seen": longest["backend"],
        "xla": longest["xla"],
        "codes": longest["codes"],
        "headline": longest["headline"],
    }


def against_no_xla(rows: list[dict]) -> None:
    """Each XLA row's verdict against the same backend's no-XLA row of
    the table, where there is one: the tuner's verdict of the row's
    longest fit rebuilt with that row's step as its baseline
    (`core.verdict.against_run`; the tuner's own, kept as
    `tuner_headline`, had no baseline: a comparison runs without the
    tuner's windows)."""
    for r in rows:
        where = r.pop("report_dir", None)
        if not (r["ok"] and r.get("xla") and where):
            continue
        plain = [
            o
            for o in rows
            if o["ok"]
            and not o.get("xla")
            and o.get("step_ms")
            and o.get("backend_seen") == r.get("backend_seen")
        ]
        if not plain:
            continue
        # A configuration of its own before the script's default.
        other = min(plain, key=lambda o: o["default"])
        try:
            report = XLAReport.load(where)
        except (OSError, ValueError):
            continue  # the tuner's own verdict stays
        measured = verdicts.against_run(
            report, other["step_ms"], other["steps"], r.get("step_ms")
        )
        r["tuner_headline"] = r["headline"]
        r["headline"] = (
            f"{measured.verdict.headline} (baseline: this table's "
            f"{_name(other)} row)"
        )


def ranked(rows: list[dict]) -> list[dict]:
    """The rows that trained, fastest first."""
    return sorted((r for r in rows if r["ok"]), key=lambda r: r["seconds"])


def separated(fast: dict, slow: dict) -> bool:
    """Whether `fast` trained the script clearly faster than `slow`: by
    `CLEAR_MARGIN` where either ran one round, by ranges that do not
    overlap where both ran more."""
    if min(fast["rounds"], slow["rounds"]) == 1:
        return fast["seconds"] * (1 + CLEAR_MARGIN) < slow["seconds"]
    return fast["seconds_range"][1] < slow["seconds_range"][0]


def settled(rows: list[dict]) -> bool:
    """Whether the fastest is clearly ahead of the next."""
    order = ranked(rows)
    return len(order) < 2 or separated(order[0], order[1])


def answer(rows: list[dict]) -> str:
    """The fastest configuration here, by how much against the script's
    default, and the measured reason; a lead is named only where the
    rows' times separate, else they are indistinguishable here."""
    order = ranked(rows)
    if not order:
        return "No configuration trained the script: see each row's reason."
    best, steps = order[0], order[0]["steps"]
    # The configurations indistinguishable from the fastest.
    leaders = [r for r in order if r is best or not separated(best, r)]
    default = next((r for r in rows if r["default"]), None)
    others = [r for r in leaders if r is not default]
    if default in leaders and not others:
        return (
            f"The script's default ({_name(default)}) is the fastest here "
            f"for {steps} steps: {default['seconds']:.2f} s."
        )
    if default in leaders:
        return (
            f"The script's default ({_name(default)}, "
            f"{default['seconds']:.2f} s) is as fast as any here for "
            f"{steps} steps: {_listed(others)} "
            f"{'is' if len(others) == 1 else 'are'} indistinguishable "
            "from it (their times overlap)."
        )
    if len(leaders) == 1:
        head = (
            f"Fastest here for {steps} steps: {_name(best)}, "
            f"{best['seconds']:.2f} s"
        )
    else:
        head = (
            f"Fastest here for {steps} steps, indistinguishable from each "
            f"other: {_listed(leaders)}"
        )
    if default is None or not default["ok"]:
        return head + " (the script's default did not train: see its row)."
    ratio = default["seconds"] / best["seconds"]
    who = "," if len(leaders) == 1 else f"; {_name(best)} is"
    return (
        f"{head}{who} {ratio:.2f}x faster than the script's default "
        f"({_name(default)}, {default['seconds']:.2f} s). "
    ) + _reason(best, default)


def _listed(rows: list[dict]) -> str:
    """`JAX with XLA (1.00 s) and JAX without XLA (1.05 s)`."""
    names = [f"{_name(r)} ({r['seconds']:.2f} s)" for r in rows]
    if len(names) == 1:
        return names[0]
    return ", ".join(names[:-1]) + " and " + names[-1]


def _name(r: dict) -> str:
    """A row's configuration as it ran (the default's backend and XLA
    setting as measured)."""
    backend = BACKEND_NAMES.get(r.get("backend_seen") or "", "?")
    return f"{backend} {'with' if r.get('xla') else 'without'} XLA"


def _reason(best: dict, default: dict) -> str:
    """Why the faster ran faster: its step time against the default's,
    what held the default back, and the compiling."""
    parts = []
    fast, slow = best.get("step_ms"), default.get("step_ms")
    if fast and slow and fast > slow:
        if best["compile_seconds"] < default["compile_seconds"]:
            return (
                f"Its steps are slower ({fast:.2f} ms against {slow:.2f} "
                f"ms), but it compiled for {best['compile_seconds']:.2f} s "
                f"where the default compiled for "
                f"{default['compile_seconds']:.2f} s: over {best['steps']} "
                "steps the default's steps never won back its start."
            )
        return (
            f"Its steps are not faster ({fast:.2f} ms against {slow:.2f} "
            "ms) and it compiled no less: the difference lies outside the "
            "timed steps (start-up, tracing, evaluation)."
        )
    codes = default.get("codes") or []
    dispatch_ms = default.get("dispatch_ms_median")
    input_ms = default.get("input_ms_median")
    if "dispatch-bound-steps" in codes and dispatch_ms:
        parts.append(
            f"{_name(default)} is dispatch-bound: launching a step takes "
            f"{dispatch_ms:.2f} ms of its {default['step_ms']:.2f} ms"
        )
    elif "input-bound" in codes and input_ms:
        parts.append(
            f"{_name(default)} waits {input_ms:.2f} ms a step for its input"
        )
    if fast and slow:
        parts.append(
            f"{_name(best)} runs a step in {best['step_ms']:.2f} ms against "
            f"{default['step_ms']:.2f} ms"
        )
    if best.get("compile_seconds"):
        parts.append(f"its compiling took {best['compile_seconds']:.2f} s")
    return "; ".join(parts) + "." if parts else ""


def table(rows: list[dict]) -> list[str]:
    """The comparison as text lines: a row per configuration, with the
    exit codes of its rounds."""
    head = (
        f"{'configuration':<48} {'rounds':>6} {'exit':>4} {'fits':>4} "
        f"{'steps':>6} {'compiles':>8} {'compile s':>9} "
        f"{'step ms (range)':>20} {'fit s':>8}  verdict"
    )
    lines = [head, "-" * len(head)]
    for r in rows:
        start = (
            f"{r['configuration']:<48} {r['rounds']:>6} "
            f"{','.join(map(str, r['exit_codes'])):>4}"
        )
        if not r["ok"]:
            lines.append(f"{start}  cannot run: {r['why']}")
            continue
        step = "-"
        if r.get("step_ms") is not None:
            low, high = r["step_ms_range"]
            step = f"{r['step_ms']:.2f} ({low:.2f}-{high:.2f})"
        lines.append(
            f"{start} {r['fits']:>4} {r['steps']:>6} "
            f"{r['compilations']:>8} {r['compile_seconds']:>9.2f} "
            f"{step:>20} {r['seconds']:>8.2f}  {r['headline'] or ''}"
        )
    return lines


def shown_label(r: dict) -> str:
    """A row's configuration as the table shows it: the script's default
    named by what it ran as, or the row it was folded into marked as
    the default."""
    if not r["default"]:
        return r["configuration"]
    if r["backend"] is None and r["jit"] is None:
        return r["configuration"] + (f" ({_name(r)})" if r["ok"] else "")
    return f"{r['configuration']} (the script's default)"


def twin(configs: list[Configuration], result: dict) -> Configuration | None:
    """The configuration the script's default ran as (its longest
    completed fit's backend and XLA setting), where the axes hold it:
    the default is then that configuration's run, not a row of its own.
    `auto` is a trial, never the same as a default."""
    fits = completed(result["fits"])
    if not fits:
        return None
    ran = max(fits, key=lambda f: f["steps"])
    jit, backend = "on" if ran["xla"] else "off", ran["backend"]
    found = [
        c for c in configs if not c.default and c.backend in (None, backend)
    ]
    return next((c for c in found if c.jit in (None, jit)), None)


def passed_options(given: dict, steps: int | None) -> list[str]:
    """The tuner's flags (and `--steps`) as each run gets them."""
    out = []
    for name, value in given.items():
        if name == "jit_compile":
            continue  # the configuration's
        if isinstance(value, bool):
            out.append(flag(name) if value else "--no-" + flag(name)[2:])
        elif isinstance(value, tuple):
            out += [flag(name), ",".join(map(str, value))]
        else:
            out += [flag(name), str(value)]
    if steps is not None:
        out += ["--steps", str(steps)]
    return out


def main(args, given: dict, target: str, script_args: list) -> int:
    """Runs the comparison; prints the table and the answer (or JSON);
    returns 0, or 2 for a bad `--compare`."""
    try:
        axes = parse_axes(args.compare)
    except ValueError as error:
        tell(str(error))
        return USAGE_ERROR
    configs = configurations(axes)
    script = [target, *script_args]
    if args.module is not None:
        script.insert(0, "-m")
    # Each configuration is measured whole: the tuner's own no-XLA
    # baseline windows would only slow the XLA runs down (the no-XLA
    # configurations are runs of their own), unless asked for.
    given = {"baseline": False, **given}
    passed = passed_options(given, args.steps)
    jit = given.get("jit_compile")
    jit = "none" if jit is None else str(jit).lower()
    results: dict[Configuration, list[dict]] = {c: [] for c in configs}
    default = configs[0]  # the script's own: a row unless it is another
    rows: list[dict] = []
    for round_ in range(MAX_ROUNDS):
        order = configs[:] if round_ % 2 == 0 else configs[::-1]
        for config in order:
            if len(results[config]) > round_:
                continue  # the script's default ran as this one
            argv = command(config, jit, passed, script, args.log_dir)
            result = run_once(config, argv)
            tell(f"round {round_ + 1}: {config.label} done")
            same = twin(configs, result) if config.default else None
            if same is None:
                results[config].append(result)
                continue
            # Never a configuration against itself: the default's run is
            # a run of the configuration it equals, marked the default.
            tell(f"the script's default is {same.label}")
            results[same].append(result)
            configs.remove(config)
            default = same
        rows = [row(c, results[c], c == default) for c in configs]
        if round_ + 1 >= args.rounds and settled(rows):
            break
    against_no_xla(rows)
    for r in rows:
        r["configuration"] = shown_label(r)
        # Each fit's TensorBoard run, as named under the log dir.
        r["runs"] = [
            os.path.join(os.path.relpath(d, args.log_dir), "train")
            for d in r.pop("log_dirs", None) or []
            if d
        ]
    comparison = {
        "script": target,
        "args": list(script_args),
        "axes": {k: list(v) for k, v in axes.items()},
        "rows": rows,
        "answer": answer(rows),
    }
    write(args.log_dir, comparison)
    if args.json:
        print(json.dumps(comparison, indent=2))
    else:
        print(*table(rows), "", comparison["answer"], sep="\n")
    return 0


def write(log_dir: str, comparison: dict) -> None:
    """The comparison beside its runs: `xla_compare.json`, and for the
    XLA tab its own TensorBoard run (`comparison`, tag `xla/compare`). A
    failure to write costs only the file."""
    from keras_xla.core import files, summaries

    text = json.dumps(comparison, indent=2)
    try:
        os.makedirs(log_dir, exist_ok=True)
        files.write_whole(os.path.join(log_dir, COMPARE_FILENAME), text)
        writer = summaries.EventWriter(log_dir, summaries.COMPARISON_RUN)
        writer.write_report(0, text, summaries.COMPARE_TAG)
        writer.close()
    except OSError as error:
        tell(f"the comparison was not written: {error}")
