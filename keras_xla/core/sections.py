"""The report's typed sections (`XLAReport.sections`).

Pure logic: nothing here imports TensorFlow or Keras.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from keras_xla.core import reading


class Section:
    """A typed report section that still reads like the dict it was in
    the first version (`report.hlo["fusion_ratio"]`, `.get(key)`)."""

    def __getitem__(self, key: str) -> Any:
        if key not in {f.name for f in dataclasses.fields(self)}:
            raise KeyError(key)
        return getattr(self, key)

    def get(self, key: str, default: Any = None) -> Any:
        try:
            return self[key]
        except KeyError:
            return default

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(
        cls, data: dict | None, skipped: list | None = None, where: str = ""
    ):
        """The section from its JSON, read as far as it can be
        (`core.reading`); what was left out is noted in `skipped`."""
        skipped = [] if skipped is None else skipped
        return reading.read(cls, data, where or cls.__name__, skipped)


@dataclasses.dataclass
class ClusteringSection(Section):
    """What compiles with XLA, and what auto-clustering does.

    Attributes:
        mode: `"jit_compile"` (the whole step), `"auto-clustering"`
            (clusters of a non-XLA step) or `"off"`.
        requested: Whether auto-clustering is asked for (`set_jit`,
            `--tf_xla_auto_jit`).
        active: Whether it acts on this machine.
        source: What asked for it (or kept it off).
        reason: Why it is inactive when requested.
        clusters: Under auto-clustering, compilations per cluster.
        ops_in_clusters: Under auto-clustering, how many of the train
            step's TensorFlow ops ran inside XLA clusters.
        step_ops: How many ops the traced train step has (0: unknown).
    """

    mode: str
    requested: bool
    active: bool
    source: str
    reason: str = ""
    clusters: dict = dataclasses.field(default_factory=dict)
    ops_in_clusters: int = 0
    step_ops: int = 0

    @property
    def share(self) -> float | None:
        """The share of the train step's ops under XLA, if known."""
        return self.ops_in_clusters / self.step_ops if self.step_ops else None


@dataclasses.dataclass
class CompileCacheSection(Section):
    """The persistent compile cache in this fit: where, whether it was in
    force, and what its hits saved."""

    directory: str
    active: bool
    entries_at_start: int
    hits: int = 0
    misses: int = 0
    seconds_saved: float | None = None
    miss_median_seconds: float | None = None
    hit_median_seconds: float | None = None


@dataclasses.dataclass
class HloSection(Section):
    """The optimized HLO of the train step for one steady signature.

    `source` is where the module came from (`"compile ledger"`: the one
    XLA ran, at no cost; `"compiled again"`), `module` the path of the
    saved `HloModuleProto`, `text` of the HLO text (compiled again only).
    """

    epoch: int
    shapes: dict
    analysis_seconds: float
    kernels_per_step: int
    fusions: int
    fusion_ratio: float
    converts: int
    unfused_converts: int
    flops_per_step: int
    largest_unfused: list
    achieved_tflops: float | None
    peak_tflops: float | None
    utilization: float | None
    text: str | None = None
    module: str | None = None
    source: str | None = None


@dataclasses.dataclass
class ProfileSection(Section):
    """A profiler window: its steps, its trace files, and the compilations
    the profiler and the tuner each saw in it."""

    steps: list
    directory: str
    files: list
    profiler_compilations: int
    profiler_compile_seconds: list
    tuner_compilations: int | None = None


@dataclasses.dataclass
class CandidateResult(Section):
    """One candidate of the XLA/precision trial, as measured."""

    name: str
    jit_compile: bool
    policy: str
    measured_steps: int = 0
    median_step_ms: float | None = None
    compile_seconds: float | None = None
    # Given no more windows after this many trial steps (it was clearly
    # slower), and why.
    dropped_after_steps: int | None = None
    dropped_because: str | None = None


@dataclasses.dataclass
class Decision(Section):
    """What the XLA/precision trial decided, and on what measurements.

    `status` is `decided`, `reused` (a second fit kept the first fit's
    winner), `remembered` (an earlier run's winner for the same model,
    inputs, hardware and versions), `single-candidate` or `skipped`
    (`winner` is then None)."""

    status: str
    winner: str | None
    reason: str
    candidates: list = dataclasses.field(default_factory=list)
    default: str | None = None
    trial_steps: int | None = None
    trial_seconds: float | None = None
    speedup_vs_default: float | None = None
    break_even_steps: int | None = None
    # The speedup's range from the windows' spread (the default's windows
    # against the winner's, `auto.trial.speedup_range`).
    speedup_low: float | None = None
    speedup_high: float | None = None
    # What the trial cost beyond a run on the winner alone: the sum of
    # its first calls (traces, XLA compilations) beyond the one that run
    # makes and the slower windows' time; and what the winner saves
    # against Keras's default over the rest of the run.
    trial_cost_seconds: float | None = None
    saving_seconds: float | None = None
    first_call_seconds: float | None = None
    slow_window_seconds: float | None = None

    @classmethod
    def from_dict(
        cls, data: dict | None, skipped: list | None = None, where: str = ""
    ):
        skipped = [] if skipped is None else skipped
        where = where or "decision"
        decision = super().from_dict(data, skipped, where)
        if decision is not None:
            rows = decision.candidates
            decision.candidates = reading.read_rows(
                CandidateResult, rows, f"{where}.candidates", skipped
            )
        return decision


