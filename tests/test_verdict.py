"""The verdict: did XLA pay off, on planted cases and in real fits."""

import keras
import numpy as np
import pytest
from conftest import conv_model, quiet_fit, regression_data

from keras_xla import XLATuner
from keras_xla.core import render, verdict
from keras_xla.core.report import (
    BaselineSection,
    EpochStats,
    Finding,
    JitInfo,
    Recompilation,
    XLAReport,
)


def report_with(base_ms, xla_ms, steps, compile_s, recompile_s=()):
    report = XLAReport(jit=JitInfo(True, True, "on"))
    report.epochs.append(
        EpochStats(0, steps, 1, compile_s, 0, {"median": xla_ms}, None)
    )
    report.baseline = BaselineSection(4, base_ms, xla_ms, 0.1)
    for cause, seconds in recompile_s:
        report.recompilations.append(
            Recompilation(
                "train", 0, 1, "x", 0, [8], [4], cause, seconds, "", ""
            )
        )
    return report


def test_compile_dominated_run_did_not_pay_off():
    v = verdict.build(report_with(2.0, 1.0, 15, 1.5))
    assert (v.speedup, v.break_even_steps, v.paid_back) == (2.0, 1500, False)
    assert v.headline == (
        "XLA made each step 2.00x faster (2.00 -> 1.00 ms) but compiling "
        "cost 1.5 s; it pays back after 1,500 steps and this run had 15, so "
        "it did not pay off yet. Even if XLA's step took no time, this "
        "run's 15 steps at 2.00 ms each without XLA could save at most "
        "0.03 s, less than the 1.5 s of compiling."
    )
    assert v.saving_bound_seconds == 0.03
    assert v.next_steps[0]["code"] == "compile-not-paid-back"
    assert v.next_steps[0]["seconds"] == pytest.approx(1.5 - 15 * 0.001)


def test_a_long_run_paid_off_and_a_slower_step_never_does():
    assert verdict.build(report_with(2.0, 1.0, 3000, 1.5)).paid_back is True
    slower = verdict.build(report_with(1.0, 1.25, 1000, 0.5))
    assert (slower.speedup, slower.break_even_steps) == (0.8, None)
    assert slower.paid_back is False
    assert "slower" in slower.headline
    (step,) = slower.next_steps
    # 1000 steps 0.25 ms slower, plus the compile time.
    assert step["code"] == "xla-slower"
    assert step["seconds"] == pytest.approx(0.75)


def test_compile_dominates_reads_the_verdict():
    # 14x faster, paid back after 2 steps: no finding says otherwise,
    # however long compiling took against the run's training time.
    fast = report_with(14.0, 1.0, 30, 0.02)
    fast.verdict = verdict.build(fast)
    assert fast.verdict.paid_back is True
    assert verdict.compile_dominates(fast, planned=30) is None
    # Pays back after 1,500 steps: not in 15, nor in the 900 planned.
    slow = report_with(2.0, 1.0, 15, 1.5)
    slow.verdict = verdict.build(slow)
    message, fix = verdict.compile_dominates(slow, planned=900)
    assert message == (
        "Compiling took 1.5 s and it would pay back after 1,500 steps; "
        "this run has 900: XLA does not pay back its compile time here "
        "(the verdict)."
    )
    assert "compile_cache" in fix
    # ... but it does in the 2,000 planned: the verdict's "not yet" is
    # about the steps so far, this finding about the run.
    assert verdict.compile_dominates(slow, planned=2000) is None
    # No baseline: the time it took, and the speedup XLA would need.
    unknown = report_with(2.0, 1.0, 10, 0.05)
    unknown.baseline = None
    unknown.verdict = verdict.build(unknown)
    message, _ = verdict.compile_dominates(unknown, planned=10)
    assert message.startswith(
        "Compiling took 0.1 s against about 0.01 s of training (10 steps): "
        "to pay it back, XLA must make each step 6.0x faster"
    )
    # XLA off: nothing to pay back.
    off = report_with(2.0, 1.0, 15, 1.5)
    off.jit = JitInfo(False, False, "off")
    off.verdict = verdict.build(off)
    assert verdict.compile_dominates(off, planned=15) is None


