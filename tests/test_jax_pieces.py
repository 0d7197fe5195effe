"""The JAX backend's pieces on their own: no fit, no Keras on JAX.

The listener is driven with JAX's public `jax.monitoring` recorders, the
step log with hand-made calls, the HLO counter with a small module's
text, the baseline with hand-made records.
"""

import os

import numpy as np
import pytest

pytest.importorskip("jax")

from keras_xla.auto.model_state import ModelState  # noqa: E402
from keras_xla.core.accounting import Accountant  # noqa: E402
from keras_xla.core.findings import FindingBook  # noqa: E402
from keras_xla.core.report import XLAReport  # noqa: E402
from keras_xla.core.timing import (  # noqa: E402
    StepRecord,
    estimate_compile_seconds,
)
from keras_xla.jax_backend import compile_cache as cache_lib  # noqa: E402
from keras_xla.jax_backend import hlo  # noqa: E402
from keras_xla.jax_backend.compile_events import (  # noqa: E402
    CACHE_HIT_EVENT,
    COMPILE_EVENT,
    CompileEvent,
    CompileEvents,
)
from keras_xla.jax_backend.step_log import JaxStepLog  # noqa: E402
from keras_xla.jax_backend.tap import (  # noqa: E402
    StepTap,
    TapCall,
    signature_of,
)


def compile_event(name, seconds):
    from jax import monitoring

    monitoring.record_event_duration_secs(COMPILE_EVENT, seconds, fun_name=name)


def test_compile_events_count_step_functions_and_tell_hits_apart():
    from jax import monitoring

    events = CompileEvents()
    events.install()
    try:
        compile_event("jit(train_step)", 0.5)
        compile_event("jit(_uniform)", 0.1)
        monitoring.record_event(CACHE_HIT_EVENT)
        compile_event("jit(test_step)", 0.02)
        compile_event("jit(test_step)", 0.3)
    finally:
        events.remove()
    compile_event("jit(train_step)", 9.0)  # after removal: not seen
    train, test = events.take("train"), events.take("test")
    assert [(e.seconds, e.cache_hit) for e in train] == [(0.5, False)]
    assert [(e.seconds, e.cache_hit) for e in test] == [
        (0.02, True),
        (0.3, False),
    ]
    assert events.other_compilations == 1
    assert events.take("train") == []


def test_removed_listener_is_inert_even_if_still_registered():
    events = CompileEvents()
    events.install()
    listener = events._on_duration
    events.remove()
    listener(COMPILE_EVENT, 1.0, fun_name="jit(train_step)")
    assert events.pending("train") == 0


def test_signatures_canonicalize_dtypes_and_name_paths():
    batch = (
        {"tokens": np.zeros((4, 7), np.int64), "mask": np.ones((4, 7))},
        np.zeros((4, 1), np.int64),
        None,
    )
    sig = signature_of(batch)
    assert [(t.path, t.shape, t.dtype) for t in sig.tensors] == [
        ("x/mask", (4, 7), "float32"),
        ("x/tokens", (4, 7), "int32"),
        ("y", (4, 1), "int32"),
    ]


def sig(n, length=6):
    return signature_of((np.zeros((n, length), np.float32),))


def log_with(calls):
    from keras_xla.jax_backend.step_log import Trackers

    tap = StepTap(CompileEvents())
    log = JaxStepLog(1, tap, Trackers())
    for i, call in enumerate(calls):
        log.begin("train", i, float(i))
        tap.calls["train"].append(call)
    log.close(float(len(calls)))
    return log


def test_events_mark_compilations_and_an_unexplained_event_is_a_retrace():
    first = CompileEvent("train", 0.4, 0.0)
    calls = [
        TapCall("train", [sig(8)], [first]),
        TapCall("train", [sig(8)], []),
        # Known shapes compiled again: the step function was rebuilt.
        TapCall("train", [sig(8)], [CompileEvent("train", 0.3, 2.0)]),
        TapCall("train", [sig(2)], [CompileEvent("train", 0.2, 3.0)]),
    ]
    records = log_with(calls).take("train")
    assert [len(r.new) for r in records] == [1, 0, 1, 1]
    assert [r.measured_compile_seconds for r in records] == [
        [0.4],
        [],
        [0.3],
        [0.2],
    ]
    assert records[2].signatures[0][0].trace == 1
    report = XLAReport()
    accountant = Accountant(report, FindingBook(report.findings))
    stats = accountant.finish_epoch(records)
    assert stats.compilations == 3 and stats.recompilations == 2
    assert stats.compile_seconds == pytest.approx(0.9)
    causes = [r.cause for r in report.recompilations]
    assert causes == ["retrace", "partial_batch"]
    # The sentence holds on either backend: no tf.function on JAX.
    assert report.recompilations[0].message == (
        "train: the step was traced again (a new trace of the same step "
        "function, or a rebuilt one), so XLA compiled it again for known "
        "shapes. Recompiled in 0.30 s."
    )
    assert [c.compile_seconds for c in report.compile_log] == [0.4, 0.3, 0.2]


