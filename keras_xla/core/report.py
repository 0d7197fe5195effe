"""The XLA report: dataclasses, JSON and a human summary.

The report is the product's memory: `XLATuner` fills it, writes it as JSON
after every epoch, and TensorBoard and the command line render it. This
module depends on the standard library only, so a report can be read and
rendered on a machine without TensorFlow.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
from typing import Any

from keras_xla.core import figures, files, reading

# The sections are the report's names too: modules import them from here.
from keras_xla.core.sections import (  # noqa: F401
    BaselineSection,
    CandidateResult,
    ClusteringSection,
    CompileCacheSection,
    Decision,
    GuardSection,
    HloSection,
    ProfileSection,
    Section,
    Verdict,
)

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
        kept: After the fit: `True` if the model keeps the tuner's setting
            (`XLATuner(keep=True)`), `False` if it was put back as the
            user compiled it; `None` while the fit runs.
    """

    requested: Any
    enabled: bool
    reason: str
    kept: bool | None = None


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
    # The compiled program's fingerprint (its HLO's; the same program
    # has the same one in every process), where the backend gave one.
    fingerprint: str | None = None
    # Each input's dtype, by path (None: not recorded).
    dtypes: dict | None = None
    # The program's memory as XLA assigned it (arguments, outputs and
    # temporaries, in bytes; None: the backend could not read it).
    program_bytes: int | None = None


@dataclasses.dataclass
class _DeclaredEpochStats:
    """An epoch's figures (`core.figures`, which measures them): these
    fields, and one `float | None` field (None: not measured) for each
    other figure the registry keeps in the epoch (`dispatch_ms_median`,
    `input_ms_median`, `input_share`, `tuner_ms_median`, ...).
    `compilations` counts every XLA compilation."""

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
    # Train calls that stood out, each with what explains it
    # (`core.spikes`), and the seconds nothing explains.
    spikes: list = dataclasses.field(default_factory=list)
    unexplained_seconds: float = 0.0


# A figure declared in the registry alone gets its field here.
_DECLARED = {f.name for f in dataclasses.fields(_DeclaredEpochStats)}
EpochStats = dataclasses.make_dataclass(
    "EpochStats",
    [
        (key, "float | None", dataclasses.field(default=None))
        for key in figures.KEPT
        if key not in _DECLARED
    ],
    bases=(_DeclaredEpochStats,),
    namespace={"__module__": __name__, "__doc__": _DeclaredEpochStats.__doc__},
)


# The report's lists of rows and its optional sections, by JSON key.
ROWS = {
    "epochs": EpochStats,
    "recompilations": Recompilation,
    "findings": Finding,
    "compile_log": Compilation,
}
SECTIONS = {
    "compile_cache": CompileCacheSection,
    "clustering": ClusteringSection,
    "hlo": HloSection,
    "profile": ProfileSection,
    "decision": Decision,
    "baseline": BaselineSection,
    "guard": GuardSection,
    "verdict": Verdict,
}