def test_next_steps_are_ranked_by_seconds():
    report = report_with(
        2.0,
        1.0,
        100_000,
        0.5,
        [("partial_batch", 0.25), ("dynamic_dim", 0.5), ("dynamic_dim", 0.5)],
    )
    report.findings.append(
        Finding("dispatch-bound-steps", "info", "m", "Use spe.", 1, 0.0)
    )
    steps = verdict.build(report).next_steps
    assert [(s["code"], s["seconds"]) for s in steps] == [
        ("dynamic-dimension", 1.0),
        ("partial-last-batch", 0.25),
        ("dispatch-bound-steps", None),
    ]


def test_a_next_step_names_the_input_whose_seconds_it_counts():
    report = report_with(2.0, 1.0, 100, 0.5)
    for name, seconds in (("x", 36.13), ("y", 0.5), ("x", 1.0)):
        report.recompilations.append(
            Recompilation(
                "train", 0, 1, name, 1, [8, 3], [8, 5], "dynamic_dim",
                seconds, "", f"Pad input `{name}` to a few lengths.",
            )
        )  # fmt: skip
    steps = verdict.build(report).next_steps
    first, second = steps[0], steps[1]
    assert (first["seconds"], first["fix"]) == (
        37.13,
        "Pad input `x` to a few lengths.",
    )
    assert (second["seconds"], second["fix"]) == (
        0.5,
        "Pad input `y` to a few lengths.",
    )


def test_an_input_bound_run_puts_the_input_first():
    from keras_xla.core import findings as codes
    from keras_xla.core import lints

    # 60 ms without XLA, 40 with, 20 of each waiting for the batch.
    report = report_with(60.0, 40.0, 1000, 1.0)
    report.epochs[0].input_ms_median = 20.0
    message, fix = lints.input_bound(40.0, 20.0)
    assert "waits 20.00 ms of its 40.00 ms (50%)" in message
    assert "prefetch(tf.data.AUTOTUNE)" in fix and "workers=N" in fix
    report.findings.append(Finding(codes.INPUT_BOUND, "warning", message, fix))
    v = verdict.build(report)
    assert (v.speedup, v.input_share, v.compute_speedup) == (1.5, 0.5, 2.0)
    assert v.headline.startswith(
        "The input comes first: 50% of each step waits for its batch: XLA "
        "made the rest 2.00x faster, the whole step 1.50x. Fix the input "
        "pipeline, then XLA's speedup shows. XLA made each step 1.50x"
    )
    # The wait cost 20 ms of each of 1000 steps: the first next step.
    assert v.next_steps[0] == {
        "code": "input-bound",
        "seconds": 20.0,
        "fix": fix,
    }
    # A short wait is not input-bound, and says nothing first.
    assert lints.input_bound(40.0, 4.0) is None
    assert lints.input_bound(0.2, 0.1) is None  # under 1 ms: the loop's
    report.epochs[0].input_ms_median = 4.0
    report.findings.clear()  # the lint found nothing to say
    quick = verdict.build(report)
    assert quick.input_share == 0.1
    assert quick.headline.startswith("XLA made each step 1.50x")
    # Where the wait is not seen (TensorFlow at several steps per call),
    # there is no figure.
    report.epochs[0].input_ms_median = None
    untimed = verdict.build(report)
    assert (untimed.input_share, untimed.compute_speedup) == (None, None)


def test_without_a_baseline_the_headline_says_why():
    report = report_with(None, None, 10, 0.5)
    report.baseline = BaselineSection(reason="turned off")
    v = verdict.build(report)
    assert v.speedup is None and v.paid_back is None
    assert v.headline.endswith("whether it paid off is unknown: turned off.")
    report.verdict = v
    assert render.summary(report).startswith("Verdict: XLA is on")


