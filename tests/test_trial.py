"""The XLA/precision trial: schedule, timing rules, decision, and live runs
that must pick a planted winner."""

import dataclasses
import json

import numpy as np
import pytest
from conftest import conv_model, regression_data

from keras_xla import precision as precision_lib
from keras_xla.auto import policy
from keras_xla.auto import runner as trial_runner
from keras_xla.auto.model_state import plan_candidates
from keras_xla.auto.policy import Candidate, Drop
from keras_xla.auto.trial import Trial, unbursted
from keras_xla.core.timing import StepRecord

A = Candidate(False, "float32")
B = Candidate(True, "float32")
C = Candidate(True, "mixed_bfloat16")


@pytest.fixture
def recommend(monkeypatch):
    """`recommend(policy)`: the hardware recommendation the trial sees."""

    def set_policy(policy):
        monkeypatch.setattr(
            precision_lib,
            "recommend_policy",
            lambda *args: (policy, "test"),
        )

    return set_policy


def fit_trial(model, x, y, batch_size=32, epochs=1, **tuner_args):
    """Fits `model` with an XLATuner(verbose=0, **tuner_args); returns it."""
    from keras_xla import XLATuner

    tuner = XLATuner(verbose=0, keep=True, **tuner_args)
    model.fit(
        x,
        y,
        batch_size=batch_size,
        epochs=epochs,
        callbacks=[tuner],
        verbose=0,
    )
    return tuner


def no_dropping(monkeypatch):
    """Counting, not dropping: every candidate gets all its windows."""
    unbounded = dataclasses.replace(policy.TUNABLES, drop_factor=float("inf"))
    monkeypatch.setattr(policy, "TUNABLES", unbounded)


def record(seconds, compiled=False, trace=0.0, steps=1):
    r = StepRecord("train", 0, seconds, fallback_steps=steps)
    if compiled:
        r.new = [(0, 0)]
    r.trace_seconds = trace
    return r


def run_plan(trial, seconds_of, trace_of=None):
    """Feeds the trial one record per planned call, as the tuner does
    (`trace_of(candidate, first)`: the call's trace seconds)."""
    records = []
    while not trial.done:
        if trial.boundary():
            trial.close_window(records)
            if trial.done:  # the last candidates were dropped
                return records
        candidate = trial.current()
        trial.advance()
        first = not any(r._candidate == candidate for r in records)
        r = record(
            seconds_of(candidate, first),
            compiled=first and candidate.jit,
            trace=trace_of(candidate, first) if trace_of else 0.0,
        )
        r._candidate = candidate
        records.append(r)
    trial.close_window(records)
    return records


def test_schedule_rotates_candidates_in_equal_windows():
    trial = Trial([A, B, C], A, window_calls=3)
    windows = [trial.plan[i] for i in range(0, len(trial.plan), 3)]
    assert windows == [A, B, C, B, C, A, C, A, B]
    assert len(trial.plan) == policy.TUNABLES.rounds * 3 * 3


def test_decision_skips_warmup_and_compiled_calls():
    # The first call of every window is 10x slow (a switch), the first of a
    # candidate 1000x (its compile): neither may count.
    speed = {A: 0.004, B: 0.002, C: 0.003}

    def seconds(candidate, first):
        return speed[candidate] * (1000 if first else 1)

    trial = Trial([A, B, C], A, window_calls=4, drop=False)
    trial.run_steps = 1000
    records = run_plan(trial, seconds)
    winner, decision = trial.decide()
    # Its cost: the first calls (999x their step) beyond the one a run on
    # the winner alone makes, the larger of the trial's first (A's, which
    # paid the fit's start) and the winner's, and the rest of the wall
    # time beyond 36 steps of the winner; its saving: 2 ms a step against
    # the default over the other 964 steps.
    wall = sum(r.seconds for r in records)
    firsts = 999 * (0.002 + 0.003)
    slower = wall - 36 * 0.002 - firsts - 999 * 0.004
    assert decision.first_call_seconds == pytest.approx(firsts, abs=1e-3)
    assert decision.slow_window_seconds == pytest.approx(slower, abs=1e-3)
    # Slower windows: A's 12 steps 2 ms slower each, C's 12 1 ms slower.
    assert slower == pytest.approx(12 * 0.002 + 12 * 0.001)
    assert decision.trial_cost_seconds == pytest.approx(firsts + slower)
    assert decision.saving_seconds == pytest.approx(0.002 * 964)
    assert winner == B
    rows = {row["name"]: row for row in decision["candidates"]}
    # 3 windows of 4 calls, the first call of each left out.
    assert rows["xla/float32"]["measured_steps"] == 9
    assert rows["xla/float32"]["median_step_ms"] == pytest.approx(2.0)
    assert rows["no_xla/float32"]["median_step_ms"] == pytest.approx(4.0)
    assert rows["xla/float32"]["compile_seconds"] == pytest.approx(
        2.0 - 0.002, abs=1e-3
    )
    assert decision["status"] == "decided"
    assert decision["winner"] == "xla/float32"
    assert decision["default"] == "no_xla/float32"
    assert decision["speedup_vs_default"] == pytest.approx(2.0)
    # Steps without spread: a range of one point.
    assert (decision.speedup_low, decision.speedup_high) == (2.0, 2.0)
    # 1.998 s of compiling at 2 ms saved per step.
    assert decision["break_even_steps"] == 999
    assert decision["trial_steps"] == 36


