"""Every per-epoch figure the tuner reports, declared once: how it is
measured, rounded, written and shown.

A `Figure` has one name, its `key`: its field in the report's epochs,
and its TensorBoard scalar and Keras `logs` key (`Figure.tag`). The
accountant fills an epoch by iterating `FIGURES` (`measured`);
`report.EpochStats` has a field for each; the scalars
(`core.summaries`), Keras's `logs`, the epoch tables (`core.render`,
`keras_xla.dashboard.views`), the comparison of two runs
(`core.compare`) and the README's table of tags (a test keeps it equal)
read `FIGURES`. A new figure measured from the steps' records is
declared here alone.

Rounding is one rule for every figure and backend (`rounded`): counts
and flags as they are, any other value to six significant digits (a
tuner's microseconds per step, a tiny model's TFLOP/s, a long
compile's seconds: no fixed number of decimals suits them all).

Pure logic: nothing here imports TensorFlow, Keras or JAX.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Callable
from typing import Any

# When a figure is written: every epoch, once the HLO was analyzed, or
# with the compile cache on.
EVERY_EPOCH = "every epoch"
AFTER_HLO = "after the HLO analysis"
WITH_CACHE = "with `compile_cache`"
# Where the host's part of a step is timed apart: on JAX, whose call
# returns before its results exist.
APART = "where timed apart: JAX"
# Where the wait for the batch is seen: JAX's tap times `next()`;
# TensorFlow's train function is stamped around its get-next where it
# fetches one batch per call (`tf_backend.input_wait`).
WAIT_SEEN = (
    "where the wait is seen: JAX; TensorFlow at steps_per_execution=1 on "
    "one replica"
)


def rounded(value: Any) -> Any:
    """A figure's value as the report keeps it (the one rule above)."""
    if value is None or isinstance(value, (bool, int)):
        return value
    return float(f"{value:.6g}")


def share(part: float | None, whole: float | None) -> float | None:
    """`part / whole`, at most 1, rounded; None without both: the wait
    for the batch as a share of a step (the epoch's `input_share`, the
    verdict's, the `input-bound` lint's)."""
    if part is None or not whole:
        return None
    return rounded(min(part / whole, 1.0))


@dataclasses.dataclass(frozen=True)
class Figure:
    """One per-epoch figure.

    Args:
        key: Its one name: its field in the report's epochs (an
            `EpochStats` field, or a key of its `step_time_ms`:
            `step_time_ms.median`), or of the HLO section where `read`
            takes it from there.
        meaning: One line for the README's table and the docs.
        unit: Its unit (`ms`, `s`, `1/s`, ...; empty for a count).
        digits: Decimals shown in tables; None for an integer.
        column: Its column header in the epoch tables; None: not shown.
        label: Its name in a comparison of two runs (defaults to `key`).
        better: In a comparison, +1 if higher is better, -1 if lower, 0
            neither; None: not compared.
        across: How a run's epochs combine (`over`: `sum`, `median`),
            in a comparison and the tables' totals.
        when: When it is written (`EVERY_EPOCH`, `AFTER_HLO`,
            `WITH_CACHE`, `APART`, `WAIT_SEEN`; one that is not measured
            on a backend or in an epoch is left out of that epoch's
            scalars).
        tagged: Whether it is a TensorBoard scalar and in Keras's `logs`.
        measure: How it is measured from the epoch's train steps: their
            `timing.RunStatistics` -> its value in `unit` (None: not
            measured there); None where the accountant counts it
            (compilations), the owner sets it (the cache's counts) or
            `read` derives it.
        read: Its value from an epoch's `EpochStats` and the report's
            HLO section (a dict, or None), for a figure the epoch does
            not keep; None: the epoch's field `key`.
    """

    key: str
    meaning: str
    unit: str = ""
    digits: int | None = 2
    column: str | None = None
    label: str | None = None
    better: int | None = None
    across: str = "median"
    when: str = EVERY_EPOCH
    tagged: bool = True
    measure: Callable[[Any], float | None] | None = None
    read: Callable[[Any, dict | None], float | None] | None = None

    @property
    def tag(self) -> str | None:
        """Its TensorBoard scalar and Keras `logs` key, or None."""
        return "xla/" + self.key.replace(".", "_") if self.tagged else None

    def value(self, stats: Any, hlo: dict | None = None) -> float | None:
        """This figure in an epoch (`stats`, the report's `hlo`)."""
        if self.read is not None:
            return rounded(self.read(stats, hlo))
        name, _, inner = self.key.partition(".")
        value = getattr(stats, name, None)
        return (value or {}).get(inner) if inner else value

    def over(self, epochs: list) -> float | None:
        """This figure over `epochs`, combined as `across` says."""
        found = [v for v in (self.value(e) for e in epochs) if v is not None]
        if self.across == "sum":
            return sum(found)
        return statistics.median(found) if found else None


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1000.0