def test_a_cache_hit_is_no_compilation():
    hit = CompileEvent("train", 0.01, 0.0, cache_hit=True)
    records = log_with([TapCall("train", [sig(8)], [hit])]).take("train")
    assert records[0].new == [] and records[0].cache_hits == 1


def test_measured_seconds_are_used_as_they_are_each_its_own():
    # Two compilations in one call (steps_per_execution): each keeps its
    # own seconds; the call's excess over the median plays no part.
    record = StepRecord(
        "train",
        0,
        5.0,
        signatures=[(sig(8),), (sig(2),)],
        new=[(0, 0), (1, 0)],
        previous={(0, 0): [], (1, 0): [sig(8)]},
        measured_compile_seconds=[0.4, 0.1],
    )
    assert estimate_compile_seconds(record, 0.001) == pytest.approx(0.25)
    steady = [
        StepRecord("train", 2 + i, 0.001, signatures=[(sig(8),)])
        for i in range(4)
    ]
    report = XLAReport()
    accountant = Accountant(report, FindingBook(report.findings))
    stats = accountant.finish_epoch([record, *steady])
    assert [c.compile_seconds for c in report.compile_log] == [0.4, 0.1]
    assert stats.compile_seconds == pytest.approx(0.5)
    assert report.recompilations[0].compile_seconds == 0.1


def test_without_measured_seconds_the_estimate_is_the_excess():
    record = StepRecord("train", 0, 0.5, signatures=[(sig(8),)], new=[(0, 0)])
    assert estimate_compile_seconds(record, 0.1) == pytest.approx(0.4)


HLO_TEXT = """HloModule jit_train_step, entry_computation_layout={(f32[2]{0}, /*index=1*/f32[2]{0})->f32[2]{0}}

%fused_computation (param_0: f32[2], param_1: f32[2]) -> f32[2] {
  %param_0 = f32[2]{0} parameter(0)
  %param_1 = f32[2]{0} parameter(1)
  %add.0 = f32[2]{0} add(%param_0, %param_1)
  ROOT %mul.0 = f32[2]{0} multiply(%add.0, %param_1)
}

%fused_computation.1 (param_0.1: f32[2]) -> bf16[2] {
  %param_0.1 = f32[2]{0} parameter(0)
  ROOT %convert.0 = bf16[2]{0} convert(%param_0.1)
}

ENTRY %main.9 (Arg_0.1: f32[2], /*index=1*/Arg_1.2: f32[2]) -> (f32[2], bf16[2]) {
  %Arg_0.1 = f32[2]{0} parameter(0)
  %Arg_1.2 = f32[2]{0} parameter(1)
  %fusion = f32[2]{0} fusion(%Arg_0.1, %Arg_1.2), kind=kLoop, calls=%fused_computation
  %fusion.1 = bf16[2]{0} fusion(%fusion), kind=kLoop, calls=%fused_computation.1
  %sine.0 = f32[2]{0} sine(%fusion)
  ROOT %tuple.0 = (f32[2]{0}, bf16[2]{0}) tuple(%sine.0, %fusion.1)
}
"""  # noqa: E501