def test_cost_of_an_xla_winner_that_called_a_traced_step():
    # A (the fit's first call) and D trace their step in their first
    # calls (0.5 s); B, XLA at A's precision, calls A's traced step and
    # compiles it. A run on B alone would pay the trace and the compile:
    # A's trace and B's first call. Beyond it: the rest of A's first call
    # (building its graph) and D's first call.
    D = Candidate(False, "mixed_bfloat16")
    speed = {A: 0.004, B: 0.002, D: 0.003}
    firsts = {A: 4.0, B: 6.0, D: 2.0}

    def seconds(candidate, first):
        return firsts[candidate] if first else speed[candidate]

    def trace(candidate, first):
        return 0.5 if first and not candidate.jit else 0.0

    trial = Trial([A, D, B], A, window_calls=4, drop=False)
    trial.run_steps = 1000
    run_plan(trial, seconds, trace)
    winner, decision = trial.decide()
    assert winner == B
    assert decision.first_call_seconds == pytest.approx(
        (4.0 - 0.004 - 0.5) + (2.0 - 0.003)
    )
    # Had B traced the step itself, its first call alone is that run's.
    trial = Trial([A, D, B], A, window_calls=4, drop=False)
    trial.run_steps = 1000
    run_plan(trial, seconds, lambda c, first: 0.5 if first else 0.0)
    _, decision = trial.decide()
    assert decision.first_call_seconds == pytest.approx(
        (4.0 - 0.004) + (2.0 - 0.003)
    )


def test_the_decisions_speedup_has_the_range_of_its_windows():
    from keras_xla.core import render

    # The default's steps 3-5 ms, the winner's 1.8-2.2 ms: the range holds
    # the ratio of medians (4 / 2) and the rounds' own ratios.
    steps = {A: [0.003, 0.004, 0.005], B: [0.0018, 0.002, 0.0022]}
    calls = {A: 0, B: 0}

    def seconds(c, first):
        calls[c] += 1
        return steps[c][calls[c] % 3] + (1.0 if first else 0.0)

    trial = Trial([A, B], A, window_calls=4, drop=False)
    run_plan(trial, seconds)
    winner, decision = trial.decide()
    assert winner == B and decision.speedup_vs_default == pytest.approx(2.0)
    assert decision.speedup_low < 2.0 < decision.speedup_high
    assert decision.speedup_high / decision.speedup_low < 5 / 1.8 / (3 / 2.2)
    low, high = decision.speedup_low, decision.speedup_high
    assert f"2.00x ({low:.2f}-{high:.2f}) Keras's default" in " ".join(
        render.decision_line(decision)
    )


def test_traced_calls_and_too_few_steps():
    trial = Trial([A, B], A, window_calls=3)
    trial.advance()
    trial.close_window([record(0.01), record(0.001, trace=0.5), record(0.002)])
    winner, decision = trial.decide()
    assert winner is None
    assert decision["status"] == "skipped"
    assert "no_xla/float32" in decision["reason"]
    assert decision["candidates"][0]["measured_steps"] == 1


def test_winner_equal_to_default_breaks_even_at_once():
    trial = Trial([A, B], A, window_calls=3)
    run_plan(trial, lambda c, first: 0.001 if c == A else 0.003)
    winner, decision = trial.decide()
    assert winner == A
    assert decision["speedup_vs_default"] == 1.0
    assert decision.speedup_low is None  # the default against itself
    assert decision["break_even_steps"] == 0


def test_clearly_slower_candidates_get_no_more_windows():
    speed = {A: 0.001, B: 0.003, C: 0.0011}
    trial = Trial([A, B, C], A, window_calls=3)
    planned = len(trial.plan)
    run_plan(trial, lambda c, first: speed[c])
    # After its first window (the second of 3 calls) B is dropped: its
    # fastest step (3 ms) is over 1.3x the best median so far (1 ms).
    assert trial.dropped == {B: 6}
    assert len(trial.plan) == planned - 2 * 3  # B's two later windows
    winner, decision = trial.decide()
    assert winner == A
    rows = {r.name: r for r in decision.candidates}
    assert rows[B.name].dropped_after_steps == 6
    assert rows[B.name].measured_steps == 2
    assert rows[C.name].measured_steps == 6
    assert decision.trial_steps == planned - 6


def test_an_unmeasured_candidate_predicted_slower_is_never_compiled():
    # The XLA x precision grid: no XLA 5.5 ms (float32) and 4.1 ms
    # (bfloat16), XLA bfloat16 5.9 ms (first in the plan). XLA float32 is
    # predicted at 5.9 x 5.5 / 4.1 = 7.9 ms, over 1.3 x 4.1: it never runs.
    A32, A16 = Candidate(False, "float32"), Candidate(False, "mixed_bfloat16")
    X32, X16 = Candidate(True, "float32"), Candidate(True, "mixed_bfloat16")
    speed = {A32: 0.0055, A16: 0.0041, X32: 0.0073, X16: 0.0059}
    trial = Trial([A32, A16, X16, X32], A32, window_calls=3, drop=True)
    records = run_plan(trial, lambda c, first: speed[c])
    assert not any(r._candidate == X32 for r in records)
    assert trial.dropped_because == {
        X16: Drop.SLOWER,
        X32: Drop.PREDICTED,
        A32: Drop.SLOWER,
    }
    winner, decision = trial.decide()
    assert winner == A16 and decision.status == "decided"
    rows = {r.name: r for r in decision.candidates}
    assert rows[X32.name].measured_steps == 0
    assert rows[X32.name].dropped_after_steps is not None


