"""The recompilation guard's rules (`keras_xla.core.guard`), on planted
records: the budget, shapes that do not repeat, and compiling that costs
more than XLA saved. The fits on both backends are in test_parity.py."""

import functools

import pytest

from keras_xla.core import guard as guard_lib
from keras_xla.core.accounting import detect_compilations
from keras_xla.core.guard import RecompileGuard
from keras_xla.core.report import GuardSection
from keras_xla.core.shape_switch import ShapeSwitch
from keras_xla.core.signatures import (
    Signature,
    SignatureTracker,
    TensorSignature,
)
from keras_xla.core.timing import StepRecord
from keras_xla.settings import ARGUMENTS, Settings


def sig(length):
    return Signature(0, (TensorSignature("x", (4, length), "int32"),))


def calls(lengths, seconds=0.5, steady=0.01, measured=False):
    """One train call per length, its compilations marked as the step
    logs mark them; a compiling call takes `seconds`."""
    tracker = SignatureTracker()
    out = []
    for step, length in enumerate(lengths):
        record = StepRecord("train", step, steady, signatures=[(sig(length),)])
        detect_compilations("train", [record], tracker)
        if record.new:
            record.seconds = seconds
            if measured:
                record.measured_compile_seconds = [seconds - steady]
        out.append(record)
    return out


def test_a_stream_of_new_shapes_is_a_storm_after_the_budget():
    guard = RecompileGuard(budget=8)
    records = calls([8 + i for i in range(30)])
    storm = guard.observe(records[:9], 0.0, 0)
    assert storm is None  # 8 recompilations: the budget, not beyond
    storm = guard.observe(records[9:], 0.0, 0)
    assert isinstance(storm, GuardSection)
    assert storm.step == 9 and storm.recompilations == 9
    assert (storm.budget, storm.action) == (8, "")  # the owner's to fill
    assert (storm.input, storm.dim, storm.cause) == ("x", 1, "dynamic_dim")
    assert storm.values == [13, 14, 15, 16, 17]
    # Estimated: each call beyond a steady one (none yet: the whole call).
    assert storm.compile_seconds == pytest.approx(9 * 0.5)
    assert (storm.window, storm.compiled) == (10, 9)
    # Found once: the guard is spent.
    assert guard.observe(calls([100, 101]), 0.0, 0) is None
    # The rest of the fit at its rate: 9 of 10 calls, 0.5 s each.
    count, seconds = guard_lib.projected(storm, 20)
    assert count == pytest.approx(18.0)
    assert seconds == pytest.approx(18.0 * 0.5)
    assert guard_lib.projected(storm, None) == (0.0, 0.0)
    assert "recompiled 9 times" in guard_lib.message(storm)
    assert "input `x`, dimension 1" in guard_lib.fix(storm)
    assert "above 8" in guard_lib.fix(storm)


def test_measured_compile_seconds_are_used_where_the_backend_has_them():
    guard = RecompileGuard(budget=2)
    storm = guard.observe(calls([8, 9, 10, 11], measured=True), 0.0, 0)
    assert storm.recompilations == 3
    assert storm.compile_seconds == pytest.approx(3 * 0.49)


def test_shapes_that_mostly_repeat_are_no_storm():
    # Ten lengths, a new one every fourth call: nine recompilations
    # (beyond a budget of 8), but most calls reuse what compiled.
    guard = RecompileGuard(budget=8)
    lengths = [8, 8, 8, 8]
    for new in range(12, 48, 4):
        lengths += [new, 8, 12, 8]
    assert guard.observe(calls(lengths), 0.0, 0) is None
    assert guard.recompilations == 9
    # A new shape every other call is a storm (half of the window).
    guard = RecompileGuard(budget=8)
    lengths = [8]
    for new in range(12, 52, 4):
        lengths += [new, 8]
    assert guard.observe(calls(lengths), 0.0, 0) is not None


def test_compiling_that_xla_has_paid_for_is_no_storm():
    guard = RecompileGuard(budget=2)
    records = calls([8, 9, 10, 11, 12], seconds=0.1)
    # XLA saved more than the 0.4 s of recompiling: no storm.
    assert guard.observe(records, 10.0, 0) is None
    # It keeps compiling: once the cost passes the saving, it is one.
    storm = guard.observe(calls(range(13, 120), seconds=0.1)[1:], 10.0, 0)
    assert storm is not None and storm.compile_seconds > 10.0


def test_the_guard_arguments_are_checked():
    base = {name: None for name in ARGUMENTS}
    base.update(
        jit_compile=True, strict=False, verbose=0, on_unsupported="fallback",
        analyze_hlo=True, trial_budget=0.25, baseline=True, trial_memory=True,
        keep=False, trust_shared_cache=False, add_to_logs=True,
        max_recompilations=8, on_recompile_storm="fallback",
    )  # fmt: skip
    assert Settings.checked(**base).max_recompilations == 8
    assert Settings.checked(**{**base, "max_recompilations": None})
    for bad in (0, -1, 2.5, True, "8"):
        with pytest.raises(ValueError, match="max_recompilations"):
            Settings.checked(**{**base, "max_recompilations": bad})
    with pytest.raises(ValueError, match="on_recompile_storm='stop'"):
        Settings.checked(**{**base, "on_recompile_storm": "stop"})