def test_hlo_text_kernels_fusions_and_converts():
    counts = hlo.count_kernels(HLO_TEXT)
    assert counts == {
        "kernels": 3,  # two fusions and the sine
        "fusions": 1,  # the single-op convert fusion is no fusion
        "fused": 2,
        "compute": 4,
        "converts": 1,
        "unfused_converts": 1,
        # Kernels of one op, largest output first; a single-op fusion
        # named by its op, as on TensorFlow.
        "largest_unfused": ["sine sine.0 f32[2]", "convert fusion.1 bf16[2]"],
    }
    assert hlo.shape_bytes("bf16[64,128]") == 64 * 128 * 2
    assert hlo.shape_bytes("(f32[2], bf16[2])") == 0  # a tuple
    assert hlo.shape_bytes("f32[]") == 4  # a scalar
    # Utilization needs a peak: the user's number, else the one an
    # earlier measurement kept for this machine, as on TensorFlow.
    assert hlo.peak_flops(2e12, "float32") == 2e12
    assert hlo.peak_flops(None, "bfloat16") is None  # never measured
    from keras_xla.core import peaks

    key = hlo.machine_key("bfloat16")
    assert key.endswith("|bfloat16") and "jax " in key
    assert peaks.measured(key, lambda: 3e12) == 3e12
    assert hlo.peak_flops(None, "bfloat16") == 3e12
    assert peaks.measured(key, lambda: 1 / 0) == 3e12  # kept: not again


def request(epoch_steps, budget, **fields):
    """What the owner asks on JAX: one step a call, the fit's own XLA
    setting first, a baseline over data of unknown length in the first
    epoch."""
    from keras_xla.auto import runner as auto_runner

    fields = {"jit": True, "precision": None, "xla_possible": True, **fields}
    fields.setdefault("first_jit", fields["xla_possible"])
    return auto_runner.Request(
        budget=budget,
        epoch_steps=epoch_steps,
        probed=True,
        defer_unknown=False,
        **{"steps_per_call": 1, "epochs": 1, **fields},
    )


def baseline_plan(
    epoch_steps, epochs=1, budget=0.25, spe=1, enabled=True, t=None, workers=1
):
    """The baseline's runner (or its `Measured`) as the owner plans it
    on JAX."""
    from keras_xla.auto import runner as auto_runner

    asked = request(
        epoch_steps, budget, steps_per_call=spe, baseline=enabled,
        epochs=epochs, tunables=t, workers=workers,
    )  # fmt: skip
    planned = auto_runner.plan_baseline(MODEL, asked)
    return getattr(planned, "baseline", planned)


def plan(epoch_steps, epochs=1, budget=0.25, spe=1, enabled=True):
    """The baseline's runner without a warm-up: these tests plant each
    call's time by its index (the warm-up is auto.policy's, tested with
    the TensorFlow runner)."""
    import dataclasses

    from keras_xla.auto import policy

    t = dataclasses.replace(policy.TUNABLES, baseline_warmup_steps=0)
    return baseline_plan(epoch_steps, epochs, budget, spe, enabled, t)


def tiny_model():
    import keras

    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile("sgd", "mse")
    return model


# The model the runners switch (on the test process's backend): these
# tests plant the calls' times, so it never trains.
MODEL = tiny_model()


def trial_plan(
    epoch_steps, budget, jit="auto", precision=None, xla_on=True, devices=None
):
    """The trial's runner (or its `Decided`) for `MODEL`, planned as the
    owner plans it on JAX, on a CPU without bfloat16 unless `devices`
    says otherwise."""
    from keras_xla.auto import runner as auto_runner
    from keras_xla.core.hardware import DeviceInfo

    asked = request(
        epoch_steps, budget, jit=jit, precision=precision,
        xla_possible=xla_on,
        devices=devices or [DeviceInfo("CPU", "cpu:0", None)],
    )  # fmt: skip
    return auto_runner.plan(MODEL, asked, ModelState(MODEL), None)


def test_baseline_plan_says_why_not():
    assert plan(100, enabled=False).reason.startswith(
        "the baseline window is off"
    )
    # Data of unknown length: the windows of a long enough epoch, no
    # extra rounds (a fraction of an unknown length is no length).
    unknown = plan(None)
    assert (unknown.trial.window_calls, unknown.trial.rounds) == (8, 3)
    assert unknown.extend_to == 0
    # 10 steps, one epoch: 12 are needed (two rounds of 3 calls a side).
    assert plan(10).reason == (
        "the first epoch has 10 steps; the baseline needs 12"
    )