@dataclasses.dataclass
class XLAReport:
    """Everything the tuner measured in one `fit`."""

    environment: dict = dataclasses.field(default_factory=dict)
    jit: JitInfo | None = None
    epochs: list = dataclasses.field(default_factory=list)
    recompilations: list = dataclasses.field(default_factory=list)
    findings: list = dataclasses.field(default_factory=list)
    compile_log: list = dataclasses.field(default_factory=list)
    # XLA compilations of the fit's step functions outside its own steps
    # (an evaluate() between fits, a callback's own evaluate): function,
    # shapes, replica, and when the fit found them. Not in any epoch.
    outside_compilations: list = dataclasses.field(default_factory=list)
    compile_cache: CompileCacheSection | None = None
    clustering: ClusteringSection | None = None
    hlo: HloSection | None = None
    profile: ProfileSection | None = None
    decision: Decision | None = None
    baseline: BaselineSection | None = None
    guard: GuardSection | None = None
    verdict: Verdict | None = None
    # Which worker of a job wrote it (`core.workers.Worker`'s fields, and
    # `finished` once its training ended); None outside a multi-worker job.
    worker: dict | None = None
    # Whether this report has written its file (a later fit archives it).
    _written: bool = dataclasses.field(default=False, repr=False, compare=False)
    # What reading its JSON left out (`from_dict`); never written.
    skipped: list = dataclasses.field(
        default_factory=list, repr=False, compare=False
    )

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
            **{
                key: [dataclasses.asdict(row) for row in getattr(self, key)]
                for key in ROWS
            },
            "outside_compilations": list(self.outside_compilations),
            "worker": dict(self.worker) if self.worker is not None else None,
            **{
                name: section.to_dict() if section is not None else None
                for name, section in self.sections().items()
            },
        }

    def sections(self) -> dict[str, Section | None]:
        """The optional sections, by their JSON key."""
        return {name: getattr(self, name) for name in SECTIONS}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, default=_json_default)

    def write(self, log_dir: str) -> str:
        """Writes `<log_dir>/xla_report.json` atomically; returns its path.
        The first write of this report keeps an earlier fit's file
        (`archive`)."""
        if not self._written:
            self.archive(log_dir)
            self._written = True
        os.makedirs(log_dir, exist_ok=True)
        path = os.path.join(log_dir, REPORT_FILENAME)
        return files.write_whole(path, self.to_json())

    @staticmethod
    def archive(log_dir: str) -> str | None:
        """Keeps an earlier fit's `<log_dir>/xla_report.json` as
        `xla_report.<n>.json`, n one more than the highest kept (1, 2, ...
        in fit order, also after one was deleted), so a new fit writing
        to the same log dir loses no history; returns the new path, or
        None when there was nothing to keep."""
        path = os.path.join(log_dir, REPORT_FILENAME)
        if not os.path.isfile(path):
            return None
        stem, ext = os.path.splitext(REPORT_FILENAME)
        numbered = re.compile(rf"{re.escape(stem)}\.([0-9]+){re.escape(ext)}")
        while True:
            found = (numbered.fullmatch(name) for name in os.listdir(log_dir))
            n = 1 + max((int(m.group(1)) for m in found if m), default=0)
            kept = os.path.join(log_dir, f"{stem}.{n}{ext}")
            try:
                # A link never replaces a name another process just kept.
                os.link(path, kept, follow_symlinks=False)
            except FileExistsError:
                continue
            except FileNotFoundError:
                return None  # Another process kept it first.
            except OSError:  # No hard links here.
                os.replace(path, kept)
                return kept
            with contextlib.suppress(OSError):
                if os.path.samestat(os.lstat(path), os.lstat(kept)):
                    os.unlink(path)
            return kept

    @classmethod
    def from_dict(cls, data: dict) -> XLAReport:
        """The report from its JSON, read as far as it can be
        (`keras_xla.core.reading`): what was left out is in `skipped`.
        Raises `ValueError` for what is not a report of this schema."""
        if not isinstance(data, dict):
            raise ValueError("the JSON is not an object")
        schema = data.get("schema")
        if schema != SCHEMA:
            raise ValueError(
                f"Unsupported report schema {schema!r}; expected {SCHEMA!r}."
            )
        known = {"schema", "environment", "jit", *ROWS, *SECTIONS}
        known |= {"outside_compilations", "worker"}
        skipped = [f"{k} (unknown)" for k in data if k not in known]

        def of_type(key: str, kind: type, what: str) -> Any:
            value = data.get(key)
            if value is not None and not isinstance(value, kind):
                skipped.append(f"{key} (not {what})")
                return None
            return value

        environment = of_type("environment", dict, "an object")
        worker = of_type("worker", dict, "an object")
        outside = of_type("outside_compilations", list, "a list")
        return cls(
            environment=dict(environment or {}),
            jit=reading.read(JitInfo, data.get("jit"), "jit", skipped),
            **{
                key: reading.read_rows(row, data.get(key), key, skipped)
                for key, row in ROWS.items()
            },
            outside_compilations=list(outside or []),
            worker=dict(worker) if worker is not None else None,
            **{
                name: section.from_dict(data.get(name), skipped, name)
                for name, section in SECTIONS.items()
            },
            skipped=skipped,
        )

    @classmethod
    def load(cls, path: str) -> XLAReport:
        """Reads a report from a JSON file or from a log dir holding one."""
        if os.path.isdir(path):
            path = os.path.join(path, REPORT_FILENAME)
        with open(path, encoding="utf-8") as f:
            return cls.from_dict(reading.parse(f.read()))

    def summary(self, max_findings: int = 3) -> str:
        """A short plain-text table: one row per epoch, then top findings
        (`keras_xla.core.render.summary`)."""
        from keras_xla.core import render

        return render.summary(self, max_findings)

    def findings_markdown(self) -> str:
        from keras_xla.core import render

        return render.findings_markdown(self.findings)


def _json_default(obj: Any) -> Any:
    # numpy scalars and tuples that slipped in: make them plain JSON.
    if hasattr(obj, "item"):
        return obj.item()
    if isinstance(obj, (set, tuple)):
        return list(obj)
    raise TypeError(f"Object of type {type(obj).__name__} is not JSON")