def test_the_summary_says_when_why_and_what_the_fallback_avoided():
    from keras_xla.core import render
    from keras_xla.core.report import XLAReport

    report = XLAReport()
    report.guard = GuardSection(
        action="fallback", budget=8, epoch=0, step=9, recompilations=9,
        compile_seconds=4.5, saved_seconds=0.0, window=10, compiled=9,
        input="x", dim=1, cause="dynamic_dim", values=[13, 14],
        projected_compilations=18.0, projected_seconds=9.0, off_from=[0, 10],
    )  # fmt: skip
    text = render.summary(report)
    assert (
        "Recompilation storm at epoch 0, step 9: 9 recompilations for new "
        "sizes of `x` dimension 1 (4.50 s; XLA had saved 0.00 s): no XLA "
        "from epoch 0, step 10; 18 compilations (9.0 s) avoided."
    ) in text
    # And it survives the JSON.
    again = XLAReport.from_dict(report.to_dict())
    assert again.guard == report.guard and not again.skipped


def test_a_square_crop_names_both_of_its_dimensions():
    tracker = SignatureTracker()
    records = []
    for step, side in enumerate(range(40, 52)):
        shape = (8, side, side, 3)
        s = Signature(0, (TensorSignature("x", shape, "float32"),))
        record = StepRecord("train", step, 0.5, signatures=[(s,)])
        records.append(record)
    detect_compilations("train", records, tracker)
    storm = RecompileGuard(budget=8).observe(records, 0.0, 0)
    assert (storm.dim, storm.dims) == (1, [1, 2])
    assert "input `x`, dimensions 1, 2" in guard_lib.message(storm)


def test_a_worker_of_a_job_warns_instead_of_falling_back_alone():
    storm = GuardSection(
        action="", budget=8, epoch=0, step=9, recompilations=9,
        compile_seconds=4.5, saved_seconds=0.0, window=10, compiled=9,
        input="x", dim=1, cause="dynamic_dim", values=[13, 14],
    )  # fmt: skip
    said, _, reason = guard_lib.act(storm, "fallback", 0, 10, 20, workers=2)
    assert storm.action == "warn" and storm.off_from == [] and reason == ""
    assert "one of a job's 2 workers" in said
    # Alone, the same storm falls back.
    alone = GuardSection(**{**storm.to_dict(), "action": ""})
    _, _, reason = guard_lib.act(alone, "fallback", 0, 10, 20)
    assert alone.action == "fallback" and alone.off_from == [0, 10]
    assert reason.startswith("the recompilation guard turned XLA off")


def test_per_shape_counts_each_side_and_what_it_avoided():
    storm = GuardSection(
        action="", budget=8, epoch=0, step=9, recompilations=9,
        compile_seconds=4.5, saved_seconds=0.0, window=10, compiled=9,
        input="x", dim=1, cause="dynamic_dim",
    )  # fmt: skip
    said, _, reason = guard_lib.act(storm, "per_shape", 0, 10, None, kept=10)
    assert storm.action == "per_shape" and storm.off_from == [0, 10]
    assert "keeps running the 10 shapes it compiled" in said
    assert reason.startswith("XLA runs the 10 shapes it compiled")
    compiled = {guard_lib.shapes_key({"x": [4, n]}) for n in range(8, 18)}
    # Steps 8-9 are before the switch; from step 10 lengths 9 and 12 are
    # known, 30 and 31 new (31 twice: one compilation avoided).
    lengths = [8, 9, 9, 12, 30, 31, 31]
    records = calls(lengths)
    for step, r in enumerate(records):
        r.first_step, r.seconds = step + 8, 0.01 if lengths[step] < 20 else 0.1
    avoided = set()
    known = ShapeSwitch({"train": compiled})
    guard_lib.count_avoided(
        storm, records, functools.partial(known.knows, "train"), 0, avoided
    )
    assert (storm.xla_steps, storm.plain_steps) == (2, 3)
    assert storm.xla_seconds == pytest.approx(0.02)
    assert storm.plain_seconds == pytest.approx(0.3)
    assert storm.projected_compilations == 2.0
    assert storm.projected_seconds == pytest.approx(1.0)

    from keras_xla.core import render
    from keras_xla.core.report import XLAReport

    report = XLAReport()
    report.guard = storm
    text = render.summary(report)
    assert (
        "from epoch 0, step 10 XLA ran the 10 shapes it compiled, new ones "
        "ran without XLA; 2 compilations (1.0 s) avoided." in text
    )
    assert (
        "Per shape: 2 steps ran XLA (0.02 s, 10.0 ms each), 3 steps "
        "without XLA (0.30 s, 100.0 ms each)." in text
    )