def test_a_compile_that_cannot_pay_back_is_never_tried():
    # A step function's first call costs 0.7 s. With 40 steps in the run,
    # after the first no-XLA window the 37 steps left take 0.19 s at 5 ms,
    # under 0.3 of that first call (the bound while it is the only one):
    # an XLA first call (its compile of the step) cannot pay back even if
    # XLA's step took no time, so neither XLA candidate runs.
    A32, A16 = Candidate(False, "float32"), Candidate(False, "mixed_bfloat16")
    X32, X16 = Candidate(True, "float32"), Candidate(True, "mixed_bfloat16")
    speed = {A32: 0.005, A16: 0.004, X32: 0.001, X16: 0.001}

    def seconds(c, first):
        return speed[c] + (0.7 if first else 0.0)

    def trial_of(run_steps):
        trial = Trial([A32, A16, X32, X16], A32, window_calls=3, rounds=2)
        trial.run_steps = run_steps
        return trial, run_plan(trial, seconds)

    trial, records = trial_of(40)
    assert {r._candidate for r in records} == {A32, A16}
    assert trial.dropped == {X32: 3, X16: 3}
    assert set(trial.dropped_because.values()) == {Drop.PAYBACK}
    winner, decision = trial.decide()
    assert winner == A16 and decision.status == "decided"
    assert decision.reason.endswith(
        "; xla/float32, xla/mixed_bfloat16 not tried (an XLA compile could "
        "not pay back in the steps left)"
    )
    rows = {r.name: r for r in decision.candidates}
    assert rows[X32.name].dropped_because == Drop.PAYBACK
    # jit_compile="auto" alone: two candidates, and the same rule.
    pair = Trial([A32, X32], A32, window_calls=3, rounds=2)
    pair.run_steps = 40
    assert {r._candidate for r in run_plan(pair, seconds)} == {A32}
    assert pair.decide()[0] == A32 and pair.dropped == {X32: 3}
    # A run of 1000 steps leaves 5 s: XLA is tried, and wins.
    trial, records = trial_of(1000)
    assert X32 in {r._candidate for r in records}
    assert Drop.PAYBACK not in trial.dropped_because.values()
    assert trial.decide()[0] in (X32, X16)


def test_an_xla_candidate_predicted_not_to_pay_back_is_never_compiled():
    # No XLA takes 6 ms at float32 and 6.6 ms at bfloat16, so XLA at
    # float32 compiles first: 4 ms, and 2 s to compile. The grid predicts
    # XLA at bfloat16 at 4 * 6.6 / 6 = 4.4 ms: not clearly slower than the
    # best 4 ms. Anywhere from 1.3x faster to 1.3x slower than that
    # (3.38-5.72 ms), it is expected to save 0.081 ms a step: 0.08 s over
    # the ~980 steps left of a 1000-step run, under the 2 s its compile
    # costs, so it is never compiled. Over a 100,000-step run that is
    # 8.1 s: it is tried.
    A32, A16 = Candidate(False, "float32"), Candidate(False, "mixed_bfloat16")
    X32, X16 = Candidate(True, "float32"), Candidate(True, "mixed_bfloat16")
    speed = {A32: 0.006, A16: 0.0066, X32: 0.004, X16: 0.0044}

    def seconds(c, first):
        return speed[c] + (2.0 if first and c.jit else 0.0)

    def trial_of(run_steps):
        trial = Trial([A32, A16, X32, X16], A32, window_calls=3, rounds=2)
        trial.run_steps = run_steps
        return trial, run_plan(trial, seconds)

    trial, records = trial_of(1000)
    assert X16 not in {r._candidate for r in records}
    slower = {A32: Drop.SLOWER, A16: Drop.SLOWER}
    assert trial.dropped_because == {
        **slower,
        X16: Drop.PREDICTED_PAYBACK,
    }
    winner, decision = trial.decide()
    assert winner == X32
    assert decision.reason.endswith(
        "; xla/mixed_bfloat16 not tried (at the speed the other candidates "
        "predict, its compile is not expected to pay back in the steps left)"
    )
    trial, records = trial_of(100_000)
    assert X16 in {r._candidate for r in records}
    assert trial.decide()[0] == X32


def test_the_expected_saving_of_a_prediction_weighs_its_error_band():
    # Uniform from 1.3x faster to 1.3x slower than predicted; a step
    # slower than the best saves nothing.
    assert policy.expected_saving(0.4, 0.6) == 0.0
    # Predicted at 10 ms against a best of 10 ms: the band's fast part
    # (7.69-10 ms, 43% of it) saves 1.15 ms on average: 0.50 ms.
    assert policy.expected_saving(0.010, 0.010) == pytest.approx(
        (0.010 - 0.010 / 1.3) ** 2 / (2 * (0.013 - 0.010 / 1.3))
    )
    assert policy.expected_saving(0.010, 0.010) == pytest.approx(
        0.000502, abs=1e-6
    )
    # The whole band faster than the best: the best less the band's mean.
    assert policy.expected_saving(0.020, 0.010) == pytest.approx(
        0.020 - (0.010 / 1.3 + 0.013) / 2
    )
    # The ResNet-50 run this rule was written for (2-core CPU): XLA at
    # bfloat16 predicted at 510 ms against the best's 467 ms, 282 steps
    # left, and XLA at float32's first call took 16.6 s. Counting only the
    # band's fast end (392 ms) it would save 21 s and was compiled; it ran
    # at 640 ms. Its expected saving is 10.3 ms a step, 2.9 s in all.
    xla16 = Candidate(True, "mixed_bfloat16")
    drops = policy.cannot_pay_back(
        untried=[xla16],
        left=282,
        best=0.467,
        traces=[19.8, 9.5, 16.6],
        compiles=[16.6],
        predict=lambda c: 0.510,
    )
    assert drops == {xla16: Drop.PREDICTED_PAYBACK}
    assert policy.expected_saving(0.467, 0.510) * 282 == pytest.approx(
        2.9, abs=0.05
    )


