"""`keras-xla doctor` and `keras-xla report`, run as a user runs them.

Every command runs in a child `python -m keras_xla`. The children start
together in one module fixture (each pays TensorFlow's import), and the
tests read their results.
"""

import json
import os
import platform
import re
import subprocess
import sys
import warnings

import keras
import pytest
import tensorflow as tf
from conftest import conv_model, regression_data

from keras_xla import XLATuner, cli
from keras_xla.core import render
from keras_xla.core.report import (
    Decision,
    EpochStats,
    Finding,
    JitInfo,
    Recompilation,
    XLAReport,
)
from keras_xla.tf_backend import doctor

EXPECTED = "expected a log dir holding xla_report.json"
BAD_FLAG = "--tf_xla_dump_to=/tmp/x"


def start_cli(*args: str, **env: str) -> subprocess.Popen:
    """Starts `python -m keras_xla ARGS` without the caller's XLA flags."""
    child_env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("TF_XLA_FLAGS", "XLA_FLAGS")
    }
    child_env.update(TF_CPP_MIN_LOG_LEVEL="2", KERAS_BACKEND="tensorflow")
    child_env.update(env)
    return subprocess.Popen(
        [sys.executable, "-m", "keras_xla", *args],
        env=child_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


class CliRuns:
    """Named children; `runs[name]` waits for one and returns its result."""

    def __init__(self) -> None:
        self.children: dict[str, subprocess.Popen] = {}
        self.results: dict[str, subprocess.CompletedProcess] = {}
        self.root = None  # The directory holding the reports.
        self.tuner = None  # The XLATuner of the real `fit`.

    def start(self, name: str, *args: str, **env: str) -> None:
        self.children[name] = start_cli(*args, **env)

    def __getitem__(self, name: str) -> subprocess.CompletedProcess:
        if name not in self.results:
            child = self.children[name]
            out, err = child.communicate(timeout=240)
            self.results[name] = subprocess.CompletedProcess(
                child.args, child.returncode, out, err
            )
        return self.results[name]

    def stop(self) -> None:
        for child in self.children.values():
            if child.poll() is None:
                child.kill()
                child.communicate()


def hand_built_report(compilations, examples_per_second, compile_seconds):
    """Three epochs of 5 steps, one recompilation, one finding."""
    report = XLAReport(jit=JitInfo(True, True, "jit_compile=True is on."))
    for epoch, (count, rate, seconds) in enumerate(
        zip(compilations, examples_per_second, compile_seconds)
    ):
        recompilations = count - 1 if epoch == 0 else count
        step_ms = {"median": 2.0 if epoch else 2.5, "p90": 4.0}
        report.epochs.append(
            EpochStats(epoch, 5, count, seconds, recompilations, step_ms, rate)
        )
    report.recompilations.append(
        Recompilation(
            "train",
            0,
            4,
            "x",
            0,
            [16, 16, 4],
            [6, 16, 4],
            "partial_batch",
            0.35,
            "A partial last batch.",
            "Use drop_remainder=True.",
        )
    )
    report.findings.append(
        Finding(
            "partial-last-batch",
            "warning",
            "train: input `x` dim 0 changed.",
            "Use drop_remainder=True.",
            2,
            0.7,
        )
    )
    return report


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Starts every command at once; the real `fit` runs meanwhile."""
    root = tmp_path_factory.mktemp("cli")
    first = hand_built_report(
        [3, 1, 0], [1000.0, 1200.0, 1250.0], [0.9, 0.2, 0]
    )
    second = hand_built_report(
        [1, 0, 0], [2000.0, 2400.0, 2500.0], [0.55, 0, 0]
    )
    for epoch in second.epochs:
        epoch.step_time_ms["median"] = 1.0
    first_path = first.write(str(root / "first"))
    second.write(str(root / "second"))
    runs = CliRuns()
    try:
        runs.start("doctor", "doctor")
        runs.start("doctor_json", "doctor", "--json")
        runs.start("doctor_bad_flag", "doctor", TF_XLA_FLAGS=BAD_FLAG)
        runs.start("report", "report", str(root / "first"))
        runs.start("compare", "report", first_path, str(root / "second"))
        runs.start("missing", "report", str(root))
        runs.root = root
        runs.tuner = fit_with_tuner(str(root / "fit"))
        runs.start(
            "fit_report", "report", str(root / "fit" / "xla_report.json")
        )
        yield runs
    finally:
        runs.stop()


def fit_with_tuner(log_dir: str) -> XLATuner:
    x, y = regression_data(70)  # Batches of 16 and a partial one of 6.
    tuner = XLATuner(log_dir=log_dir, verbose=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # The tuner warns per finding.
        conv_model().fit(
            x, y, batch_size=16, epochs=2, verbose=0, callbacks=[tuner]
        )
    return tuner


def doctor_rows(stdout: str) -> dict[str, str]:
    """The doctor's `  Label   value` lines as a dict."""
    rows = {}
    for label in doctor.DOCTOR_LABELS.values():
        match = re.search(rf"^  {re.escape(label)} +(.*)$", stdout, re.M)
        if match:
            rows[label] = match[1]
    return rows


def cpu_flags() -> set[str]:
    with open("/proc/cpuinfo") as f:
        lines = [line for line in f if line.startswith(("flags", "Features"))]
    return set(lines[0].split(":", 1)[1].split()) if lines else set()


def table(stdout: str, header_start: str) -> list[list[str]]:
    """The rows (cells split on 2+ spaces) of the table whose header line
    starts with `header_start`, up to the next blank line."""
    lines = stdout.splitlines()
    start = next(i for i, x in enumerate(lines) if x.startswith(header_start))
    rows = []
    for line in lines[start + 1 :]:
        if not line.strip():
            break
        rows.append(re.split(r" {2,}", line.strip()))
    return rows


def test_doctor_prints_the_real_environment(runs):
    result = runs["doctor"]
    assert result.returncode == 0, result.stdout + result.stderr
    rows = doctor_rows(result.stdout)
    assert rows["TensorFlow"] == tf.__version__
    assert rows["Keras"] == keras.__version__
    assert rows["Keras backend"] == "tensorflow"
    assert rows["Python"] == f"{platform.python_version()} ({sys.executable})"
    assert rows["Physical devices"] == " ".join(
        d.name for d in tf.config.list_physical_devices()
    )
    assert rows["Logical devices"] == " ".join(
        d.name for d in tf.config.list_logical_devices()
    )
    features = rows["CPU features"].split()
    assert set(features) <= cpu_flags()
    assert ("avx2" in features) == ("avx2" in cpu_flags())
    assert (rows["TF_XLA_FLAGS"], rows["XLA_FLAGS"]) == ("(unset)",) * 2
    assert rows["Deterministic ops"] == "no"
    built = "yes" if tf.test.is_built_with_xla() else "no"
    assert rows["XLA build"].startswith(f"built_with_xla: {built}, ")
    assert re.fullmatch(
        r"compile_seconds: \d+\.\d+, first_call_seconds: \d+\.\d+, "
        r"later_call_ms: \d+\.\d+, result_ok: yes",
        rows["Smoke compile"],
    )
    assert result.stdout.splitlines()[-1] == "Status: healthy"


def test_doctor_json_has_the_same_values(runs):
    result = runs["doctor_json"]
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert set(doctor.DOCTOR_LABELS) <= set(data)
    assert (data["tensorflow"], data["keras"]) == (
        tf.__version__,
        keras.__version__,
    )
    assert data["xla"]["built_with_xla"] is tf.test.is_built_with_xla()
    assert data["physical_devices"] == [
        d.name for d in tf.config.list_physical_devices()
    ]
    arm = platform.machine().lower() in ("aarch64", "arm64")
    relevant = doctor.ARM_FEATURES if arm else doctor.X86_FEATURES
    assert data["cpu_features"] == [f for f in relevant if f in cpu_flags()]
    all_features = data["cpu_features"] + data["cpu_features_absent"]
    assert sorted(all_features) == sorted(relevant)
    smoke = data["smoke_compile"]
    assert smoke["result_ok"] is True
    # The first call compiles, so it takes longer than a later call.
    assert smoke["first_call_seconds"] * 1000 > smoke["later_call_ms"] > 0
    assert (data["healthy"], data["problems"], data["flag_problems"]) == (
        True,
        [],
        [],
    )
    assert data["TF_XLA_FLAGS"] is None and data["XLA_FLAGS"] is None


def test_doctor_names_a_fatal_flag_and_stays_alive(runs):
    result = runs["doctor_bad_flag"]
    assert result.returncode == 1, result.stdout + result.stderr
    out = result.stdout
    assert f"Flag problem [unknown-xla-flag] {BAD_FLAG}" in out
    assert "Fix: set XLA_FLAGS=--xla_dump_to=/tmp/x" in out
    rows = doctor_rows(out)
    # The value as the user set it; keras_xla's import fixed it for the
    # doctor's own process, so the smoke compile runs.
    assert rows["TF_XLA_FLAGS"] == BAD_FLAG
    assert rows["Smoke compile"].endswith("result_ok: yes")
    # TensorFlow ran its ops (listed devices) and the process did not die.
    assert rows["TensorFlow"] == tf.__version__
    assert "/physical_device:CPU:0" in rows["Physical devices"]
    assert "Unknown flag in TF_XLA_FLAGS" not in result.stderr
    assert out.splitlines()[-1] == "Status: 1 problem(s) found"


def test_cpu_features_from_a_cpuinfo_file(tmp_path, monkeypatch):
    monkeypatch.setattr(platform, "machine", lambda: "x86_64")
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor : 0\nflags : fpu avx2 fma amx_bf16\n")
    features = doctor.cpu_features(str(cpuinfo))
    assert features["present"] == ["avx2", "fma", "amx_bf16"]
    assert "avx512f" in features["absent"]
    missing = doctor.cpu_features(str(tmp_path / "none"))
    assert missing == {"present": "unknown", "absent": "unknown"}


def test_report_renders_a_hand_built_report(runs):
    result = runs["report"]
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert out.startswith(f"Report: {runs.root / 'first' / 'xla_report.json'}")
    assert "jit: requested True, enabled True. jit_compile=True is on." in out
    assert table(out, "epoch") == [
        ["0", "5", "3", "2", "0.90", "2.50", "4.00", "1000.0"],
        ["1", "5", "1", "1", "0.20", "2.00", "4.00", "1200.0"],
        ["2", "5", "0", "0", "0.00", "2.00", "4.00", "1250.0"],
        ["total", "15", "4", "3", "1.10"],
    ]
    assert table(out, "function") == [
        ["train", "0", "4", "x", "0", "[16, 16, 4] -> [6, 16, 4]"]
        + ["partial_batch", "0.35"]
    ]
    findings = out[out.index("Findings (1)") :].splitlines()
    assert findings[1:] == [
        "[partial-last-batch] warning, count 2, 0.70 s compiling",
        "  train: input `x` dim 0 changed.",
        "  Fix: Use drop_remainder=True.",
    ]


def test_report_of_a_real_fit(runs):
    report = runs.tuner.report
    assert [e.compilations for e in report.epochs] == [2, 0]
    result = runs["fit_report"]
    assert result.returncode == 0, result.stderr
    rows = table(result.stdout, "epoch")
    assert [row[2] for row in rows] == ["2", "0", "2"]  # Compilations.
    assert [row[3] for row in rows] == ["1", "0", "1"]  # Recompilations.
    assert [row[6] for row in rows[:2]] == [
        f"{e.step_time_ms['p90']:.2f}" for e in report.epochs
    ]
    (recompilation,) = report.recompilations
    assert table(result.stdout, "function") == [
        ["train", "0", "4", "x", "0", "[16, 16, 4] -> [6, 16, 4]"]
        + ["partial_batch", f"{recompilation.compile_seconds:.2f}"]
    ]
    codes = re.findall(r"^\[([a-z-]+)\]", result.stdout, re.M)
    assert codes == report.finding_codes()
    assert "partial-last-batch" in codes


def test_report_compares_two_runs(runs):
    result = runs["compare"]
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[:2] == [
        f"first: {runs.root / 'first' / 'xla_report.json'}",
        f"second: {runs.root / 'second' / 'xla_report.json'}",
    ]
    assert table(result.stdout, " ") == [
        ["XLA", "on", "on"],
        ["epochs", "3", "3", "1.00"],
        ["train steps", "15", "15", "1.00"],
        ["compilations", "4", "1", "0.25", "second"],
        ["recompilations", "3", "0", "0.00", "second"],
        ["compile seconds", "1.10", "0.55", "0.50", "second"],
        ["median step ms", "2.00", "1.00", "0.50", "second"],
        ["examples/s (steady)", "1200.0", "2400.0", "2.00", "second"],
        ["examples/s incl. compile", "-", "-", "-"],
        ["verdict: XLA speedup", "-", "-", "-"],
    ]
    assert result.stdout.strip().splitlines()[-1] == (
        "second trains faster: 2.00x the steady examples/s; compilations "
        "4 vs 1."
    )


def test_report_comparison_as_json_with_labels(runs, capsys):
    first = str(runs.root / "first")
    second = str(runs.root / "second")
    argv = ["report", first, second, "--labels", "xla", "tuned", "--json"]
    assert cli.main(argv) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["labels"] == ["xla", "tuned"]
    assert data["rows"]["compilations"] == {
        "label": "compilations",
        "values": [4, 1],
        "ratio": 0.25,
        "better": "tuned",
    }
    assert data["conclusion"].startswith("tuned trains faster: 2.00x")


def test_report_of_a_missing_file_exits_2(runs):
    result = runs["missing"]
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.splitlines()[-1] == (
        f"keras-xla report: No report at {runs.root / 'xla_report.json'}: "
        f"{EXPECTED} (written by keras_xla.XLATuner(log_dir=...)) or the "
        "path of that file."
    )


@pytest.mark.parametrize(
    "text, problem",
    [
        ("{", "is not valid JSON"),
        ('{"schema": "other/1"}', "is not a keras_xla report"),
        ("[1, 2]", "is not a keras_xla report"),
    ],
)
def test_report_of_an_invalid_file_exits_2(tmp_path, capsys, text, problem):
    path = tmp_path / "xla_report.json"
    path.write_text(text)
    assert cli.main(["report", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"keras-xla report: {path} {problem}")
    assert EXPECTED in err


def test_report_reads_what_it_can_and_says_what_it_skipped(tmp_path, capsys):
    data = hand_built_report([1, 0, 0], [1.0, 1.0, 1.0], [0.5, 0, 0]).to_dict()
    data["written_by"] = "a newer keras_xla"  # unknown top-level key
    data["epochs"][1]["steps"] = None  # a required field null: row left out
    data["epochs"][2]["examples_per_second_overall"] = "fast"  # bad optional
    data["epochs"][0]["new_figure"] = 1.5  # unknown key in a row
    data["jit"] = None
    path = tmp_path / "xla_report.json"
    path.write_text(json.dumps(data))
    assert cli.main(["report", str(path)]) == 0
    out, err = capsys.readouterr()
    assert "epoch" in out  # the table is rendered
    assert err.startswith(f"keras-xla report: {path}: read without 4 part(s)")
    for part in (
        "written_by (unknown)",
        "epochs[0].new_figure (unknown)",
        "epochs[1] (bad `steps`: None)",
        "epochs[2].examples_per_second_overall (bad value 'fast')",
    ):
        assert part in err
    report = XLAReport.load(str(path))
    assert [e.epoch for e in report.epochs] == [0, 2]
    assert report.epochs[1].examples_per_second_overall is None


def test_report_renders_the_trial_decision(tmp_path):
    report = hand_built_report([1, 0, 0], [1.0, 1.0, 1.0], [0.5, 0, 0])
    row = dict(jit_compile=False, policy="float32", compile_seconds=0.4)
    report.decision = Decision.from_dict(
        {
            "status": "decided",
            "winner": "no_xla/mixed_bfloat16",
            "default": "no_xla/float32",
            "reason": "no_xla/mixed_bfloat16 4.00 ms, no_xla/float32 6.00 ms",
            "speedup_vs_default": 1.5,
            "break_even_steps": 0,
            "trial_steps": 36,
            "trial_seconds": 0.2,
            "trial_cost_seconds": 0.5,
            "first_call_seconds": 0.4,
            "slow_window_seconds": 0.1,
            "saving_seconds": 2.0,
            "candidates": [
                {
                    **row,
                    "name": "no_xla/float32",
                    "measured_steps": 12,
                    "median_step_ms": 6.0,
                },
                {
                    **row,
                    "name": "no_xla/mixed_bfloat16",
                    "measured_steps": 12,
                    "median_step_ms": 4.0,
                    "policy": "mixed_bfloat16",
                },
            ],
        }
    )
    # The decision survives the JSON round trip.
    loaded = XLAReport.load(report.write(str(tmp_path)))
    assert loaded.decision == report.decision
    out = render.full_report(loaded, "r")
    part = out[out.index("Trial decision") :].splitlines()
    assert part[1] == (
        "**decided**: winner `no_xla/mixed_bfloat16`. "
        "no_xla/mixed_bfloat16 4.00 ms, no_xla/float32 6.00 ms"
    )
    assert "1.50x" in part[2] and "36 steps" in part[2]
    assert part[3] == (
        "The trial cost 0.5 s beyond a run on the winner alone: 0.4 s in "
        "first calls (traces, XLA compilations) beyond the one a run on the "
        "winner makes, "
        "0.1 s in slower windows; the winner saves 2.0 s against the "
        "default over the rest of the run."
    )
    assert "| `no_xla/mixed_bfloat16` | 12 | 4.00 | 0.40 | - |" in part
    assert out.index("Trial decision") < out.index("Findings (1)")


def test_version(capsys):
    from keras_xla import __version__

    with pytest.raises(SystemExit) as exit_info:
        cli.main(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out.strip() == f"keras-xla {__version__}"