def _per_step_ms(field: str) -> Callable[[Any], float | None]:
    """The median per step of a record `field`, in ms."""
    return lambda run: _ms(run.per_step(field))


def _tflops(stats: Any, hlo: dict | None) -> float | None:
    """FLOP/s at the epoch's median step, in TFLOP/s."""
    median_ms = stats.step_time_ms.get("median")
    flops = (hlo or {}).get("flops_per_step")
    return flops / (median_ms / 1000.0) / 1e12 if median_ms and flops else None


def _hlo(key: str) -> Callable[[Any, dict | None], float | None]:
    return lambda stats, hlo: (hlo or {}).get(key)


FIGURES: tuple[Figure, ...] = (
    Figure(
        "compilations",
        "XLA compilations in the epoch, train and validation, first ones "
        "included",
        digits=None,
        column="compiles",
        better=-1,
        across="sum",
    ),
    Figure(
        "recompilations",
        "compilations after each function's first",
        digits=None,
        column="recompiles",
        better=-1,
        across="sum",
    ),
    Figure(
        "compile_seconds",
        "estimated seconds spent compiling",
        unit="s",
        column="compile s",
        label="compile seconds",
        better=-1,
        across="sum",
    ),
    Figure(
        "step_time_ms.median",
        "median train step time over the steps that did not compile: "
        "until the step's results exist, not until the call returns (see "
        '"How a step is timed"); an epoch whose every step compiled has '
        "the previous epoch's median, or none (its compilations are then "
        "timed by their whole calls)",
        unit="ms",
        column="median ms",
        label="median step ms",
        better=-1,
        measure=lambda run: _ms(run.median_seconds),
    ),
    Figure(
        "step_time_ms.p90",
        "90th percentile of those steps' times",
        unit="ms",
        column="p90 ms",
        measure=lambda run: _ms(run.p90_seconds),
    ),
    Figure(
        "examples_per_second",
        "train throughput over those steps",
        unit="1/s",
        digits=1,
        column="ex/s",
        label="examples/s (steady)",
        better=+1,
        measure=lambda run: run.examples_per_second,
    ),
    Figure(
        "examples_per_second_overall",
        "train throughput over every step, compiling ones included",
        unit="1/s",
        digits=1,
        label="examples/s incl. compile",
        better=+1,
        tagged=False,
        measure=lambda run: run.examples_per_second_overall,
    ),
    Figure(
        "unexplained_seconds",
        "seconds of train steps that stood out (twice the median and more) "
        "with no compilation, input wait or warm-up to explain them: a "
        "host pause, another process, a callback",
        unit="s",
        digits=3,
    ),
    Figure(
        "dispatch_ms_median",
        "the host's time in a step's call (from its start to its return, "
        "less its wait for the batch)",
        unit="ms",
        when=APART,
        measure=_per_step_ms("dispatch_seconds"),
    ),
    Figure(
        "input_ms_median",
        "the time a step waits for its batch",
        unit="ms",
        column="wait ms",
        when=WAIT_SEEN,
        measure=_per_step_ms("input_seconds"),
    ),
    Figure(
        "input_share",
        "the share of the median step spent waiting for its batch",
        digits=3,
        when=WAIT_SEEN,
        measure=lambda run: share(
            run.per_step("input_seconds"), run.median_seconds
        ),
    ),
    Figure(
        "tuner_ms_median",
        "the tuner's own time per step, in its hooks",
        unit="ms",
        digits=3,
        measure=_per_step_ms("own_seconds"),
    ),
    Figure(
        "jit_compile",
        "1 when XLA is on at the end of the epoch, else 0",
        digits=None,
        read=lambda stats, hlo: 1.0 if stats.jit_compile else 0.0,
    ),
    Figure(
        "fusion_ratio",
        "the share of the train step's kernels that are fusions",
        digits=4,
        when=AFTER_HLO,
        read=_hlo("fusion_ratio"),
    ),
    Figure(
        "kernels_per_step",
        "kernels the train step launches",
        digits=None,
        when=AFTER_HLO,
        read=_hlo("kernels_per_step"),
    ),
    Figure(
        "achieved_tflops",
        "the train step's FLOPs over its median time",
        unit="TFLOP/s",
        digits=4,
        when=AFTER_HLO,
        read=_tflops,
    ),
    Figure(
        "compile_cache_hits",
        "compilations the persistent compile cache served",
        digits=None,
        when=WITH_CACHE,
    ),
    Figure(
        "compile_cache_misses",
        "compilations it did not serve",
        digits=None,
        when=WITH_CACHE,
    ),
)