def test_a_trial_of_two_ends_when_one_is_dropped_and_a_baseline_does_not():
    speed = {A: 0.001, B: 0.004}
    trial = Trial([A, B], A, window_calls=3)
    run_plan(trial, lambda c, first: speed[c])
    assert trial.dropped == {B: 6} and len(trial.plan) == 6
    assert trial.decide()[0] == A
    baseline = Trial([A, B], A, window_calls=3, drop=False)
    run_plan(baseline, lambda c, first: speed[c])
    assert baseline.dropped == {} and len(baseline.plan) == 18


def test_budget_and_window_size():
    assert policy.budget_steps(0.25, 400) == 100
    assert policy.budget_steps(120, None) == 120
    assert policy.budget_steps(0.25, None) is None
    assert policy.window_calls(100, 4, 1) == 8
    assert policy.window_calls(35, 4, 1) == 0
    assert policy.window_calls(36, 4, 1) == 3
    assert policy.window_calls(10_000, 2, 1) == policy.TUNABLES.max_window_calls
    assert policy.window_calls(100, 2, 4) == 4
    # Three rounds where the budget allows, else two.
    assert policy.schedule(36, 4, 1) == (3, 3)
    assert policy.schedule(35, 4, 1) == (4, 2)
    assert policy.schedule(24, 4, 1) == (3, 2)
    # One round (no rotation) only where two do not fit.
    assert policy.schedule(23, 4, 1) == (5, 1)
    assert policy.schedule(11, 4, 1) == (0, 0)
    assert policy.minimum_steps(4, 2, rounds=2) == 48  # 2 x 4 x 3 x 2
    assert policy.minimum_steps(4, 2) == 24  # one round
    # A short run: raised to two rounds where they fit in 0.6 of the run,
    # else to one where the run holds it; a run too short for one keeps
    # its budget (and skips).
    run = policy.run_budget
    assert run(0.25, 40, 1, 4, 1) == 24
    assert run(0.25, 20, 1, 4, 1) == 12
    assert run(0.25, 16, 1, 4, 1) == 12
    assert run(0.25, 12, 1, 4, 1) == 12
    assert run(0.25, 11, 1, 4, 1) == 2
    assert run(0.25, 10, 1, 2, 1) == 6
    assert run(0.25, 6, 1, 2, 1) == 6
    assert run(0.25, 5, 1, 2, 1) == 1
    assert run(0.25, 10, 3, 2, 1) == 12  # 30 steps in the run
    for bad in (0, -1, 0.0, 1.5, "a", True):
        with pytest.raises(ValueError, match="trial_budget"):
            policy.validate_budget(bad)


def test_candidates_follow_what_configure_jit_allowed(recommend):
    recommend("mixed_bfloat16")
    model = conv_model(jit_compile=False)
    plan = plan_candidates

    def names(*args):
        return [c.name for c in plan(*args, model)[0]]

    assert names("auto", "auto", True) == [
        "no_xla/float32",
        "no_xla/mixed_bfloat16",
        "xla/float32",
        "xla/mixed_bfloat16",
    ]
    assert names("auto", None, False) == ["no_xla/float32"]
    # XLA asked for but blocked (a StringLookup layer, say): no XLA
    # candidate.
    assert names(True, "auto", False) == [
        "no_xla/float32",
        "no_xla/mixed_bfloat16",
    ]
    assert names(True, "mixed_bfloat16", True) == ["xla/mixed_bfloat16"]
    # On a CPU-only machine Keras's "auto" is off.
    assert plan("auto", "auto", True, model)[1].name == "no_xla/float32"


class Planted:
    """A layer that burns time under one compute dtype only."""

    @staticmethod
    def build(slow_dtype):
        import keras

        class SlowUnder(keras.layers.Layer):
            def call(self, x):
                if self.compute_dtype == slow_dtype:
                    # Depends on the batch, so it cannot be folded away.
                    m = keras.ops.ones((384, 384), x.dtype) + keras.ops.mean(x)
                    burn = m
                    for _ in range(12):
                        burn = keras.ops.matmul(burn, m) * 1e-3
                    x = x + keras.ops.sum(burn) * 0.0
                return x

        keras.utils.set_random_seed(0)
        inputs = keras.Input((16, 4))
        h = keras.layers.Conv1D(8, 3)(inputs)
        h = SlowUnder()(h)
        h = keras.layers.GlobalAveragePooling1D()(h)
        model = keras.Model(inputs, keras.layers.Dense(1)(h))
        model.compile("adam", "mse", jit_compile=False)
        return model


