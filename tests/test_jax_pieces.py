"""The JAX backend's pieces on their own: no fit, no Keras on JAX.

The listener is driven with JAX's public `jax.monitoring` recorders, the
step log with hand-made calls, the HLO counter with a small module's
text, the baseline with hand-made records.
"""

import os

import numpy as np
import pytest

pytest.importorskip("jax")

from keras_xla.core.findings import FindingBook  # noqa: E402
from keras_xla.core.report import XLAReport  # noqa: E402
from keras_xla.core.timing import StepRecord  # noqa: E402
from keras_xla.jax_backend import baseline, hlo  # noqa: E402
from keras_xla.jax_backend import compile_cache as cache_lib  # noqa: E402
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
    tap = StepTap(CompileEvents())
    from keras_xla.core.signatures import SignatureTracker

    log = JaxStepLog(1, tap, SignatureTracker())
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
    assert [r.measured for r in records] == [[0.4], [], [0.3], [0.2]]
    assert records[2].signatures[0][0].trace == 1
    report = XLAReport()
    from keras_xla.jax_backend.accounting import MeasuredAccountant

    accountant = MeasuredAccountant(report, FindingBook(report.findings))
    stats = accountant.finish_epoch(records)
    assert stats.compilations == 3 and stats.recompilations == 2
    assert stats.compile_seconds == pytest.approx(0.9)
    causes = [r.cause for r in report.recompilations]
    assert causes == ["retrace", "partial_batch"]
    assert [c.compile_seconds for c in report.compile_log] == [0.4, 0.3, 0.2]


def test_a_cache_hit_is_no_compilation():
    hit = CompileEvent("train", 0.01, 0.0, cache_hit=True)
    records = log_with([TapCall("train", [sig(8)], [hit])]).take("train")
    assert records[0].new == [] and records[0].cache_hits == 1


def test_measured_accountant_puts_the_core_estimate_back():
    from keras_xla.core import accounting
    from keras_xla.jax_backend.accounting import MeasuredAccountant

    before = accounting.estimate_compile_seconds
    calls = [TapCall("train", [sig(8)], [CompileEvent("train", 0.4, 0.0)])]
    report = XLAReport()
    accountant = MeasuredAccountant(report, FindingBook(report.findings))
    accountant.finish_epoch(log_with(calls).take("train"))
    assert accounting.estimate_compile_seconds is before
    assert report.compile_log[0].compile_seconds == 0.4


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
    }


def records_of(sides_seconds):
    return [
        StepRecord("train", i, seconds, signatures=[(sig(8),)])
        for i, seconds in enumerate(sides_seconds)
    ]


def test_baseline_plan_says_why_not():
    assert baseline.plan(False, True, 100, 1)[1].reason.startswith(
        "the baseline window is off"
    )
    assert baseline.plan(True, False, 100, 1)[1].reason == (
        "XLA is off in this fit"
    )
    assert "unknown" in baseline.plan(True, True, None, 1)[1].reason
    windows, section = baseline.plan(True, True, 10, 1)
    assert windows is None and "needs" in section.reason
    windows, section = baseline.plan(True, True, 200, 1)
    assert section is None and (windows.rounds, windows.calls) == (3, 8)


def test_baseline_section_from_interleaved_windows():
    windows = baseline.BaselineWindows(rounds=2, calls=3)
    # Call 0 compiles; then no-XLA x3, XLA x3, no-XLA x3, XLA x3.
    seconds = [0.5] + [2.0, 0.010, 0.010] + [0.9, 0.002, 0.002]
    seconds += [0.011, 0.011, 0.011] + [0.002, 0.002, 0.002] + [0.002]
    section = baseline.BaselineWindows.section(windows, records_of(seconds), 1)
    assert section.reason == ""
    assert section.steps == 4  # the windows' first calls are not timed
    assert section.no_xla_step_ms == pytest.approx(10.5)
    assert section.xla_step_ms == pytest.approx(2.0)
    assert section.speedup_low == pytest.approx(5.0)
    assert section.speedup_high == pytest.approx(5.5)
    assert section.trace_seconds == pytest.approx(2.0 - 0.0105)
    assert windows.side(1) == baseline.NO_XLA and windows.side(4) == "xla"
    assert windows.done(13) and not windows.done(12)


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