def test_the_speedup_has_a_range_and_noise_is_said():
    report = report_with(2.0, 1.6, 100_000, 0.5)
    report.baseline.speedup_low, report.baseline.speedup_high = 1.1, 1.4
    v = verdict.build(report)
    assert (v.speedup, v.speedup_low, v.speedup_high) == (1.25, 1.1, 1.4)
    assert v.headline.startswith(
        "XLA made each step 1.25x, 1.10-1.40 faster (2.00 -> 1.60 ms)"
    )
    report.baseline.speedup_low = 0.9
    noisy = verdict.build(report)
    # At the range's top (1.40x) it would pay back after 876 steps of
    # the 100,000: whether it did is unknown.
    assert noisy.paid_back is None
    assert noisy.headline == (
        "Whether XLA paid off is unknown: XLA's effect is within the noise "
        "of this run (1.25x, 0.90-1.40, 2.00 -> 1.60 ms in the baseline "
        "windows); at 1.40x its 0.5 s of compiling would pay back after "
        "876 of this run's 100,000 steps."
    )
    # In 500 steps not even the range's top pays back: it did not.
    report.epochs[0].steps = 500
    short = verdict.build(report)
    assert short.paid_back is False
    assert short.headline.startswith(
        "XLA's effect is within the noise of this run (1.25x, 0.90-1.40,"
    )
    assert short.headline.endswith(
        "compiling cost 0.5 s; even at 1.40x it would pay back only after "
        "876 steps: it did not pay off."
    )
    report.epochs[0].steps = 100_000
    # Old reports (no range) read as before.
    report.baseline.speedup_low = report.baseline.speedup_high = None
    assert "-" not in verdict.build(report).headline.split("x")[0]


def test_without_medians_the_windows_bound_the_no_xla_step():
    # No timed median, but the windows' wall time bounds the no-XLA step
    # (their first calls included): 0.06 s over 12 steps, 5 ms a step;
    # 15 steps could save at most 0.075 s against 0.9 s of compiling.
    report = report_with(None, None, 15, 0.9)
    report.baseline = BaselineSection(
        run_steps=12, window_seconds=0.06, reason="too few timed steps"
    )
    v = verdict.build(report)
    assert (v.speedup, v.paid_back, v.saving_bound_seconds) == (
        None,
        False,
        0.075,
    )
    assert v.headline == (
        "XLA is on and compiling cost 0.9 s: it did not pay off. Even if "
        "XLA's step took no time, this run's 15 steps at most 5.00 ms each "
        "without XLA could save at most 0.07 s, less than the 0.9 s of "
        "compiling."
    )


fit = quiet_fit


def test_a_real_fit_measures_its_baseline_on_real_steps():
    x, y = regression_data(16 * 15)  # 15 steps: compiling dominates
    model = conv_model()
    tuner = XLATuner(verbose=0, analyze_hlo=False, keep=True)
    fit(model, x, y, batch_size=16, epochs=1, tuner=tuner)
    report = tuner.report
    baseline, v = report.baseline, report.verdict
    assert baseline.steps >= 2 and baseline.run_steps > baseline.steps
    assert baseline.no_xla_step_ms > 0 and baseline.xla_step_ms > 0
    # Its cost: the no-XLA windows beyond the same steps with XLA, of
    # which the no-XLA step function's first call is the most on a tiny
    # model.
    with_xla = baseline.run_steps * baseline.xla_step_ms / 1000
    assert baseline.cost_seconds == pytest.approx(
        baseline.window_seconds - with_xla, abs=2e-3
    )
    assert 0 < baseline.trace_seconds < baseline.window_seconds
    assert baseline.cost_seconds > baseline.trace_seconds / 2
    assert int(model.optimizer.iterations.numpy()) == 15  # all real steps
    assert model.jit_compile is True  # XLA kept after the baseline
    assert report.total_compilations == 1  # the baseline compiles nothing
    assert v.xla_enabled and v.paid_back is False
    assert v.break_even_steps is None or v.break_even_steps > 15
    assert v.speedup == pytest.approx(
        baseline.no_xla_step_ms / baseline.xla_step_ms, rel=1e-3
    )
    out = render.full_report(report, "r").splitlines()
    assert out[1] == f"Verdict: {v.headline}"
    line = f"Baseline: {baseline.run_steps} steps without XLA"
    # Where the verdict's medians come from, against the epoch table's:
    # 12 steps of windows after a warm-up of the 2 steps the epoch has
    # room for (15 steps, and its last call).
    assert "interleaved windows, epoch 0 steps 2-13;" in render.summary(report)
    assert any(x.startswith(line) for x in out)
    assert line in render.summary(report)