BY_KEY = {f.key: f for f in FIGURES}
# The figures of the epoch tables (the summary, `keras-xla report`, the
# XLA tab), in their order.
COLUMNS = tuple(f for f in FIGURES if f.column is not None)


def columns(epochs: list) -> tuple[Figure, ...]:
    """The epoch tables' figures for `epochs`: every epoch's, and those
    measured only where they can be (the wait for the batch) where some
    epoch has them."""
    return tuple(
        f
        for f in COLUMNS
        if f.when == EVERY_EPOCH or any(f.value(e) is not None for e in epochs)
    )


# The figures two runs are compared on.
COMPARED = tuple(f for f in FIGURES if f.better is not None)
# The figures the comparison's conclusion (throughput, steady and
# including compile time), the lints and the verdict read.
COMPILATIONS = BY_KEY["compilations"]
THROUGHPUT = BY_KEY["examples_per_second"]
THROUGHPUT_OVERALL = BY_KEY["examples_per_second_overall"]
MEDIAN_STEP = BY_KEY["step_time_ms.median"]
DISPATCH = BY_KEY["dispatch_ms_median"]
INPUT_WAIT = BY_KEY["input_ms_median"]
TUNER = BY_KEY["tuner_ms_median"]
# The figures an epoch keeps as fields of its own (`report.EpochStats`
# declares some; it is given one field for each of the others).
KEPT = tuple(f.key for f in FIGURES if f.read is None and "." not in f.key)


def measured(run: Any, **counted: Any) -> dict[str, Any]:
    """An epoch's figures as `EpochStats` arguments, each rounded by the
    one rule: every figure with a `measure`, from `run` (the epoch's
    train steps' `timing.RunStatistics`), and those counted elsewhere as
    given (`counted`, by key: the accountant's compilations, ...)."""
    unknown = set(counted) - set(BY_KEY)
    if unknown:
        raise ValueError(f"Not figures: {sorted(unknown)}.")
    fields: dict[str, Any] = {}
    for f in FIGURES:
        if f.measure is None and f.key not in counted:
            continue
        value = rounded(f.measure(run) if f.measure else counted[f.key])
        name, _, inner = f.key.partition(".")
        if inner:
            fields.setdefault(name, {})[inner] = value
        else:
            fields[name] = value
    return fields


def tags(when: str) -> tuple[str, ...]:
    """The tags of the figures written `when`."""
    return tuple(f.tag for f in FIGURES if f.tag and f.when == when)


def scalars(stats: Any, hlo: dict | None = None) -> dict[str, float]:
    """The epoch's `xla/*` scalars: each tagged figure that has a value."""
    values = {f.tag: f.value(stats, hlo) for f in FIGURES if f.tag}
    return {tag: value for tag, value in values.items() if value is not None}


def cell(figure: Figure, value: float | None) -> str:
    """`value` as the epoch tables show `figure`: `-` where missing."""
    if value is None:
        return "-"
    if figure.digits is None:
        return str(int(value))
    return f"{value:.{figure.digits}f}"


def readme_rows() -> list[str]:
    """The README's TensorBoard table rows of the tagged figures."""
    rows = []
    for f in filter(lambda figure: figure.tag, FIGURES):
        when = "" if f.when == EVERY_EPOCH else f" ({f.when})"
        unit = f" [{f.unit}]" if f.unit else ""
        rows.append(f"| `{f.tag}`{unit} | {f.meaning}{when} |")
    return rows