@pytest.mark.parametrize(
    "slow_dtype, winner",
    [
        ("float32", "no_xla/mixed_bfloat16"),
        ("bfloat16", "no_xla/float32"),
    ],
)
def test_trial_picks_the_planted_winner(recommend, slow_dtype, winner):
    recommend("mixed_bfloat16")

    model = Planted.build(slow_dtype)
    x, y = regression_data(16 * 80)
    tuner = fit_trial(
        model,
        x,
        y,
        16,
        2,
        jit_compile=False,
        mixed_precision="auto",
        trial_budget=0.5,
    )
    decision = tuner.report.decision
    assert decision["status"] == "decided"
    assert decision["winner"] == winner
    medians = {c["name"]: c["median_step_ms"] for c in decision["candidates"]}
    assert min(medians, key=medians.get) == winner
    # The planted loser is clearly slower: it is dropped after its first
    # window, and with one candidate left the trial ends there (one window
    # each of 6 calls, not the 3 rounds planned: 36 steps).
    rows = {c["name"]: c for c in decision["candidates"]}
    (loser,) = [n for n in rows if n != winner]
    assert rows[loser]["dropped_after_steps"] == 12
    assert rows[winner]["dropped_after_steps"] is None
    assert decision["trial_steps"] == 12
    assert all(c["measured_steps"] >= 2 for c in decision["candidates"])
    policy = winner.split("/")[1]
    assert model.dtype_policy.name == policy
    assert model.layers[2].dtype_policy.name == policy  # the planted layer
    assert model.layers[-1].dtype_policy.name == "float32"  # the output
    # The rest of the run trained in the winner's configuration: the
    # second epoch is as fast as the winner was in the trial.
    second = tuner.report.epochs[1].step_time_ms["median"]
    loser = max(medians.values())
    assert second < loser


def test_live_trial_with_xla_is_consistent(profiled, tmp_path, xla_tried):
    import tensorflow as tf
    from tensorboard.backend.event_processing import event_accumulator

    from keras_xla import XLATuner

    model = conv_model(jit_compile=False)
    x, y = regression_data(32 * 60 + 8)
    tuner = XLATuner(
        log_dir=str(tmp_path),
        jit_compile="auto",
        trial_budget=36,
        analyze_hlo=False,
        verbose=0,
        keep=True,
    )
    with profiled() as events:
        model.fit(
            x,
            y,
            batch_size=32,
            epochs=2,
            callbacks=[tuner],
            verbose=0,
            validation_data=(x[:40], y[:40]),
        )
    report = tuner.report
    decision = report.decision
    names = [c["name"] for c in decision["candidates"]]
    assert names == ["no_xla/float32", "xla/float32"]
    assert decision["default"] == "no_xla/float32"
    winner_jit = decision["winner"] == "xla/float32"
    assert model.jit_compile is winner_jit
    assert report.jit.enabled is winner_jit and report.jit.requested == "auto"
    # Every XLA compilation, the trial's included, is counted.
    assert report.total_compilations == len(events)
    train_first = [c for c in report.compile_log if c.function == "train"]
    # The XLA candidate compiled its train step (full batch, and the
    # partial last batch if it won).
    assert train_first and train_first[0].epoch == 0
    data = json.loads((tmp_path / "xla_report.json").read_text())
    assert data["decision"]["winner"] == decision["winner"]
    acc = event_accumulator.EventAccumulator(
        str(tmp_path / "train"), size_guidance={"tensors": 0}
    )
    acc.Reload()
    jit_points = [
        float(tf.make_ndarray(e.tensor_proto))
        for e in acc.Tensors("xla/jit_compile")
    ]
    assert jit_points == [float(winner_jit)] * 2
    assert len(acc.Tensors("xla/decision")) == 1


def test_second_fit_reuses_the_decision():

    model = conv_model(jit_compile=False)
    x, y = regression_data(32 * 40)
    tuner = fit_trial(model, x, y, jit_compile="auto", trial_budget=24)
    first = tuner.report.decision
    model.fit(x, y, batch_size=32, epochs=1, callbacks=[tuner], verbose=0)
    again = tuner.report.decision
    assert again["status"] == "reused"
    assert again["winner"] == first["winner"]
    assert tuner.report.total_compilations == 0


def test_trial_decides_on_a_short_first_epoch(recommend, tmp_path, monkeypatch):
    # 40 steps, four candidates: trial_budget=0.25 gives 10 steps, too few;
    # the trial takes the 24 it needs (two rounds of 3-call windows).
    recommend("mixed_bfloat16")
    monkeypatch.setenv("KERAS_XLA_CACHE_DIR", str(tmp_path))
    x, y = regression_data(8 * 40)
    model = conv_model(jit_compile=False)
    auto = dict(jit_compile="auto", mixed_precision="auto")
    tuner = fit_trial(model, x, y, 8, 1, **auto)
    decision = tuner.report.decision
    assert decision["status"] == "decided"
    assert len(decision["candidates"]) == 4
    assert decision["trial_steps"] <= 24
    assert "trial-skipped" not in tuner.report.finding_codes()
    assert tuner.report.epochs[0].steps == 40
    # 40 steps of about 2 ms cannot pay back an XLA compile: neither XLA
    # candidate runs, and the decision is kept for runs up to 40 steps.
    rows = {c.name: c for c in decision.candidates}
    for name in ("xla/float32", "xla/mixed_bfloat16"):
        assert rows[name].measured_steps == 0
        assert rows[name].dropped_because == Drop.PAYBACK
    assert tuner.report.total_compilations == 0
    with open(tmp_path / "trial_decisions.json") as f:
        (entry,) = json.load(f).values()
    assert entry["winner"] == decision.winner and entry["up_to_steps"] == 40
    # A run as long starts on it with no trial; a longer one tries again.
    again = fit_trial(model, x, y, 8, 1, **auto).report.decision
    assert again.status == "remembered" and again.winner == decision.winner
    assert "for runs of up to 40 steps:" in again.reason
    longer = fit_trial(model, x, y, 8, 2, **auto).report.decision
    assert longer.status == "decided"