def test_baseline_plan_sizes_the_windows_by_the_trial_policy():
    from keras_xla.auto import policy

    # 200 steps: policy.baseline_steps gives 48, three rounds of 8 calls
    # a side; more rounds up to trial_budget's 50 calls.
    runner = plan(200)
    assert policy.baseline_steps(200) == 48
    trial = runner.trial
    assert (trial.window_calls, trial.rounds) == (8, 3)
    assert trial.tunables.baseline_steps == policy.TUNABLES.baseline_steps
    # The default plan warms up 20 XLA steps first, where the epoch has
    # room (200 steps: 48 of windows, 20 of warm-up).
    default = baseline_plan(200)
    assert default.warmup == 20 and default.extend_to == 50
    assert [c.name for c in trial.candidates] == [
        "xla/float32",
        "no_xla/float32",
    ]
    assert (runner.spans, runner.extend_to, runner.active.jit) == (
        False,
        50,
        True,
    )
    # One of a job's two workers: the same windows, no extra rounds (they
    # would wait on this worker's clock alone).
    job = baseline_plan(200, workers=2)
    assert (job.trial.window_calls, job.trial.rounds) == (8, 3)
    assert (job.warmup, job.extend_to) == (20, 0)
    # steps_per_execution=4: 48 steps are 12 calls, two rounds of 3.
    runner = plan(200, spe=4)
    assert (runner.trial.window_calls, runner.trial.rounds) == (3, 2)
    # A 10-step epoch in a 3-epoch run: the windows span epochs.
    runner = plan(10, epochs=3)
    assert (runner.spans, runner.trial.window_calls) == (True, 3)
    assert runner.trial.rounds == 2


def drive_trial(runner, seconds, calls):
    """Runs `calls` train calls through a JAX runner (a trial's or a
    baseline's) as the JAX owner does: `seconds(candidate, call)` is each
    call's wall time. Returns `(result, records)`."""
    from keras_xla.auto.runner import Next

    records = []
    for call in range(calls):
        if runner.before_call(MODEL, lambda: records) is Next.DONE:
            break
        records.append(
            StepRecord(
                "train",
                call,
                seconds(runner.active, call),
                signatures=[(sig(8),)],
            )
        )
    return runner.finish(MODEL, records), records


def drive(runner, seconds, calls):
    """`drive_trial` for a baseline: its section and the records."""
    result, records = drive_trial(runner, seconds, calls)
    return result.baseline, records


def test_baseline_section_from_the_trials_windows():
    runner = plan(200)  # three rounds of 8 calls a side

    def seconds(candidate, call):
        first = call % 8 == 0  # a window's first call: not timed
        if candidate.jit:
            return 0.5 if call == 0 else (0.004 if first else 0.002)
        if call < 16:  # the no-XLA step's first window: still settling
            return 2.0 if call == 8 else 0.015
        return 0.05 if first else 0.010

    section, records = drive(runner, seconds, 64)
    assert section.reason == ""
    assert section.rounds == 3
    # Each side's first window settles: the medians and the range rest
    # on the other two (each window's first call not timed).
    assert section.settling_rounds == 1
    assert section.steps == 2 * 7
    assert (section.no_xla_step_ms, section.xla_step_ms) == (10.0, 2.0)
    assert (section.speedup_low, section.speedup_high) == (5.0, 5.0)
    assert section.run_steps == 24
    assert section.trace_seconds == pytest.approx(2.0 - 0.010, abs=1e-3)
    # XLA, no XLA; no XLA, XLA; XLA, no XLA: steps 0 to 47.
    assert section.span == [[0, 0], [0, 47]]
    assert runner.active.jit is True
    # The runner stopped at the 49th call: XLA from there on.
    assert len(records) == 48


def test_a_baseline_cut_short_widens_its_range_for_the_unsettled_side():
    runner = plan(200)  # three rounds of 8 calls a side

    def seconds(candidate, call):
        first = call % 8 == 0
        if candidate.jit:
            return 0.5 if call == 0 else (0.004 if first else 0.002)
        return 0.05 if first else 0.010

    # The fit ends after two windows a side: none is left out as
    # settling, so the no-XLA median may be up to 1.6x too slow.
    section, _ = drive(runner, seconds, 32)
    assert (section.rounds, section.settling_rounds) == (2, 0)
    assert (section.no_xla_step_ms, section.xla_step_ms) == (10.0, 2.0)
    assert section.speedup_high == 5.0
    assert section.speedup_low == pytest.approx(5.0 / 1.6, abs=1e-3)


