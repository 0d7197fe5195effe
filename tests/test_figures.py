"""Every per-epoch figure is declared once (`core.figures`), and each
place that shows figures shows the registry's: the TensorBoard scalars
(and Keras's `logs`), the summary and `keras-xla report`'s epoch table,
the comparison of two runs, the XLA tab's epoch table and the README."""

import pathlib
import re

from keras_xla.core import compare, figures, render, summaries
from keras_xla.core.report import EpochStats, XLAReport
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
        step_time_ms={
            "median": 20.0 + n,
            "p90": 25.0,
            "dispatch_median": 0.5,
            "input_median": 3.0,
            "input_share": 0.15,
            "tuner_median": 0.05,
        },
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


def test_the_scalars_are_the_registered_tags_with_their_values():
    stats = epoch(0)
    scalars = summaries.epoch_scalars(stats, HLO)
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
        step_time_ms={"median": 5.0, "p90": 6.0, "tuner_median": 0.01},
        compile_cache_hits=None,
        compile_cache_misses=None,
    )
    assert set(summaries.epoch_scalars(bare)) == set(summaries.SCALAR_TAGS)


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
    del report.epochs[0].step_time_ms["input_median"]
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
    "dispatch_median",
    "input_median",
    "tuner_median",
    "compile_cache_hits",
    "compile_cache_misses",
)


def test_a_figure_is_named_in_at_most_four_package_files():
    """Declared, measured, reported: adding a figure touches the
    registry, what measures it and the report, not every place that
    shows figures."""
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