def test_trial_skipped_when_the_epoch_is_too_short():
    from keras_xla import XLATuner

    # 5 steps: two candidates need 6 (one round of 3 calls each), more
    # than the run has.
    model = conv_model(jit_compile=False)
    x, y = regression_data(32 * 5)
    tuner = XLATuner(jit_compile="auto", verbose=0)
    with pytest.warns(UserWarning, match="trial-skipped"):
        model.fit(x, y, batch_size=32, epochs=1, callbacks=[tuner], verbose=0)
    report = tuner.report
    assert report.decision["status"] == "skipped"
    assert "budget is 1 step (" in report.decision["reason"]  # 0.25 of 5
    assert "at least 6" in report.decision["reason"]
    finding = next(f for f in report.findings if f.code == "trial-skipped")
    assert "6 steps" in finding.fix
    # The model trains as compiled: XLA stays off.
    assert model.jit_compile is False and report.jit.enabled is False


def test_trial_decides_on_a_ten_step_run_in_one_round():
    from keras_xla import XLATuner

    # 10 steps, two candidates: two rounds (12 steps) do not fit in 0.6 of
    # the run, one round (6) does. After the no-XLA window the 7 steps
    # left cannot pay back an XLA compile, so it is never tried.
    model = conv_model(jit_compile=False)
    x, y = regression_data(32 * 10)
    tuner = XLATuner(jit_compile="auto", verbose=0, trial_memory=False)
    model.fit(x, y, batch_size=32, epochs=1, callbacks=[tuner], verbose=0)
    decision = tuner.report.decision
    assert decision.status == "decided" and decision.winner == "no_xla/float32"
    assert decision.trial_steps == 3
    rows = {c.name: c for c in decision.candidates}
    assert rows["xla/float32"].dropped_because == Drop.PAYBACK
    assert tuner.report.total_compilations == 0
    assert int(model.optimizer.iterations.numpy()) == 10
    assert "trial-skipped" not in tuner.report.finding_codes()


def test_four_candidates_decide_on_a_run_that_holds_one_round(recommend):
    from keras_xla import XLATuner

    # 14 steps, four candidates: one round (12 steps) is over 0.6 of the
    # run but fits in it. The steps left after the first no-XLA window
    # cannot pay back an XLA compile: both XLA candidates are dropped
    # before they compile, and the trial ends after the second window.
    recommend("mixed_bfloat16")
    model = conv_model(jit_compile=False)
    x, y = regression_data(32 * 14)
    tuner = XLATuner(
        jit_compile="auto",
        mixed_precision="auto",
        verbose=0,
        trial_memory=False,
    )
    model.fit(x, y, batch_size=32, epochs=1, callbacks=[tuner], verbose=0)
    decision = tuner.report.decision
    assert decision.status == "decided"
    assert decision.winner in ("no_xla/float32", "no_xla/mixed_bfloat16")
    assert decision.trial_steps == 6
    rows = {c.name: c for c in decision.candidates}
    for name in ("xla/float32", "xla/mixed_bfloat16"):
        assert rows[name].dropped_because == Drop.PAYBACK
        assert rows[name].measured_steps == 0
    assert tuner.report.total_compilations == 0
    assert int(model.optimizer.iterations.numpy()) == 14
    assert "trial-skipped" not in tuner.report.finding_codes()


def test_trial_drives_xlamodel(profiled, xla_tried):
    import keras

    from keras_xla import XLAModel, XLATuner

    keras.utils.set_random_seed(0)
    inputs = keras.Input((16, 4))
    h = keras.layers.GlobalAveragePooling1D()(keras.layers.Conv1D(8, 3)(inputs))
    model = XLAModel(inputs, keras.layers.Dense(1)(h))
    model.compile("adam", "mse", jit_compile=False)
    x, y = regression_data(32 * 40)
    tuner = XLATuner(
        jit_compile="auto",
        trial_budget=24,
        analyze_hlo=False,
        verbose=0,
        keep=True,
    )
    with profiled() as events:
        model.fit(x, y, batch_size=32, epochs=1, callbacks=[tuner], verbose=0)
    decision = tuner.report.decision
    assert decision["status"] == "decided"
    # Two timed steps each at least (fewer windows for a dropped one).
    assert all(c["measured_steps"] >= 2 for c in decision["candidates"])
    assert model.jit_compile is (decision["winner"] == "xla/float32")
    # XLAModel compiles its per-replica step once, in the XLA windows.
    assert tuner.report.total_compilations == len(events) == 1


def test_float16_candidate_gets_and_gives_back_loss_scaling(recommend):
    import keras

    recommend("mixed_float16")
    model = conv_model(jit_compile=False)
    inner = model.optimizer
    x, y = regression_data(32 * 40)
    tuner = fit_trial(
        model, x, y, jit_compile=False, mixed_precision="auto", trial_budget=24
    )
    decision = tuner.report.decision
    assert decision["status"] == "decided"
    names = [c["name"] for c in decision["candidates"]]
    assert names == ["no_xla/float32", "no_xla/mixed_float16"]
    scaled = isinstance(model.optimizer, keras.optimizers.LossScaleOptimizer)
    assert scaled is (decision["winner"] == "no_xla/mixed_float16")
    if not scaled:
        assert model.optimizer is inner
    # Both optimizers stepped the same variables: one step count.
    assert int(inner.iterations.numpy()) == 40
    assert all(np.isfinite(w).all() for w in model.get_weights())


