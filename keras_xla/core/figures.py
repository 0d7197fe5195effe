"""Every per-epoch figure the tuner reports, declared once.

A `Figure` names its TensorBoard tag (also its key in Keras's `logs`),
where its value lives in the report, its unit, its digits, its column in
the epoch tables and how two runs compare on it. The TensorBoard scalars
(`core.summaries`), Keras's `logs`, the summary and `keras-xla report`'s
epoch table (`core.render`), the comparison of two runs (`core.compare`),
the XLA tab's epoch table (`keras_xla.dashboard.views`) and the README's
table of tags all read `FIGURES`; a test keeps the README equal to it.
Adding a figure means declaring it here, measuring it, and a test.

Rounding is one rule for every backend: seconds and milliseconds as
measured (the accountant rounds them), ratios and rates to six
significant digits (`significant`): a tiny model's TFLOP/s and
utilization are far below any fixed number of decimals.

Pure logic: nothing here imports TensorFlow, Keras or JAX.
"""

from __future__ import annotations

import dataclasses
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


def significant(value: float | None, digits: int = 6) -> float | None:
    """`value` to `digits` significant digits (None stays None)."""
    return None if value is None else float(f"{value:.{digits}g}")


@dataclasses.dataclass(frozen=True)
class Figure:
    """One per-epoch figure.

    Args:
        key: Its name in the report: an `EpochStats` field, a key of its
            `step_time_ms` (`step_time_ms.median`), or of the HLO section.
        tag: Its TensorBoard scalar and Keras `logs` key (`xla/...`), or
            None where it is only in the report and the comparison.
        meaning: One line for the README's table and the docs.
        unit: Its unit (`ms`, `s`, `1/s`, ...; empty for a count).
        digits: Decimals shown in tables; None for an integer.
        column: Its column header in the epoch tables; None: not shown.
        label: Its name in a comparison of two runs (defaults to `key`).
        better: In a comparison, +1 if higher is better, -1 if lower, 0
            neither; None: not compared.
        across: How a run's epochs combine in a comparison (`sum`,
            `median`).
        when: When it is written (`EVERY_EPOCH`, `AFTER_HLO`,
            `WITH_CACHE`, `APART`, `WAIT_SEEN`; one that is not measured
            on a backend or in an epoch is left out of that epoch's
            scalars).
        read: Its value from an epoch's `EpochStats` and the report's
            HLO section (a dict, or None); defaults to reading `key`.
    """

    key: str
    tag: str | None
    meaning: str
    unit: str = ""
    digits: int | None = 2
    column: str | None = None
    label: str | None = None
    better: int | None = None
    across: str = "median"
    when: str = EVERY_EPOCH
    read: Callable[[Any, dict | None], float | None] | None = None

    def value(self, stats: Any, hlo: dict | None = None) -> float | None:
        """This figure in an epoch (`stats`, the report's `hlo`)."""
        if self.read is not None:
            return self.read(stats, hlo)
        return epoch_value(stats, self.key)


def epoch_value(stats: Any, key: str) -> Any:
    """`key` of an `EpochStats` (`step_time_ms.median`: a key of its
    `step_time_ms` dict), or None where it has none."""
    name, _, inner = key.partition(".")
    value = getattr(stats, name, None)
    if inner:
        return (value or {}).get(inner)
    return value


def _tflops(stats: Any, hlo: dict | None) -> float | None:
    """FLOP/s at the epoch's median step, in TFLOP/s."""
    median_ms = stats.step_time_ms.get("median")
    flops = (hlo or {}).get("flops_per_step")
    if not (median_ms and flops):
        return None
    return significant(flops / (median_ms / 1000.0) / 1e12)


def _hlo(key: str) -> Callable[[Any, dict | None], float | None]:
    return lambda stats, hlo: (hlo or {}).get(key)


