"""Every per-epoch figure is declared once (`core.figures`), and each
place that shows figures shows the registry's: the TensorBoard scalars
(and Keras's `logs`), the summary and `keras-xla report`'s epoch table,
the comparison of two runs, the XLA tab's epoch table and the README."""

import dataclasses
import pathlib
import re

import pytest

from keras_xla.core import compare, figures, render, summaries
from keras_xla.core.report import EpochStats, XLAReport
from keras_xla.core.signatures import Signature, TensorSignature
from keras_xla.core.timing import StepRecord, run_statistics
from keras_xla.dashboard import views

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "keras_xla"


def epoch(n, **extra):
    values = dict(
        epoch=n,
        steps=10,
        compilations=2 - n,
        compile_seconds=1.5 - n,
        recompilations=1 - n,
        step_time_ms={"median": 20.0 + n, "p90": 25.0},
        dispatch_ms_median=0.5,
        input_ms_median=3.0,
        input_share=0.15,
        tuner_ms_median=0.05,
        examples_per_second=1600.0 + 10 * n,
        examples_per_second_overall=800.0,
        compile_cache_hits=3,
        compile_cache_misses=1,
        jit_compile=True,
    )
    values.update(extra)
    return EpochStats(**values)


HLO = {"fusion_ratio": 0.5, "kernels_per_step": 12, "flops_per_step": 4e9}


def test_each_figure_is_declared_once_with_a_unique_tag_and_key():
    keys = [f.key for f in figures.FIGURES]
    tags = [f.tag for f in figures.FIGURES if f.tag]
    assert len(keys) == len(set(keys)) and len(tags) == len(set(tags))
    assert all(t.startswith("xla/") for t in tags)
    assert all(f.meaning for f in figures.FIGURES)
    whens = {figures.EVERY_EPOCH, figures.AFTER_HLO, figures.WITH_CACHE}
    whens |= {figures.APART, figures.WAIT_SEEN}
    assert {f.when for f in figures.FIGURES} <= whens


def test_a_figure_has_one_name_its_tag_made_from_it():
    by_key = {f.key: f.tag for f in figures.FIGURES}
    assert by_key["step_time_ms.median"] == "xla/step_time_ms_median"
    assert by_key["dispatch_ms_median"] == "xla/dispatch_ms_median"
    assert by_key["examples_per_second_overall"] is None
    # The report keeps each figure an epoch holds under that name.
    epoch_fields = {f.name for f in dataclasses.fields(EpochStats)}
    assert set(figures.KEPT) <= epoch_fields


def test_an_epoch_is_measured_by_iterating_the_registry():
    """Each figure with a measurement reads the run's statistics; the
    counted ones are passed in; all follow the one rounding rule."""

    def record(seconds, dispatch, wait, own):
        sig = Signature(0, (TensorSignature("x", (10, 2), "float32"),))
        return StepRecord(
            "train", 0, seconds, [(sig,)], dispatch_seconds=dispatch,
            input_seconds=wait, own_seconds=own,
        )  # fmt: skip

    records = [
        record(0.0123456789, 0.001, 0.003, 1.234567e-5),
        record(0.0223456789, None, 0.004, 2.0e-5),
        record(0.0183456789, 0.002, 0.005, 3.0e-5),
    ]
    run = run_statistics(records)
    fields = figures.measured(run, compilations=2, compile_seconds=1 / 3)
    assert fields["step_time_ms"] == {"median": 18.3457, "p90": 21.5457}
    assert fields["examples_per_second"] == 565.642
    assert fields["compilations"] == 2
    assert fields["compile_seconds"] == 0.333333
    # The dispatch over the calls that measured it, per step.
    assert fields["dispatch_ms_median"] == 1.5
    assert fields["input_ms_median"] == 4.0
    assert fields["input_share"] == figures.share(4.0, 18.3456789)
    assert fields["input_share"] == 0.218035
    assert fields["tuner_ms_median"] == 0.02
    # What the accountant does not pass, nor the run measures, is not
    # there: the owner sets it (the cache's counts), or it is read.
    assert "compile_cache_hits" not in fields and "jit_compile" not in fields
    with pytest.raises(ValueError, match="Not figures"):
        figures.measured(run, compile_secs=1.0)
    stats = EpochStats(epoch=0, steps=3, recompilations=0, **fields)
    assert stats.dispatch_ms_median == 1.5


def test_the_one_rounding_rule():
    assert figures.rounded(1234.56789) == 1234.57
    assert figures.rounded(0.0000123456789) == 0.0000123457
    assert figures.rounded(7) == 7 and figures.rounded(True) is True
    assert figures.rounded(None) is None
    assert figures.share(3.0, 2.0) == 1.0 and figures.share(None, 2.0) is None
    assert figures.share(1.0, 0.0) is None