def test_trial_silences_tensorflows_retracing_warning_only_while_it_runs():
    import logging

    from keras_xla import XLATuner

    records = []

    class Keep(logging.Handler):
        def emit(self, record):
            records.append(record.getMessage())

    tf_logger = logging.getLogger("tensorflow")
    handler = Keep()
    tf_logger.addHandler(handler)
    try:
        x, y = regression_data(32 * 40)
        # Earlier models' step functions count towards TensorFlow's
        # frequent-retracing detector, as in a notebook session.
        for _ in range(3):
            conv_model().fit(x[:64], y[:64], batch_size=32, verbose=0)
        tuner = XLATuner(
            jit_compile="auto", trial_budget=24, analyze_hlo=False, verbose=0
        )
        model = conv_model(jit_compile=False)
        model.fit(x, y, batch_size=32, epochs=1, callbacks=[tuner], verbose=0)
    finally:
        tf_logger.removeHandler(handler)
    assert tuner.report.decision["status"] == "decided"
    assert not [m for m in records if "tf.function retracing" in m]
    assert trial_runner.RETRACE_FILTER not in tf_logger.filters


def test_trial_with_steps_per_execution_counts_steps_not_calls(
    monkeypatch, xla_tried
):
    from keras_xla import XLATuner

    # Counting, not dropping: every candidate gets all its windows.
    no_dropping(monkeypatch)
    model = conv_model(steps_per_execution=2, jit_compile=False)
    x, y = regression_data(32 * 60)
    # 36 steps = 18 calls of 2 steps: 3 rounds x 2 candidates x 3 calls.
    tuner = fit_trial(model, x, y, jit_compile="auto", trial_budget=36)
    decision = tuner.report.decision
    assert decision["status"] == "decided"
    assert decision["trial_steps"] == 36
    # Each window's first call is left out: 3 windows x 2 calls x 2 steps.
    assert [c["measured_steps"] for c in decision["candidates"]] == [12, 12]
    # An epoch of 10 steps cannot hold the fewest a trial decides on:
    # one round of 2 candidates x 3 calls of 2 steps.
    short = XLATuner(jit_compile="auto", trial_budget=10, verbose=0)
    with pytest.warns(UserWarning, match="trial-skipped"):
        conv_model(steps_per_execution=2, jit_compile=False).fit(
            x[: 32 * 10], y[: 32 * 10], batch_size=32, epochs=1,
            callbacks=[short], verbose=0,
        )  # fmt: skip
    assert "at least 12" in short.report.decision["reason"]


def test_trial_skipped_when_the_epoch_length_is_unknown():
    import tensorflow as tf

    from keras_xla import XLATuner

    x, y = regression_data(32 * 60)

    def batches():
        for i in range(0, len(x), 32):
            yield x[i : i + 32], y[i : i + 32]

    spec = (
        tf.TensorSpec((None, 16, 4), tf.float32),
        tf.TensorSpec((None, 1), tf.float32),
    )
    ds = tf.data.Dataset.from_generator(batches, output_signature=spec)
    tuner = XLATuner(jit_compile="auto", verbose=0)
    with pytest.warns(UserWarning, match="trial-skipped"):
        conv_model(jit_compile=False).fit(
            ds, epochs=1, callbacks=[tuner], verbose=0
        )
    assert "length is unknown" in tuner.report.decision["reason"]
    assert tuner.report.jit.enabled is False  # as compiled
    # Compiled with XLA on, the model trains with it, so the no-XLA
    # baseline runs in the epoch (20 XLA steps, then windows of 8 calls:
    # the data ends in the third no-XLA window), and the verdict is
    # measured; the optimizer's step count is the 60 steps trained.
    model = conv_model(jit_compile=True)
    tuner = XLATuner(jit_compile="auto", verbose=0)
    with pytest.warns(UserWarning, match="trial-skipped"):
        model.fit(ds, epochs=1, callbacks=[tuner], verbose=0)
    report = tuner.report
    assert report.decision["status"] == "skipped" and report.jit.enabled
    assert report.baseline.reason == "" and report.baseline.rounds == 2
    assert report.baseline.no_xla_step_ms > 0
    assert "unknown" not in report.verdict.headline
    assert int(model.optimizer.iterations.numpy()) == 60