def test_baseline_gets_more_rounds_while_its_range_is_not_useful():
    def even(candidate, call):
        # Rounds alternate which side is faster: the range straddles 1.
        slow = (call // 16) % 2 == candidate.jit
        return 0.013 if slow else 0.010

    runner = plan(200, budget=1.0)  # up to 199 calls
    section, records = drive(runner, even, 200)
    # One round (16 calls) at a time while it fits in 199 calls.
    assert section.rounds == 12 and len(records) == 192
    assert section.speedup_low < 1.0 < section.speedup_high
    # A clear speedup is useful at once: three rounds.
    runner = plan(200, budget=1.0)
    section, records = drive(
        runner, lambda c, call: 0.002 if c.jit else 0.010, 200
    )
    assert section.rounds == 3 and len(records) == 48


def test_cache_refuses_a_directory_others_can_write(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)
    status = cache_lib.enable_compile_cache(str(shared))
    assert status.active is False and status.untrusted is True
    assert "other users can write it" in status.message


def test_cache_refuses_a_link_and_an_entry_link(tmp_path):
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    link = tmp_path / "link"
    link.symlink_to(real)
    status = cache_lib.enable_compile_cache(str(link))
    assert status.active is False and "is a link" in status.message
    (real / "entry-cache").symlink_to(tmp_path / "elsewhere")
    status = cache_lib.enable_compile_cache(str(real))
    assert status.active is False and "entry-cache is a link" in (
        status.message
    )


def test_cache_rejects_a_file(tmp_path):
    path = tmp_path / "file"
    path.write_text("x")
    with pytest.raises(ValueError, match="compile_cache="):
        cache_lib.enable_compile_cache(str(path))


def test_jax_trial_settles_on_the_faster_train_function(monkeypatch):
    from keras_xla import xla_setting
    from keras_xla.auto.runner import Decided

    # Keras's "auto" on JAX: XLA on (this process may run TensorFlow,
    # whose "auto" is off on a CPU).
    monkeypatch.setattr(xla_setting, "keras_auto_jit", lambda model: True)
    runner = trial_plan(200, 0.5)
    assert [c.name for c in runner.trial.candidates] == [
        "xla/float32",
        "no_xla/float32",
    ]

    def seconds(candidate, call):
        if candidate.jit:
            return 0.5 if call == 0 else 0.004 + 0.0001 * (call % 3)
        return 0.002 + 0.0001 * (call % 3)

    result, _ = drive_trial(runner, seconds, 200)
    assert isinstance(result, Decided)
    assert result.skipped is None and result.kept is not None
    decision = result.decision
    assert decision.status == "decided"
    assert decision.winner == "no_xla/float32"
    assert decision.default == "xla/float32"
    assert runner.active.name == "no_xla/float32"  # the owner puts it on
    assert decision.speedup_vs_default == pytest.approx(2.0, rel=0.2)
    low, high = decision.speedup_low, decision.speedup_high
    assert low is not None and low <= decision.speedup_vs_default <= high
    assert result.jit_reason().startswith("the trial chose no_xla/float32")


def test_jax_trial_without_room_is_skipped_with_xla_on():
    from keras_xla.auto.runner import Decided

    short = trial_plan(2, 0.25)
    assert isinstance(short, Decided)
    assert short.decision.status == "skipped" and short.decision.winner is None
    assert "need at least" in short.skipped[0]
    unknown = trial_plan(None, 0.25)
    assert "length is unknown" in unknown.decision.reason
    # A trial that ends undecided leaves the model as it was compiled
    # (on JAX Keras's "auto" is XLA on).
    compiled = MODEL.jit_compile
    runner = trial_plan(200, 0.5)
    result, _ = drive_trial(runner, lambda candidate, call: 0.003, 2)
    assert result.decision.status == "skipped"
    assert result.skipped[0].startswith("The XLA/precision trial was skipped")
    assert MODEL.jit_compile == compiled


def test_jax_candidates_follow_the_request_on_jaxs_devices():
    from keras_xla import xla_setting
    from keras_xla.core.hardware import DeviceInfo

    ampere = [DeviceInfo("GPU", "gpu:0", (8, 0))]
    volta = [DeviceInfo("GPU", "gpu:0", (7, 0))]
    original = ModelState(MODEL)

    def names(jit, precision, xla_on, devices):
        planned = trial_plan(200, 10.0, jit, precision, xla_on, devices)
        original.restore(MODEL)
        if hasattr(planned, "trial"):
            found = planned.trial.candidates
            return [c.name for c in found], planned.trial.default.name
        return [c["name"] for c in planned.decision.candidates], None

    # XLA's candidates first (the fit starts on Keras's jitted step);
    # the precisions from JAX's devices, as recommend_policy reads them;
    # the reference is Keras's own "auto", in float32.
    keras_default = "xla" if xla_setting.keras_auto_jit(MODEL) else "no_xla"
    assert names("auto", "auto", True, ampere) == (
        [
            "xla/float32",
            "xla/mixed_bfloat16",
            "no_xla/float32",
            "no_xla/mixed_bfloat16",
        ],
        f"{keras_default}/float32",
    )
    assert names(True, "auto", True, volta)[0] == [
        "xla/float32",
        "xla/mixed_float16",
    ]
    assert names("auto", "mixed_bfloat16", True, volta)[0] == [
        "xla/mixed_bfloat16",
        "no_xla/mixed_bfloat16",
    ]
    # XLA cannot be on (run_eagerly, or a layer without jit support):
    # one candidate, decided at once, nothing to try.
    single = trial_plan(200, 0.5, "auto", None, False, volta)
    original.restore(MODEL)
    assert single.decision.status == "single-candidate"
    assert single.decision.winner == "no_xla/float32"
    assert [c["name"] for c in single.decision.candidates] == ["no_xla/float32"]


def test_clearing_jaxs_cache_removes_its_entries_only(tmp_path):
    for name in ("jit_train_step-1a2b-cache", "jit_train_step-1a2b-atime"):
        (tmp_path / name).write_bytes(b"x")
    (tmp_path / "notes.txt").write_text("mine")
    outside = tmp_path.parent / "outside-cache"
    outside.write_bytes(b"kept")
    os.symlink(outside, tmp_path / "link-cache")
    assert cache_lib.clear_compile_cache(str(tmp_path)) == 2
    assert sorted(os.listdir(tmp_path)) == ["link-cache", "notes.txt"]
    assert outside.read_bytes() == b"kept"


def test_a_shape_another_step_function_ran_is_new_to_the_xla_step():
    # The no-XLA baseline's step ran the short last batch first (op by
    # op: no compile event); XLA's step compiling it is a partial batch
    # against XLA's own shapes, not a retrace.
    from keras_xla.jax_backend.step_log import Trackers

    def no_xla():
        pass

    def xla():
        pass

    calls = [
        TapCall("train", [sig(8)], [CompileEvent("train", 0.4, 0.0)]),
        TapCall("train", [sig(2)], [], source=no_xla),
        TapCall("train", [sig(2)], [CompileEvent("train", 0.2, 2.0)]),
    ]
    calls[0].source = calls[2].source = xla
    tap = StepTap(CompileEvents())
    log = JaxStepLog(1, tap, Trackers())
    for i, call in enumerate(calls):
        log.begin("train", i, float(i))
        tap.calls["train"].append(call)
    log.close(3.0)
    records = log.take("train")
    assert [len(r.new) for r in records] == [1, 0, 1]
    assert records[2].previous[0, 0] == [sig(8)]
    report = XLAReport()
    Accountant(report, FindingBook(report.findings)).finish_epoch(records)
    assert [r.cause for r in report.recompilations] == ["partial_batch"]


def test_xla_off_is_said_once_in_the_verdict():
    import keras

    from keras_xla.core import verdict
    from keras_xla.jax_backend import environment

    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile("sgd", "mse", run_eagerly=True)
    info, finding, _ = environment.configure_jit(model, True)
    assert finding[0] == "jit-disabled-run-eagerly"
    assert finding[1].startswith("XLA is off: the model was compiled with ")
    report = XLAReport(jit=info)
    headline = verdict.build(report).headline
    assert headline.startswith("XLA is off: the model was compiled with ")
    assert headline.count("XLA is off") == 1


def test_a_tapped_side_counts_the_wait_the_switch_measured():
    import jax.numpy as jnp

    from keras_xla.jax_backend.tap import Taken

    tap = StepTap(CompileEvents())
    tap.arm("train")
    step = tap.wrap("train", lambda state, it: list(it))
    batch = (jnp.ones((2, 3)), jnp.ones((2, 1)))
    # The bucket switch took the batch after waiting 0.25 s for it.
    assert len(step(None, Taken(batch, waited=0.25))) == 1
    (call,) = tap.take("train")
    assert 0.25 <= call.input < 0.35
    assert [s.tensors[0].shape for s in call.signatures] == [(2, 3)]
