"""The ResNet-50 example ends with the measured answer: verdicts against
its own no-XLA run, one conclusion, and where to look in TensorBoard.
Pure functions over made-up reports (the full example takes minutes)."""

import importlib.util
import os

import pytest

from keras_xla.core import verdict as verdicts
from keras_xla.core.report import (
    BaselineSection,
    EpochStats,
    JitInfo,
    Recompilation,
    XLAReport,
)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BASELINE_OFF = "the baseline window is off (XLATuner(baseline=False))"


@pytest.fixture(scope="module")
def example():
    path = os.path.join(ROOT, "examples", "resnet50", "train.py")
    spec = importlib.util.spec_from_file_location("resnet50_answer", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def row(crop, jit, compilations, compile_s, median_ms, steps=12):
    """A row as `run_config` returns it, over a made-up report whose
    verdict is the tuner's with its baseline window off."""
    report = XLAReport(
        environment={"devices": ["/device:CPU:0"]},
        jit=JitInfo(jit, jit, "on" if jit else "XLA not requested"),
    )
    report.epochs.append(
        EpochStats(
            0, steps, compilations, compile_s, max(compilations - 1, 0),
            {"median": median_ms}, None,
        )
    )  # fmt: skip
    for step in range(1, compilations):
        report.recompilations.append(
            Recompilation(
                "train", 0, step, "x", 1, [8, 51, 51, 3], [8, 55, 55, 3],
                "dynamic_dim", compile_s / compilations, "", "",
            )
        )  # fmt: skip
    report.baseline = BaselineSection(reason=BASELINE_OFF)
    report.verdict = verdicts.build(report)
    return {
        "label": f"{crop}-{'xla' if jit else 'no-xla'}",
        "crop": crop,
        "jit": jit,
        "compilations": compilations,
        "recompilations": len(report.recompilations),
        "compile_seconds": compile_s,
        "median_step_ms": median_ms,
        "images_per_second": 8000 / median_ms,
        "images_per_second_overall": 8000 / (median_ms + compile_s),
        "verdict": report.verdict,
        "report": report,
    }


def issue_rows():
    """The issue's run: XLA's step 0.20x the no-XLA step, the random
    crops compiling 11 times (264 s), the fixed slice once (32 s)."""
    return [
        row("random", False, 0, 0.0, 200.0),
        row("random", True, 11, 264.1, 1000.0),
        row("fixed", True, 1, 32.1, 1000.0),
    ]


def test_the_tuners_own_verdict_had_no_answer(example):
    rows = issue_rows()
    assert rows[1]["verdict"].speedup is None
    assert BASELINE_OFF in rows[1]["verdict"].headline


def test_verdicts_use_the_speedup_the_script_measured(example):
    base, drift, fixed = issue_rows()
    measured = example.measured_verdict(fixed, base)
    assert measured.speedup == 0.2
    assert (measured.baseline_step_ms, measured.xla_step_ms) == (200, 1000)
    assert measured.paid_back is False and measured.compile_seconds == 32.1
    assert measured.next_steps[0]["code"] == "xla-slower"
    # The tuner's report is left as it was.
    assert fixed["report"].baseline.no_xla_step_ms is None
    lines = example.verdict_lines([base, drift, fixed])
    tail = " (baseline: this script's random-no-xla run)"
    assert lines == [
        "  random-no-xla: XLA is off: XLA not requested.",
        "  random-xla: "
        + example.measured_verdict(drift, base).headline
        + tail,
        "  fixed-xla: " + measured.headline + tail,
    ]
    assert lines[2].startswith(
        "  fixed-xla: XLA made each step slower (200.00 -> 1000.00 ms, "
        "0.20x) and compiling cost 32.1 s: it did not pay off."
    )
    assert not any("unknown" in line for line in lines)


def test_the_answer_in_the_issues_terms(example):
    assert example.answer(issue_rows()) == (
        "On this machine: the fixed slice removed 10 of 11 compilations "
        "(232 s); XLA's step is 0.20x the no-XLA step here, so train this "
        "model without XLA; on a GPU run the same comparison."
    )


def test_the_answer_when_xla_is_faster(example):
    base = row("random", False, 0, 0.0, 300.0, steps=1000)
    drift = row("random", True, 11, 264.1, 100.0, steps=1000)
    fixed = row("fixed", True, 1, 30.0, 100.0, steps=1000)
    # 3x faster: 30 s of compiling pays back after 150 steps of 1000.
    assert example.answer([base, drift, fixed]) == (
        "On this machine: the fixed slice removed 10 of 11 compilations "
        "(234 s); XLA's step is 3.00x the no-XLA step here, so train this "
        "model with XLA and the fixed slice; on a GPU run the same "
        "comparison."
    )
    short = [row("fixed", True, 1, 30.0, 100.0, steps=12)]
    short.insert(0, row("random", False, 0, 0.0, 300.0, steps=12))
    assert example.answer(short) == (
        "On this machine: XLA's step is 3.00x the no-XLA step here, but "
        "compiling pays back only after 150 steps: train with XLA and the "
        "fixed slice for runs longer than that, without it for shorter; "
        "on a GPU run the same comparison."
    )


def test_without_a_no_xla_run_the_answer_is_the_conclusion(example):
    _, drift, fixed = issue_rows()
    answer = example.answer([fixed])
    assert answer == "On this machine: " + example.conclusion([fixed])
    assert example.answer([drift, fixed]).startswith(
        "On this machine: the fixed slice removed 10 of 11 compilations"
    )
    # Without a baseline there is no step comparison to state.
    assert "XLA's step" not in example.answer([drift, fixed])


def test_where_to_look_in_tensorboard(example):
    lines = example.tensorboard_lines(issue_rows(), "runs/resnet50")
    assert lines == [
        "TensorBoard: tensorboard --logdir runs/resnet50, then the XLA tab:",
        "  each run's verdict (random-no-xla/train, random-xla/train, "
        "fixed-xla/train);",
        "  run random-xla/train: its 11 compilations marked on the step "
        "times, each with its cause;",
        "  'Compare with': two runs side by side.",
    ]