@dataclasses.dataclass
class BaselineSection(Section):
    """The no-XLA baseline: real training steps without XLA, in windows
    interleaved with XLA's, same weights and precision, timed by one rule
    (each window's first call, and any call that traced or compiled, left
    out; each side's first window too where two more ran, as settling).
    `steps` are the timed no-XLA steps of `run_steps` run that the median
    rests on.
    `window_seconds` is the no-XLA windows' wall time; `cost_seconds` what
    they cost beyond training the same steps with XLA (the no-XLA step
    function's first call beyond a step, `trace_seconds`, plus the steps'
    difference; negative where XLA is the slower); `reason` says why there
    is none. The no-XLA function calls the train step XLA's traced, so its
    first call builds its graph and traces nothing (the field's name is
    from when it traced the step again)."""

    steps: int = 0
    no_xla_step_ms: float | None = None
    xla_step_ms: float | None = None
    cost_seconds: float = 0.0
    reason: str = ""
    run_steps: int = 0
    window_seconds: float = 0.0
    trace_seconds: float | None = None
    # The speedup's range from the windows' spread (`auto.trial.
    # speedup_range`), the rounds of windows, and the `[epoch, step]` of
    # the first and last step the windows ran.
    speedup_low: float | None = None
    speedup_high: float | None = None
    rounds: int = 0
    span: list = dataclasses.field(default_factory=list)
    # Each side's first windows, left out of the medians and the range
    # (the step functions were still settling).
    settling_rounds: int = 0


@dataclasses.dataclass
class GuardSection(Section):
    """The recompilation guard found a storm (`keras_xla.core.guard`):
    the train step kept compiling for new shapes.

    `action` is what it did (`"fallback"`: no XLA from `off_from`,
    `[epoch, step]`, on; `"raise"`; `"warn"`); `[epoch, step]` is the
    call that crossed the budget; `recompilations` and `compile_seconds` are
    the storm's until then, `saved_seconds` what XLA had saved by then;
    `compiled` of the last `window` calls compiled a new shape of
    `input`'s dimension `dim` (`dims`: every dimension of it that
    changed, as a square crop's height and width; `values`: `dim`'s last
    sizes);
    `projected_compilations` and `projected_seconds` what a fallback
    avoided, measured: the shapes the rest of the fit ran that XLA had
    not compiled, at the storm's compile time each (raise, warn: what
    the rest of the fit would compile at the storm's rate, 0 where its
    length is unknown). `"per_shape"` keeps XLA's step for the
    `kept_shapes` it had compiled and runs new ones without XLA from
    `off_from` on: `xla_steps` and `plain_steps` ran each way, in
    `xla_seconds` and `plain_seconds`. `"bucket"` pads `input`'s `dim`
    up to `edges` from `off_from` on, on XLA's step: the chooser's
    `padding_share` of the padded work and `bucket_saved_seconds` against
    compiling every size, over the rest of the fit; `grown`: edges added
    for sizes above the largest. The edges' programs fit the device:
    `edge_bytes` is each edge's program's memory, projected from the
    programs the storm compiled (`program_bytes` in the compile log),
    under `memory_limit_bytes` (the device's); `largest_fitting` is the
    largest size whose program fits (None: not limited), and sizes above
    it run per shape."""

    action: str
    budget: int
    epoch: int
    step: int
    recompilations: int
    compile_seconds: float
    saved_seconds: float
    window: int
    compiled: int
    input: str | None = None
    dim: int | None = None
    cause: str = ""
    values: list = dataclasses.field(default_factory=list)
    projected_compilations: float = 0.0
    projected_seconds: float = 0.0
    off_from: list = dataclasses.field(default_factory=list)
    dims: list = dataclasses.field(default_factory=list)
    kept_shapes: int = 0
    xla_steps: int = 0
    xla_seconds: float = 0.0
    plain_steps: int = 0
    plain_seconds: float = 0.0
    edges: list = dataclasses.field(default_factory=list)
    grown: list = dataclasses.field(default_factory=list)
    padding_share: float | None = None
    bucket_saved_seconds: float | None = None
    edge_bytes: list = dataclasses.field(default_factory=list)
    memory_limit_bytes: int | None = None
    largest_fitting: int | None = None


@dataclasses.dataclass
class Verdict(Section):
    """Did XLA pay off in this run (`keras_xla.core.verdict`)."""

    xla_enabled: bool
    speedup: float | None
    baseline_step_ms: float | None
    xla_step_ms: float | None
    compile_seconds: float
    break_even_steps: int | None
    paid_back: bool | None
    headline: str
    next_steps: list = dataclasses.field(default_factory=list)
    train_steps: int = 0
    # The speedup's range from the baseline windows' spread.
    speedup_low: float | None = None
    speedup_high: float | None = None
    # The most the run's steps could have saved even if XLA's step took
    # no time (no-XLA step, or a bound on it, times the steps).
    saving_bound_seconds: float | None = None
    # The median share of a step spent waiting for its batch, and XLA's
    # speedup of the rest (the compute), where the wait is measured.
    input_share: float | None = None
    compute_speedup: float | None = None
