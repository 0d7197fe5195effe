import json
import os
import warnings

import pytest

from keras_xla.core.render import format_table
from keras_xla.core.report import (
    SCHEMA,
    Compilation,
    EpochStats,
    Finding,
    JitInfo,
    Recompilation,
    XLAReport,
)


def sample_report():
    report = XLAReport(
        environment={"tensorflow": "2.21.0", "backend": "tensorflow"},
        jit=JitInfo(True, True, "XLA on"),
    )
    report.epochs.append(
        EpochStats(0, 5, 2, 1.25, 1, {"median": 2.0, "p90": 3.0}, 8000.0)
    )
    report.recompilations.append(
        Recompilation(
            "train",
            0,
            4,
            "x",
            0,
            [16, 4],
            [6, 4],
            "partial_batch",
            0.25,
            "msg",
            "fix",
        )
    )
    report.findings.append(
        Finding(
            "partial-last-batch", "warning", "partial | batch", "drop", 1, 0.25
        )
    )
    report.compile_log.append(
        Compilation("train", 0, 0, {"x": [16, 4]}, 1.0, True, 1.5)
    )
    return report


def test_json_has_contract_fields_and_round_trips(tmp_path):
    report = sample_report()
    path = report.write(str(tmp_path))
    assert path == str(tmp_path / "xla_report.json")
    data = json.loads(open(path).read())
    assert data["schema"] == SCHEMA
    assert set(data) >= {
        "environment",
        "jit",
        "epochs",
        "recompilations",
        "findings",
    }
    assert set(data["jit"]) == {"requested", "enabled", "reason", "kept"}
    epoch = data["epochs"][0]
    assert set(epoch) >= {
        "epoch",
        "steps",
        "compilations",
        "compile_seconds",
        "recompilations",
        "step_time_ms",
        "examples_per_second",
    }
    assert set(data["recompilations"][0]) >= {
        "function",
        "epoch",
        "step",
        "input",
        "dim",
        "before",
        "after",
        "cause",
        "compile_seconds",
        "message",
    }
    assert set(data["findings"][0]) >= {"code", "severity", "message", "fix"}
    loaded = XLAReport.load(str(tmp_path))
    assert loaded.to_dict() == report.to_dict()
    assert loaded.total_compilations == 2
    assert loaded.total_compile_seconds == 1.25


def test_wrong_schema_is_rejected():
    with pytest.raises(ValueError, match="keras_xla.report/1"):
        XLAReport.from_dict({"schema": "other/9"})


def test_summary_table_and_markdown():
    report = sample_report()
    lines = report.summary().splitlines()
    assert lines[0] == "XLA on: XLA on"
    assert lines[1].split() == [
        "epoch",
        "steps",
        "compiles",
        "recompiles",
        "compile",
        "s",
        "median",
        "ms",
        "p90",
        "ms",
        "ex/s",
    ]
    assert lines[2].split() == [
        "0",
        "5",
        "2",
        "1",
        "1.25",
        "2.00",
        "3.00",
        "8000.0",
    ]
    assert lines[3].startswith("[partial-last-batch]")
    md = report.findings_markdown()
    assert "partial \\| batch" in md
    assert md.count("\n") == 2
    assert XLAReport().findings_markdown() == "No findings."


def test_format_table_aligns():
    assert format_table([("a", "10"), ("bbb", "2")]) == ["a    10", "bbb   2"]


def test_a_report_with_nulls_and_unknown_keys_is_read():
    data = sample_report().to_dict()
    data["epochs"][0]["added_by_a_newer_writer"] = 1
    data["findings"] = None
    data["jit"]["note"] = "unknown here"
    report = XLAReport.from_dict(data)
    assert report.findings == [] and report.epochs[0].steps == 5
    assert report.jit.enabled is True


def test_the_cli_report_shows_hlo_and_profile_sections():
    from keras_xla.core import render
    from keras_xla.core.report import HloSection, ProfileSection

    report = sample_report()
    report.hlo = HloSection(
        0,
        {"x": [16, 6]},
        0.02,
        22,
        13,
        0.83,
        0,
        0,
        6144,
        ["dot a f32[2]"],
        0.001,
        0.1,
        0.01,
        source="compile ledger",
    )
    report.profile = ProfileSection([3, 4], "logs/plugins/profile", [], 2, [])
    report.profile.tuner_compilations = 1
    out = render.full_report(report, "r")
    assert "from the compile ledger" in out and "FLOPs per step 6,144" in out
    assert "utilization 1.0%" in out and "largest unfused: dot a f32[2]" in out
    assert "the profiler saw 2 XLA compilations, the tuner 1: DIFFERS" in out


def test_a_second_fit_keeps_the_first_fits_report(tmp_path):
    first, second = sample_report(), sample_report()
    second.epochs = second.epochs * 2
    first.write(str(tmp_path))
    first.write(str(tmp_path))  # the same fit rewrites its own file
    assert not (tmp_path / "xla_report.1.json").exists()
    second.write(str(tmp_path))
    kept = XLAReport.load(str(tmp_path / "xla_report.1.json"))
    latest = XLAReport.load(str(tmp_path))
    assert (len(kept.epochs), len(latest.epochs)) == (1, 2)


def test_archives_stay_in_fit_order_after_one_is_deleted(tmp_path):
    def fit(n):
        XLAReport(environment={"fit": n}).write(str(tmp_path))

    def archived(n):
        path = tmp_path / f"xla_report.{n}.json"
        return XLAReport.load(str(path)).environment["fit"]

    for n in range(1, 4):
        fit(n)  # Fits 1 and 2 archived as .1 and .2; fit 3 the latest.
    os.remove(tmp_path / "xla_report.1.json")
    fit(4)
    assert sorted(os.listdir(tmp_path)) == [
        "xla_report.2.json",
        "xla_report.3.json",
        "xla_report.json",
    ]
    assert (archived(2), archived(3)) == (2, 3)
    os.remove(tmp_path / "xla_report.3.json")  # The newest archive.
    fit(5)
    assert (archived(2), archived(3)) == (2, 4)
    assert XLAReport.load(str(tmp_path)).environment["fit"] == 5


def test_the_recompilation_table_names_the_dims_its_message_names():
    from keras_xla.core.accounting import Accountant
    from keras_xla.core.findings import FindingBook
    from keras_xla.core.render import full_report
    from keras_xla.core.signatures import Signature, TensorSignature

    def sig(shape):
        return Signature(0, (TensorSignature("x", shape, "float32"),))

    report = XLAReport()
    accountant = Accountant(report, FindingBook(report.findings))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the finding's own warning
        accountant._explain(
            "train", 3, [sig((8, 32, 32, 3))], sig((8, 28, 30, 3)), False, 0.5
        )
    (r,) = report.recompilations
    assert "dims 1, 2" in r.message
    table = full_report(report, "r").splitlines()
    (row,) = [line for line in table if line.startswith("train")]
    assert row.split()[:6] == ["train", "0", "3", "x", "1,", "2"]
    assert row.split()[-2:] == ["dynamic_dim", "0.50"]