def run_memory(cache_dir, batch):
    import os
    import subprocess
    import sys

    env = dict(os.environ, KERAS_XLA_CACHE_DIR=str(cache_dir))
    env.pop("TF_XLA_FLAGS", None)
    here = os.path.dirname(__file__)
    out = subprocess.run(
        [sys.executable, os.path.join(here, "memory_run.py"), str(batch)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_a_remembered_decision_skips_the_trial_in_a_new_process(tmp_path):
    first = run_memory(tmp_path, 8)
    assert first["status"] == "decided" and first["iterations"] == 40
    # A new process, the same model, inputs and machine: no trial, the
    # same winner, from the first call on (which is a real step).
    second = run_memory(tmp_path, 8)
    assert second["status"] == "remembered"
    assert second["winner"] == first["winner"]
    assert second["trial_steps"] == 1
    assert second["jit"] is (first["winner"] == "xla/float32")
    assert "an earlier run's trial" in second["reason"]
    assert second["iterations"] == second["steps"] == 40
    # Another input signature (batch 16): the memory does not apply.
    third = run_memory(tmp_path, 16)
    assert third["status"] == "decided"
    assert third["iterations"] == 40


def test_trial_spans_epochs_when_the_first_is_short(monkeypatch, xla_tried):
    # Epochs of 10 steps, 4 epochs: two candidates need 12 steps (2 rounds
    # x 2 x 3 calls), more than one epoch holds: the trial goes on into
    # the second epoch and decides there.
    no_dropping(monkeypatch)
    model = conv_model(jit_compile=False)
    x, y = regression_data(32 * 10)
    tuner = fit_trial(model, x, y, 32, 4, jit_compile="auto")
    report = tuner.report
    decision = report.decision
    assert decision["status"] == "decided"
    assert decision["trial_steps"] == 12
    rows = {c["name"]: c["measured_steps"] for c in decision["candidates"]}
    assert all(n >= 2 for n in rows.values())
    assert "trial-skipped" not in report.finding_codes()
    assert [e.steps for e in report.epochs] == [10, 10, 10, 10]
    assert int(model.optimizer.iterations.numpy()) == 40
    assert model.jit_compile is (decision["winner"] == "xla/float32")


def test_the_speedup_range_comes_from_the_windows_spread():
    from keras_xla.auto.trial import range_useful, speedup_range

    slow = [[2.0, 2.1, 1.9, 2.0], [2.2, 2.0, 2.1, 2.3]]
    fast = [[1.0, 1.1, 0.9, 1.0], [1.0, 1.0, 1.1, 1.2]]
    low, high = speedup_range(slow, fast)
    # Each round's ratio of medians (2.0, 2.0 / 1.05 and 2.15 / 1.05)
    # is inside; the resamples are seeded: the same windows, the same
    # range.
    assert low <= 2.0 / 1.05 and high >= 2.15 / 1.05
    assert 1.6 < low < high < 2.6
    assert speedup_range(slow, fast) == (low, high)
    assert speedup_range([[2.0]], fast) is None
    # The machine drifts between any two windows: each window of one
    # side against each of the other's, not only a round's pair (here
    # 2.0 in both rounds; 10 / 6 and 12 / 5 across them).
    slow = [[10.0] * 3, [12.0] * 3]
    fast = [[5.0] * 3, [6.0] * 3]
    assert speedup_range(slow, fast) == (10 / 6, 12 / 5)
    # Useful: one side of 1.0, or narrower than 20% of its middle.
    assert range_useful(1.05, 1.6) and range_useful(0.5, 0.9)
    assert range_useful(0.95, 1.1) and not range_useful(0.8, 1.3)


def baseline_runner(no_xla_steps, xla_steps, extend_to):
    """A baseline trial (XLA kept; no dropping) of 2 rounds of 3 calls,
    its windows closed with planted step times."""
    keep, off = Candidate(True, "float32"), Candidate(False, "float32")
    trial = Trial([keep, off], keep, 3, rounds=2, drop=False)
    runner = trial_runner.TrialRunner(trial, None, True, keep=keep)
    runner.extend_to = extend_to
    records = []
    while True:
        window = trial.current()
        times = xla_steps if window == keep else no_xla_steps
        for i in range(trial.window_calls):
            trial.advance()
            records.append(record(times[(len(records) + i) % len(times)]))
        trial.close_window(records)
        if trial.done and not runner._widen():
            return runner
        assert not trial.done


def test_the_baseline_extends_its_windows_while_the_range_is_wide():
    # Clean steps: 2x, a useful range after the planned two rounds.
    clean = baseline_runner([0.002], [0.001], extend_to=60)
    assert clean.trial.rounds == 2 and len(clean.trial.windows) == 4
    # Noisy steps around 1.0x: a round more at a time, up to extend_to
    # calls (18 here: three rounds of 2 x 3 calls).
    noisy_no_xla, noisy_xla = [0.001, 0.0016, 0.0007], [0.0012, 0.0008, 0.001]
    noisy = baseline_runner(noisy_no_xla, noisy_xla, 18)
    assert noisy.trial.rounds == 3 and len(noisy.trial.windows) == 6
    off, keep = Candidate(False, "float32"), Candidate(True, "float32")
    assert noisy.trial.speedup_range(off, keep) == (0.7, 2.0)
    # No room: as planned.
    assert baseline_runner([0.001, 0.003], [0.002], 0).trial.rounds == 2


def test_a_window_stamped_in_bursts_counts_its_mean():
    # Six steps of 0.2 ms whose ends reached the clock together: five
    # read ~0 and one holds the rest. Their median would say 0.01 ms.
    trial = Trial([A, B], A, window_calls=7)
    trial.advance()
    bursty = [0.00001] * 5 + [0.00115]
    trial.close_window([record(0.001)] + [record(s) for s in bursty])
    (window,) = trial.windows_of(trial.windows[0][0])
    assert window == pytest.approx([0.0002] * 6)
    # A window with one pause keeps its steps (its median is the step).
    steady = [0.070] * 6 + [0.300]
    assert unbursted(steady, 0.5) == steady
    assert unbursted([0.001], 0.5) == [0.001]
    # The whole burst reached the window's first call: its later steps
    # read no time at all. The window's wall time over its steps holds.
    late = Trial([A, B], A, window_calls=4)
    late.advance()
    late.close_window([record(0.0012)] + [record(0.0)] * 3)
    (window,) = late.windows_of(late.windows[0][0])
    assert window == pytest.approx([0.0003] * 3)
