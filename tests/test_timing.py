import warnings

import pytest

from keras_xla.core.signatures import Signature, TensorSignature
from keras_xla.core.timing import (
    StepRecord,
    estimate_compile_seconds,
    percentile,
    run_statistics,
)


def rec(seconds, new=(), batch=10, steps=1, trace=0.0):
    sig = Signature(0, (TensorSignature("x", (batch, 2), "float32"),))
    new = [(i, 0) for i in new]
    return StepRecord("train", 0, seconds, [(sig,)] * steps, new, trace)


def test_percentile_interpolates():
    assert percentile([1, 2, 3, 4], 50) == 2.5
    assert percentile([5], 90) == 5
    assert percentile([0, 10], 90) == pytest.approx(9.0)
    with pytest.raises(ValueError, match="empty"):
        percentile([], 50)
    with pytest.raises(ValueError, match="q must be"):
        percentile([1], 101)


def test_statistics_leave_compiled_steps_out():
    records = [rec(0.9, new=[0]), rec(0.010), rec(0.012), rec(0.011)]
    stats = run_statistics(records)
    assert stats.steps == 4
    assert stats.steady_steps == 3
    assert stats.median_seconds == pytest.approx(0.011)
    assert stats.examples_per_second == pytest.approx(30 / 0.033)
    assert stats.examples_per_second_overall == pytest.approx(40 / 0.933)


def test_statistics_use_fallback_when_every_step_compiled():
    stats = run_statistics([rec(0.5, new=[0]), rec(0.4, new=[0])], 0.002)
    assert stats.median_seconds == 0.002
    assert stats.steady_steps == 0
    assert stats.examples_per_second is None
    # No earlier median: unknown, not the median of compiling steps (a
    # compile estimate against that would be near zero).
    alone = run_statistics([rec(0.5, new=[0]), rec(0.4, new=[0])])
    assert alone.median_seconds is None
    assert alone.p90_seconds == pytest.approx(0.49)
    assert estimate_compile_seconds(rec(0.5, new=[0]), None) == 0.5


def test_multi_step_calls_count_each_step():
    stats = run_statistics([rec(0.04, steps=4), rec(0.08, steps=4)])
    assert stats.steps == 8
    assert stats.median_seconds == pytest.approx(0.015)


def test_compile_estimate_subtracts_run_and_trace_time():
    record = rec(0.5, new=[0], trace=0.1)
    assert estimate_compile_seconds(record, 0.01) == pytest.approx(0.39)
    shared = rec(1.0, new=[0, 2], steps=4)
    assert estimate_compile_seconds(shared, 0.05) == pytest.approx(0.4)
    assert estimate_compile_seconds(rec(0.01, new=[0]), 0.05) == 0.0
    assert estimate_compile_seconds(rec(0.3), 0.01) == 0.0


def test_a_first_compile_leaves_out_the_graph_building():
    from keras_xla.core.accounting import Accountant
    from keras_xla.core.findings import FindingBook
    from keras_xla.core.report import XLAReport
    from keras_xla.core.signatures import Signature, TensorSignature

    assert estimate_compile_seconds(
        rec(0.5, new=[0], trace=0.1), 0.01, graph_seconds=0.25
    ) == pytest.approx(0.14)

    def sig(batch):
        return [[Signature(0, (TensorSignature("x", (batch, 4), "f32"),))]]

    records = [
        StepRecord("train", 0, 1.0, sig(8)),
        StepRecord("train", 1, 0.01, sig(8)),
        StepRecord("train", 2, 0.01, sig(8)),
        StepRecord("train", 3, 0.51, sig(4)),
    ]
    records[0].new, records[0].previous = [(0, 0)], {(0, 0): []}
    records[3].new, records[3].previous = [(0, 0)], {(0, 0): [sig(8)[0][0]]}
    report = XLAReport()
    accountant = Accountant(report, FindingBook(report.findings))
    accountant.graph_seconds = 0.3  # the baseline's no-XLA first call
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the recompilation's warning
        accountant.finish_epoch(records)
    # Only the function's first compilation builds a graph.
    assert [c.compile_seconds for c in report.compile_log] == [0.69, 0.5]


def test_a_cluster_entry_dated_at_a_short_calls_end_is_that_calls():
    from keras_xla.core.accounting import detect_cluster_compilations
    from keras_xla.core.signatures import SignatureTracker

    def call(first_step, started_at, seconds, batch):
        sig = Signature(0, (TensorSignature("x", (batch, 2), "float32"),))
        return StepRecord("test", first_step, seconds, [(sig,)], [], 0.0,
                          started_at=started_at)  # fmt: skip

    tracker, booked, compiled = SignatureTracker(), set(), set()
    first = [call(0, 100.0, 0.01, 8), call(1, 100.02, 0.002, 4)]
    detect_cluster_compilations(
        "test", first, {"a": 100.005}, tracker, booked, compiled
    )
    # A validation run: a full batch, then a short last one whose cluster
    # compiles at its second run; the entry is dated at that call's end,
    # a rounding past it, within the full call's slack too.
    full, short = call(0, 200.0, 0.010, 8), call(1, 200.011, 0.002, 4)
    entries = {"a": 100.005, "b": 200.011 + 0.002 + 1e-9}
    detect_cluster_compilations(
        "test", [full, short], entries, tracker, booked, compiled
    )
    assert (full.entries, short.entries) == ([], ["b"])
    assert short.new == [(0, 0)] and not full.new


def test_a_record_field_per_step_over_the_pooled_records():
    records = [rec(0.9, new=[0]), rec(0.04, steps=4), rec(0.02, steps=2)]
    records[0].own_seconds = 1.0  # compiled: out of the pool
    records[1].own_seconds = 0.004  # 1 ms a step
    records[2].own_seconds = 0.006  # 3 ms a step
    stats = run_statistics(records)
    assert stats.per_step("own_seconds") == pytest.approx(0.002)
    assert stats.per_step("own_seconds", 90) == pytest.approx(0.0028)
    # A field no pooled call measured has no statistic.
    assert stats.per_step("input_seconds") is None