def test_the_scalars_are_the_registered_tags_with_their_values():
    stats = epoch(0)
    scalars = figures.scalars(stats, HLO)
    assert set(scalars) == {f.tag for f in figures.FIGURES if f.tag}
    assert scalars["xla/compilations"] == 2
    assert scalars["xla/step_time_ms_median"] == 20.0
    assert scalars["xla/input_ms_median"] == 3.0
    assert scalars["xla/jit_compile"] == 1.0
    assert scalars["xla/fusion_ratio"] == 0.5
    # 4 GFLOP in 20 ms: 0.2 TFLOP/s.
    assert scalars["xla/achieved_tflops"] == 0.2
    # What was not measured is left out: the HLO before its analysis,
    # the parts of a step TensorFlow does not time apart, the cache off.
    bare = epoch(
        1,
        step_time_ms={"median": 5.0, "p90": 6.0},
        dispatch_ms_median=None,
        input_ms_median=None,
        input_share=None,
        compile_cache_hits=None,
        compile_cache_misses=None,
    )
    assert set(figures.scalars(bare)) == set(summaries.SCALAR_TAGS)


def test_every_tag_is_in_exactly_one_group_summaries_writes():
    groups = (
        summaries.SCALAR_TAGS,
        summaries.HLO_TAGS,
        summaries.CACHE_TAGS,
        summaries.APART_TAGS,
        summaries.WAIT_TAGS,
    )
    grouped = [t for g in groups for t in g]
    assert sorted(grouped) == sorted(f.tag for f in figures.FIGURES if f.tag)


def report_of(*epochs):
    report = XLAReport()
    report.epochs.extend(epochs)
    return report


def test_the_summary_table_shows_each_column_figure():
    report = report_of(epoch(0), epoch(1))
    lines = render.epoch_table(report, totals=True)
    header = lines[0].split()
    for f in figures.columns(report.epochs):
        assert f.column.split()[0] in header, f.key
    first = lines[1].split()
    # epoch, steps, compiles, recompiles, compile s, median, p90, ex/s,
    # the wait for the batch
    assert first == ["0", "10", "2", "1", "1.50", "20.00", "25.00"] + [
        "1600.0",
        "3.00",
    ]
    total = lines[-1].split()
    # Counts and seconds add up; times and rates do not.
    assert total == ["total", "20", "3", "1", "2.00"]
    summary = render.summary(report)
    assert lines[0] in summary


def test_the_comparison_compares_each_compared_figure():
    a = report_of(epoch(0), epoch(1))
    b = report_of(epoch(0, examples_per_second=3200.0))
    result = compare.compare(a, b)
    for f in figures.COMPARED:
        assert f.key in result["rows"], f.key
    assert result["rows"]["compilations"]["values"] == [3, 2]
    assert result["rows"]["examples_per_second"]["values"] == [1605.0, 3200.0]
    assert result["rows"]["examples_per_second"]["better"] == "B"
    assert result["conclusion"].startswith("B trains faster: 1.99x")


def test_the_tab_shows_the_same_epoch_table():
    report = report_of(epoch(0))
    table = views.epoch_table(report)
    headers = [c[0] for c in table["columns"]]
    assert " ".join(headers) == " ".join(render.epoch_table(report)[0].split())
    assert table["rows"] == [[0, 10, 2, 1, 1.5, 20.0, 25.0, 1600.0, 3.0]]
    assert table["columns"][-1] == ["wait ms", 2]
    # Where the wait for the batch was not seen, neither has the column.
    report.epochs[0].input_ms_median = None
    table = views.epoch_table(report)
    assert "wait ms" not in [c[0] for c in table["columns"]]
    assert "wait" not in render.epoch_table(report)[0].split()
    rows = views.comparison_view([("a", report), ("b", report)])["rows"]
    digits = {r["key"]: r["digits"] for r in rows}
    assert digits["compilations"] is None
    assert digits["examples_per_second"] == 1


def test_the_readme_lists_each_tagged_figure_as_declared():
    readme = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    for row in figures.readme_rows():
        assert row in readme, f"README lacks (or words differently): {row}"


# The figures' names that name nothing else in the package (the others,
# such as `compilations` or `fusion_ratio`, are also the report's
# sections' fields).
OWN_NAMES = (
    "examples_per_second",
    "examples_per_second_overall",
    "p90",
    "dispatch_ms_median",
    "input_ms_median",
    "tuner_ms_median",
    "compile_cache_hits",
    "compile_cache_misses",
)


def test_a_figure_is_named_in_at_most_four_package_files():
    """Declared and measured in the registry; kept by the report, read
    under an earlier name, set by the backends (the cache's counts):
    not every place that shows figures names it."""
    for name in OWN_NAMES:
        assert any(f.key.endswith(name) for f in figures.FIGURES), name
        pattern = re.compile(rf"\b{re.escape(name)}\b")
        files = [
            p.relative_to(PACKAGE).as_posix()
            for p in PACKAGE.rglob("*")
            if p.suffix in (".py", ".js")
            and pattern.search(p.read_text(encoding="utf-8"))
        ]
        assert len(files) <= 4, (name, files)