FIGURES: tuple[Figure, ...] = (
    Figure(
        "compilations",
        "xla/compilations",
        "XLA compilations in the epoch, train and validation, first ones "
        "included",
        digits=None,
        column="compiles",
        better=-1,
        across="sum",
    ),
    Figure(
        "recompilations",
        "xla/recompilations",
        "compilations after each function's first",
        digits=None,
        column="recompiles",
        better=-1,
        across="sum",
    ),
    Figure(
        "compile_seconds",
        "xla/compile_seconds",
        "estimated seconds spent compiling",
        unit="s",
        column="compile s",
        label="compile seconds",
        better=-1,
        across="sum",
    ),
    Figure(
        "step_time_ms.median",
        "xla/step_time_ms_median",
        "median train step time over the steps that did not compile: "
        "until the step's results exist, not until the call returns (see "
        '"How a step is timed"); an epoch whose every step compiled has '
        "the previous epoch's median, or none (its compilations are then "
        "timed by their whole calls)",
        unit="ms",
        column="median ms",
        label="median step ms",
        better=-1,
    ),
    Figure(
        "step_time_ms.p90",
        "xla/step_time_ms_p90",
        "90th percentile of those steps' times",
        unit="ms",
        column="p90 ms",
    ),
    Figure(
        "examples_per_second",
        "xla/examples_per_second",
        "train throughput over those steps",
        unit="1/s",
        digits=1,
        column="ex/s",
        label="examples/s (steady)",
        better=+1,
    ),
    Figure(
        "examples_per_second_overall",
        None,
        "train throughput over every step, compiling ones included",
        unit="1/s",
        digits=1,
        label="examples/s incl. compile",
        better=+1,
    ),
    Figure(
        "unexplained_seconds",
        "xla/unexplained_seconds",
        "seconds of train steps that stood out (twice the median and more) "
        "with no compilation, input wait or warm-up to explain them: a "
        "host pause, another process, a callback",
        unit="s",
        digits=3,
    ),
    Figure(
        "step_time_ms.dispatch_median",
        "xla/dispatch_ms_median",
        "the host's time in a step's call (from its start to its return, "
        "less its wait for the batch)",
        unit="ms",
        when=APART,
    ),
    Figure(
        "step_time_ms.input_median",
        "xla/input_ms_median",
        "the time a step waits for its batch",
        unit="ms",
        column="wait ms",
        when=WAIT_SEEN,
    ),
    Figure(
        "step_time_ms.input_share",
        "xla/input_share",
        "the share of the median step spent waiting for its batch",
        digits=3,
        when=WAIT_SEEN,
    ),
    Figure(
        "step_time_ms.tuner_median",
        "xla/tuner_ms_median",
        "the tuner's own time per step, in its hooks",
        unit="ms",
        digits=3,
    ),
    Figure(
        "jit_compile",
        "xla/jit_compile",
        "1 when XLA is on at the end of the epoch, else 0",
        digits=None,
        read=lambda stats, hlo: 1.0 if stats.jit_compile else 0.0,
    ),
    Figure(
        "fusion_ratio",
        "xla/fusion_ratio",
        "the share of the train step's kernels that are fusions",
        digits=4,
        when=AFTER_HLO,
        read=_hlo("fusion_ratio"),
    ),
    Figure(
        "kernels_per_step",
        "xla/kernels_per_step",
        "kernels the train step launches",
        digits=None,
        when=AFTER_HLO,
        read=_hlo("kernels_per_step"),
    ),
    Figure(
        "achieved_tflops",
        "xla/achieved_tflops",
        "the train step's FLOPs over its median time",
        unit="TFLOP/s",
        digits=4,
        when=AFTER_HLO,
        read=_tflops,
    ),
    Figure(
        "compile_cache_hits",
        "xla/compile_cache_hits",
        "compilations the persistent compile cache served",
        digits=None,
        when=WITH_CACHE,
    ),
    Figure(
        "compile_cache_misses",
        "xla/compile_cache_misses",
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
# Throughput, steady and including compile time: the comparison's
# conclusion reads them.
COMPILATIONS = BY_KEY["compilations"]
THROUGHPUT = BY_KEY["examples_per_second"]
THROUGHPUT_OVERALL = BY_KEY["examples_per_second_overall"]
MEDIAN_STEP = BY_KEY["step_time_ms.median"]
DISPATCH = BY_KEY["step_time_ms.dispatch_median"]
INPUT_WAIT = BY_KEY["step_time_ms.input_median"]


def tags(when: str) -> tuple[str, ...]:
    """The tags of the figures written `when`."""
    return tuple(f.tag for f in FIGURES if f.tag and f.when == when)


def scalars(stats: Any, hlo: dict | None = None) -> dict[str, float]:
    """The epoch's `xla/*` scalars: each tagged figure that has a value
    (one not measured here, such as the HLO's before its analysis, or
    JAX's dispatch on TensorFlow, is left out)."""
    found = {}
    for figure in FIGURES:
        if figure.tag is None:
            continue
        value = figure.value(stats, hlo)
        if value is not None:
            found[figure.tag] = value
    return found


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
    for f in FIGURES:
        if f.tag is None:
            continue
        when = "" if f.when == EVERY_EPOCH else f" ({f.when})"
        unit = f" [{f.unit}]" if f.unit else ""
        rows.append(f"| `{f.tag}`{unit} | {f.meaning}{when} |")
    return rows