def test_baseline_off_says_so_in_the_headline():
    x, y = regression_data(16 * 15)
    model = conv_model()
    tuner = XLATuner(verbose=0, analyze_hlo=False, baseline=False)
    fit(model, x, y, batch_size=16, epochs=1, tuner=tuner)
    report = tuner.report
    assert report.baseline.steps == 0 and report.baseline.cost_seconds == 0
    assert report.verdict.speedup is None
    assert report.verdict.headline.endswith(
        "unknown: the baseline window is off (XLATuner(baseline=False))."
    )
    assert int(model.optimizer.iterations.numpy()) == 15


def test_a_blocked_model_names_the_layer():
    keras.utils.set_random_seed(0)
    lookup = keras.layers.IntegerLookup(vocabulary=[1, 2, 3], name="ids")
    inputs = keras.Input((4,), dtype="int64")
    outputs = keras.layers.Dense(1)(keras.ops.cast(lookup(inputs), "float32"))
    model = keras.Model(inputs, outputs)
    model.compile("sgd", "mse")
    tuner = XLATuner(verbose=0)
    x = np.ones((16, 4), "int64")
    fit(model, x, np.ones((16, 1)), batch_size=8, tuner=tuner)
    v = tuner.report.verdict
    assert v.xla_enabled is False and v.speedup is None
    assert v.headline.startswith("XLA is off:") and "ids" in v.headline


def test_partial_batches_cost_seconds_in_next_steps():
    x, y = regression_data(40)  # 16, 16, 8
    tuner = XLATuner(verbose=0, analyze_hlo=False)
    fit(conv_model(), x, y, batch_size=16, epochs=2, tuner=tuner)
    steps = {s["code"]: s["seconds"] for s in tuner.report.verdict.next_steps}
    assert steps["partial-last-batch"] > 0


@pytest.mark.parametrize("jit", [False, True])
def test_steady_figures_follow_one_rule_with_and_without_xla(
    jit, epoch_records
):
    # The first call (tracing; compiling with XLA) is out of the steady
    # figures either way, and examples/s and the median come from the
    # same steady steps. Asserted on the records the epoch was built
    # from, not on the machine's speed (a busy machine skews a mean
    # against a median).
    from keras_xla.core.timing import ms, percentile

    taken = epoch_records
    x, y = regression_data(32 * 60)
    tuner = XLATuner(
        verbose=0, analyze_hlo=False, jit_compile=jit, baseline=False
    )
    fit(conv_model(), x, y, batch_size=32, epochs=1, tuner=tuner)
    epoch = tuner.report.epochs[0]
    (records,) = taken
    first, rest = records[0], records[1:]
    assert first.compiled == jit and (first.trace_seconds > 0 or jit)
    assert not any(r.compiled or r.trace_seconds or r.warmup for r in rest)
    assert epoch.steps == 60 and sum(r.steps for r in rest) == 59
    steady_seconds = sum(r.seconds for r in rest)
    assert epoch.examples_per_second == pytest.approx(
        32 * 59 / steady_seconds, rel=1e-3
    )
    per_step = [r.seconds_per_step for r in rest]
    assert epoch.step_time_ms["median"] == ms(percentile(per_step, 50))


def test_baseline_steps_are_bounded():
    from keras_xla.auto.policy import baseline_steps

    # A fixed small number on short epochs, a few percent on long ones,
    # at most 120; never more than 30% of a short epoch (but 12 or all).
    assert [baseline_steps(n) for n in (5, 15, 40, 60, 300)] == [
        5,
        12,
        12,
        18,
        48,
    ]
    assert baseline_steps(1000) == 50 and baseline_steps(10_000) == 120