def test_the_switch_reads_a_batch_as_the_step_logs_read_its_signature():
    import numpy as np

    from keras_xla.core.shape_switch import ShapeSwitch, batch_key

    batch = ({"tokens": np.zeros((4, 9), "int32")}, np.zeros((4, 1)))
    signature = Signature(
        0,
        (
            TensorSignature("x/tokens", (4, 9), "int32"),
            TensorSignature("y", (4, 1), "float32"),
        ),
    )
    switch = ShapeSwitch({"train": {batch_key(batch)}, "test": set()})
    assert switch.knows("train", signature)
    assert not switch.knows("test", signature)
    ran = []
    for data in (batch, ({"tokens": np.zeros((4, 10), "int32")}, batch[1])):
        side = switch.dispatch(
            "train", lambda d=data: d, lambda d, v: "xla", lambda d, v: "plain"
        )
        ran.append(side)
    assert ran == ["xla", "plain"]


def test_bucket_pads_to_its_edge_and_weights_out_the_padded_labels():
    import numpy as np

    from keras_xla.core.shape_switch import BucketSwitch

    x = np.ones((2, 5), "int32")
    per_token = BucketSwitch({"train": set()}, 1, [4, 8], 0, labels=True)
    px, py, weights = per_token.pad((x, np.ones((2, 5), "int32")))
    assert px.shape == py.shape == weights.shape == (2, 8)
    assert (px[:, 5:] == 0).all() and (py[:, 5:] == 0).all()
    # Keras divides the loss by every position: the batch's own carry
    # 8 / 5, so the padded loss is the unpadded one.
    assert weights[:, :5] == pytest.approx(np.full((2, 5), 1.6))
    assert (weights[:, 5:] == 0).all()
    masked = BucketSwitch(
        {"train": set()}, 1, [8], 0, labels=True, masked_loss=True
    )
    assert (masked.pad((x, np.ones((2, 5))))[2][:, :5] == 1.0).all()
    # A pooled label is left alone; a size above the edges grows one.
    pooled = BucketSwitch({"train": set()}, 1, [8], -1.0, labels=False)
    px, y = pooled.pad((np.ones((2, 9, 3)), np.ones((2, 1))))
    assert px.shape == (2, 10, 3) and (px[:, 9:] == -1.0).all()
    assert y.shape == (2, 1) and pooled.grown == [10]
    # The batch's own sample weights: not padded (it runs per shape).
    assert pooled.pad((x, np.ones((2, 1)), np.ones(2))) is None
    ran = pooled.dispatch(
        "train", lambda: (x, np.ones((2, 1))), lambda d, v: v, None
    )
    assert ran == (0, 1)
    # Memory caps the edges: a grown edge stays within `largest`, and a
    # size above it is not padded (it runs per shape).
    capped = BucketSwitch({"train": set()}, 1, [8], 0, False, largest=9)
    assert capped.pad((np.ones((2, 9)), np.ones((2, 1))))[0].shape == (2, 9)
    assert capped.grown == [9]
    assert capped.pad((np.ones((2, 12)), np.ones((2, 1)))) is None
    plain = capped.dispatch(
        "train",
        lambda: (np.ones((2, 12)), np.ones((2, 1))),
        None,
        lambda d, v: ("plain", v),
    )
    assert plain == ("plain", None)


def test_the_bucket_line_says_its_edges_and_their_memory():
    from keras_xla.core import render

    storm = GuardSection(
        action="bucket", budget=8, epoch=0, step=9, recompilations=9,
        compile_seconds=4.5, saved_seconds=0.0, window=10, compiled=9,
        input="x", dim=1, off_from=[0, 10], edges=[20, 30], grown=[30],
        padding_share=0.25, bucket_saved_seconds=3.0,
        edge_bytes=[3 << 20, 5 << 20], memory_limit_bytes=8 << 30,
        largest_fitting=50,
    )  # fmt: skip
    lines = render.guard_line(storm)
    assert lines[0].endswith(
        "from epoch 0, step 10 padded up to [20, 30] (grown: [30]), 25% "
        "padding, about 3.0 s saved."
    )
    assert lines[1] == (
        "  Memory: the largest edge's program about 5.0 MiB of the "
        "device's 8.0 GiB; sizes above 50 would not fit and run per shape."
    )
    # `keras-xla report` says it too.
    from keras_xla.core.report import XLAReport

    report = XLAReport()
    report.guard = storm
    printed = render.full_report(report, "run").splitlines()
    assert lines[0] in printed and lines[1] in printed
    # A cap far above the edges is not worth a word.
    storm.largest_fitting = 10_000
    assert render.guard_line(storm)[1].endswith("of the device's 8.0 GiB.")
