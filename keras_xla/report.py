"""The XLA report: dataclasses, JSON and a human summary.

The report is the product's memory: `XLATuner` fills it, writes it as JSON
after every epoch, and TensorBoard and the command line render it. This
module depends on the standard library only, so a report can be read and
rendered on a machine without TensorFlow.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any

SCHEMA = "keras_xla.report/1"
REPORT_FILENAME = "xla_report.json"


@dataclasses.dataclass
class JitInfo:
    """Whether XLA was asked for, whether it is really on, and why (not).

    Attributes:
        requested: What the user asked for (`True`, `False`, `"auto"` or
            `None` for "leave the model's own setting").
        enabled: Whether the train step is really compiled with XLA.
        reason: One sentence naming the cause when `enabled` differs from
            what was asked, or confirming the setting.
    """

    requested: Any
    enabled: bool
    reason: str


@dataclasses.dataclass
class Finding:
    """One diagnosed problem, with a stable `code` users can match on."""

    code: str
    severity: str
    message: str
    fix: str
    count: int = 1
    compile_seconds: float = 0.0


@dataclasses.dataclass
class Recompilation:
    """One XLA compilation after a function's first, explained.

    `input` is a readable path into the batch (`x`, `y`, `x/tokens`,
    `sample_weight`), `dim` the dimension that changed, `before` and
    `after` the closest previously compiled shape and the new one.
    """

    function: str
    epoch: int
    step: int
    input: str | None
    dim: int | None
    before: list | None
    after: list | None
    cause: str
    compile_seconds: float
    message: str
    fix: str
    changes: list = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class Compilation:
    """One XLA compilation: which function, when, on what shapes, cost.

    `started_at` is the Unix time at which the compiling call started, to
    line compilations up with a profiler trace.
    """

    function: str
    epoch: int
    step: int
    shapes: dict
    compile_seconds: float
    first: bool
    started_at: float = 0.0
    replica: int = 0
    finished_at: float = 0.0
    cache: str | None = None


@dataclasses.dataclass
class EpochStats:
    """Per-epoch figures; `compilations` counts every XLA compilation."""

    epoch: int
    steps: int
    compilations: int
    compile_seconds: float
    recompilations: int
    step_time_ms: dict
    examples_per_second: float | None
    examples_per_second_overall: float | None = None
    by_function: dict = dataclasses.field(default_factory=dict)
    compile_cache_hits: int | None = None
    compile_cache_misses: int | None = None
    jit_compile: bool | None = None


@dataclasses.dataclass
class XLAReport:
    """Everything the tuner measured in one `fit`."""

    environment: dict = dataclasses.field(default_factory=dict)
    jit: JitInfo | None = None
    epochs: list = dataclasses.field(default_factory=list)
    recompilations: list = dataclasses.field(default_factory=list)
    findings: list = dataclasses.field(default_factory=list)
    compile_log: list = dataclasses.field(default_factory=list)
    compile_cache: dict | None = None
    hlo: dict | None = None
    profile: dict | None = None
    decision: dict | None = None

    @property
    def total_compilations(self) -> int:
        return sum(e.compilations for e in self.epochs)

    @property
    def total_compile_seconds(self) -> float:
        return sum(e.compile_seconds for e in self.epochs)

    def finding_codes(self) -> list[str]:
        return [f.code for f in self.findings]

    def to_dict(self) -> dict:
        return {
            "schema": SCHEMA,
            "environment": dict(self.environment),
            "jit": dataclasses.asdict(self.jit) if self.jit else None,
            "epochs": [dataclasses.asdict(e) for e in self.epochs],
            "recompilations": [
                dataclasses.asdict(r) for r in self.recompilations
            ],
            "findings": [dataclasses.asdict(f) for f in self.findings],
            "compile_log": [dataclasses.asdict(c) for c in self.compile_log],
            "compile_cache": self.compile_cache,
            "hlo": self.hlo,
            "profile": self.profile,
            "decision": self.decision,
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, default=_json_default)

    def write(self, log_dir: str) -> str:
        """Writes `<log_dir>/xla_report.json` atomically; returns its path."""
        os.makedirs(log_dir, exist_ok=True)
        path = os.path.join(log_dir, REPORT_FILENAME)
        tmp = path + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(self.to_json())
        os.replace(tmp, path)
        return path

    @classmethod
    def from_dict(cls, data: dict) -> XLAReport:
        schema = data.get("schema")
        if schema != SCHEMA:
            raise ValueError(
                f"Unsupported report schema {schema!r}; expected {SCHEMA!r}."
            )
        jit = data.get("jit")
        return cls(
            environment=dict(data.get("environment", {})),
            jit=JitInfo(**jit) if jit else None,
            epochs=[EpochStats(**e) for e in data.get("epochs", [])],
            recompilations=[
                Recompilation(**r) for r in data.get("recompilations", [])
            ],
            findings=[Finding(**f) for f in data.get("findings", [])],
            compile_log=[Compilation(**c) for c in data.get("compile_log", [])],
            compile_cache=data.get("compile_cache"),
            hlo=data.get("hlo"),
            profile=data.get("profile"),
            decision=data.get("decision"),
        )

    @classmethod
    def load(cls, path: str) -> XLAReport:
        """Reads a report from a JSON file or from a log dir holding one."""
        if os.path.isdir(path):
            path = os.path.join(path, REPORT_FILENAME)
        with open(path, encoding="utf-8") as f:
            return cls.from_dict(json.load(f))

    def summary(self, max_findings: int = 3) -> str:
        """A short plain-text table: one row per epoch, then top findings."""
        lines = []
        if self.jit is not None:
            state = "on" if self.jit.enabled else "off"
            lines.append(f"XLA {state}: {self.jit.reason}")
        header = (
            "epoch",
            "steps",
            "compiles",
            "recompiles",
            "compile s",
            "median ms",
            "p90 ms",
            "ex/s",
        )
        rows = [header]
        for e in self.epochs:
            rows.append(
                (
                    str(e.epoch),
                    str(e.steps),
                    str(e.compilations),
                    str(e.recompilations),
                    f"{e.compile_seconds:.2f}",
                    _fmt(e.step_time_ms.get("median")),
                    _fmt(e.step_time_ms.get("p90")),
                    _fmt(e.examples_per_second, 1),
                )
            )
        lines.extend(format_table(rows))
        if self.decision and self.decision.get("status") == "decided":
            d = self.decision
            speedup = d.get("speedup_vs_default")
            lines.append(
                f"Trial: {d['winner']} won ({d['reason']}); "
                + (
                    f"{speedup:.2f}x Keras's default {d['default']}, paying "
                    f"back its compile in {d['break_even_steps']} steps."
                    if speedup
                    else "Keras's default was not a candidate."
                )
            )
        top = sorted(
            self.findings,
            key=lambda f: (f.severity != "warning", -f.compile_seconds),
        )[:max_findings]
        for f in top:
            lines.append(f"[{f.code}] {f.message} Fix: {f.fix}")
        return "\n".join(lines)

    def decision_markdown(self) -> str:
        return decision_markdown(self.decision)

    def findings_markdown(self) -> str:
        """Findings as a Markdown table (TensorBoard's text plugin renders
        Markdown)."""
        if not self.findings:
            return "No findings."
        out = ["| code | severity | count | compile s | message | fix |"]
        out.append("| --- | --- | --- | --- | --- | --- |")
        for f in self.findings:
            out.append(
                f"| `{f.code}` | {f.severity} | {f.count} | "
                f"{f.compile_seconds:.2f} | {_md(f.message)} | {_md(f.fix)} |"
            )
        return "\n".join(out)


def decision_markdown(decision: dict | None) -> str:
    """The trial's decision as Markdown: a sentence and a table of the
    candidates."""
    if not decision:
        return "No trial."
    d = decision
    lines = [
        f"**{d['status']}**: winner `{d.get('winner')}`. {_md(d['reason'])}"
    ]
    if d.get("speedup_vs_default") is not None:
        lines.append(
            f"Speedup over Keras's default (`{d['default']}`): "
            f"{d['speedup_vs_default']:.2f}x; the winner's compile pays "
            f"back in {d['break_even_steps']} steps. Trial: "
            f"{d['trial_steps']} steps, {d['trial_seconds']:.1f} s."
        )
    lines += [
        "",
        "| candidate | timed steps | median step ms | compile s |",
        "| --- | --- | --- | --- |",
    ]
    for c in d.get("candidates", []):
        lines.append(
            f"| `{c['name']}` | {c['measured_steps']} | "
            f"{_fmt(c['median_step_ms'])} | {_fmt(c['compile_seconds'])} |"
        )
    return "\n".join(lines)


def format_table(rows: list[tuple[str, ...]]) -> list[str]:
    """Left-aligns the first column and right-aligns the others."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = []
    for r in rows:
        cells = [r[0].ljust(widths[0])]
        cells += [c.rjust(w) for c, w in zip(r[1:], widths[1:])]
        lines.append("  ".join(cells).rstrip())
    return lines


def _fmt(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _md(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _json_default(obj: Any) -> Any:
    # numpy scalars and tuples that slipped in: make them plain JSON.
    if hasattr(obj, "item"):
        return obj.item()
    if isinstance(obj, (set, tuple)):
        return list(obj)
    raise TypeError(f"Object of type {type(obj).__name__} is not JSON")