def test_a_fifteen_step_run_did_not_pay_off_with_the_bound():
    # 5 steps an epoch, 3 epochs: the baseline's windows span epochs.
    x, y = regression_data(16 * 5)
    model = conv_model()
    tuner = XLATuner(verbose=0, analyze_hlo=False)
    fit(model, x, y, batch_size=16, epochs=3, tuner=tuner)
    report = tuner.report
    baseline, v = report.baseline, report.verdict
    assert int(model.optimizer.iterations.numpy()) == 15
    assert baseline.run_steps == 6 and baseline.span[-1][0] > 0
    assert v.paid_back is False and v.speedup is not None
    assert v.saving_bound_seconds == pytest.approx(
        baseline.no_xla_step_ms / 1000 * 15, abs=1e-3
    )
    if v.compile_seconds > v.saving_bound_seconds:
        assert "Even if XLA's step took no time" in v.headline
    assert "unknown" not in v.headline


def test_data_of_unknown_length_gets_a_measured_verdict():
    import tensorflow as tf

    x, y = regression_data(16 * 40)
    data = tf.data.Dataset.from_tensor_slices((x, y)).batch(16)
    data = data.filter(lambda a, b: True)  # cardinality unknown
    assert int(data.cardinality()) == tf.data.UNKNOWN_CARDINALITY
    model = conv_model()
    tuner = XLATuner(verbose=0, analyze_hlo=False)
    fit(model, data, epochs=2, tuner=tuner)
    report = tuner.report
    baseline, v = report.baseline, report.verdict
    assert int(model.optimizer.iterations.numpy()) == 80  # all real steps
    assert baseline.reason == "" and baseline.span[0][0] == 1
    assert baseline.no_xla_step_ms > 0 and v.speedup is not None
    assert v.paid_back is not None and "unknown" not in v.headline
    assert report.total_compilations == 1


@pytest.mark.parametrize("steps", [90, 33])
def test_a_single_epoch_of_unknown_length_gets_a_measured_verdict(steps):
    # One epoch, length unknown: the baseline runs in it (warm-up 20 XLA
    # steps, then windows of 8 calls, XLA first). 90 steps hold them all;
    # 33 end in the first no-XLA window, where Keras's end-of-data call
    # of the no-XLA function advances the optimizer's step count: the
    # tuner gives it back, so the count is the steps trained, as
    # without the tuner.
    import tensorflow as tf

    x, y = regression_data(16 * steps)
    data = tf.data.Dataset.from_tensor_slices((x, y)).batch(16)
    data = data.filter(lambda a, b: True)  # cardinality unknown
    model = conv_model()
    tuner = XLATuner(verbose=0, analyze_hlo=False)
    fit(model, data, epochs=1, tuner=tuner)
    report = tuner.report
    baseline, v = report.baseline, report.verdict
    assert int(model.optimizer.iterations.numpy()) == steps
    assert report.epochs[0].steps == steps
    assert report.total_compilations == 1  # the baseline compiles nothing
    assert model.jit_compile is False  # the user's setting is back
    if steps == 90:
        assert baseline.reason == "" and baseline.rounds == 3
        assert baseline.span == [[0, 20], [0, 67]]
        # Each side's first window settles: the medians rest on the
        # other two (7 timed steps each), and the summary says so.
        assert baseline.settling_rounds == 1 and baseline.steps == 14
        assert "medians of the last 2 of 3 rounds of interleaved" in (
            render.summary(report)
        )
        assert baseline.no_xla_step_ms > 0 and v.speedup is not None
        assert v.paid_back is not None and "unknown" not in v.headline
    else:
        # 5 no-XLA steps, the first not timed: a baseline of 4 steps.
        assert baseline.reason == "" and baseline.run_steps == 5
        assert baseline.steps == 4 and v.speedup is not None
        assert baseline.rounds == 1  # the rounds that ran
