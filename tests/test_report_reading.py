"""`keras-xla report` on hostile files, and the reading layer under it.

Every file here is written as an adversary would: nested 100,000 deep,
NaN, Infinity, 0 and 400-digit numbers in number fields, wrong types in
every field, control characters in strings and directory names. The
command must end with 0 (what it skipped noted on stderr) or 2 (one line
naming the file and the problem), never a traceback; `--json` must be
strict JSON; the terminal must see no raw control character.
"""

import copy
import json
import math
import os
import subprocess
import sys

import pytest

from keras_xla import cli
from keras_xla.core import reading, render
from keras_xla.core.report import (
    SCHEMA,
    EpochStats,
    Finding,
    JitInfo,
    Recompilation,
    XLAReport,
)
from keras_xla.core.sections import (
    ClusteringSection,
    Decision,
    HloSection,
    ProfileSection,
    Verdict,
)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXPECTED = (
    "expected a log dir holding xla_report.json (written by "
    "keras_xla.XLATuner(log_dir=...)) or the path of that file."
)
BIG = 10**400  # A 401-digit number.


def full_report() -> dict:
    """A report with every section the command line renders, as JSON."""
    report = XLAReport(
        environment={"tensorflow": "2.21.0", "devices": ["CPU:0"]},
        jit=JitInfo(True, True, "jit_compile=True is on."),
    )
    for epoch, rate in enumerate((1000.0, 1200.0)):
        step_ms = {"median": 2.0, "p90": 4.0}
        report.epochs.append(
            EpochStats(epoch, 5, 2 - epoch, 0.5, 1 - epoch, step_ms, rate)
        )
    report.recompilations.append(
        Recompilation(
            "train", 0, 4, "x", 0, [16, 4], [6, 4], "partial_batch", 0.35,
            "A partial last batch.", "Use drop_remainder=True.",
        )
    )  # fmt: skip
    report.findings.append(
        Finding("partial-last-batch", "warning", "Dim 0.", "Drop it.", 2, 0.7)
    )
    report.clustering = ClusteringSection(
        "auto-clustering", True, True, "set_jit", "", {"train/c0": 2}, 3, 4
    )
    report.hlo = HloSection(
        0, {"x": [16, 4]}, 0.1, 3, 2, 0.5, 1, 0, 1000,
        ["add add.1 f32[16,4]"], 1.0, 2.0, 0.5, source="compile ledger",
    )  # fmt: skip
    report.profile = ProfileSection([2, 4], "/p", ["t.pb"], 1, [0.1], 1)
    report.decision = Decision.from_dict(
        {
            "status": "decided",
            "winner": "xla/float32",
            "reason": "faster",
            "default": "no_xla/float32",
            "speedup_vs_default": 1.5,
            "break_even_steps": 3,
            "trial_steps": 12,
            "trial_seconds": 0.2,
            "candidates": [
                {
                    "name": "xla/float32",
                    "jit_compile": True,
                    "policy": "float32",
                    "measured_steps": 6,
                    "median_step_ms": 2.0,
                },
            ],
        }  # fmt: skip
    )
    report.verdict = Verdict(
        True, 1.5, 3.0, 2.0, 0.5, 3, True, "XLA paid off.",
        [{"code": "partial-last-batch", "seconds": 0.35, "fix": "Drop it."}],
        10,
    )  # fmt: skip
    return report.to_dict()


def write(tmp_path, data, name="xla_report.json") -> str:
    """Writes `data` (JSON text, or a value dumped as JSON: NaN and
    Infinity as Python writes them) and returns the path."""
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    text = data if isinstance(data, str) else json.dumps(data)
    path.write_text(text, encoding="utf-8")
    return str(path)


def report(capsys, *args: str) -> tuple[int, str, str]:
    """Runs `keras-xla report ARGS` in process: (exit code, out, err)."""
    code = cli.main(["report", *args])
    out, err = capsys.readouterr()
    return code, out, err


def strict_json(text: str):
    """`json.loads` that refuses NaN and Infinity, as other parsers do."""

    def refuse(constant):
        raise ValueError(f"not JSON: {constant}")

    return json.loads(text, parse_constant=refuse)


def test_a_report_nested_100000_deep_exits_2_in_a_child(tmp_path):
    path = write(tmp_path, "[" * 100_000 + "]" * 100_000)
    child = subprocess.run(
        [sys.executable, "-m", "keras_xla", "report", path],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert child.returncode == 2
    assert child.stdout == ""
    assert "Traceback" not in child.stderr
    assert child.stderr.splitlines() == [
        f"keras-xla report: {path} is not a keras_xla report (JSON nested "
        f"more than 64 levels deep): {EXPECTED}"
    ]


@pytest.mark.parametrize("flag", [[], ["--json"]])
def test_a_field_nested_past_the_limit_exits_2(tmp_path, capsys, flag):
    data = full_report()
    data["jit"]["requested"] = json.loads("[" * 70 + "]" * 70)
    path = write(tmp_path, data)
    code, out, err = report(capsys, path, *flag)
    assert (code, out) == (2, "")
    assert err == (
        f"keras-xla report: {path} is not a keras_xla report (JSON nested "
        f"more than 64 levels deep): {EXPECTED}\n"
    )
    # 60 levels inside the report is still read.
    data["jit"]["requested"] = json.loads("[" * 60 + "]" * 60)
    code, out, err = report(capsys, write(tmp_path, data), *flag)
    assert (code, err) == (0, "")


@pytest.mark.parametrize(
    "value, shown",
    [
        (math.nan, "nan"),
        (math.inf, "inf"),
        (-math.inf, "-inf"),
        (BIG, repr(BIG)[:77] + "..."),
        ("fast", "'fast'"),
        ([1.0], "[1.0]"),
        ({"a": 1}, "{'a': 1}"),
        (True, "True"),
    ],
)
def test_a_bad_number_is_skipped_with_a_note(tmp_path, capsys, value, shown):
    data = full_report()
    data["epochs"][0]["examples_per_second_overall"] = value  # optional
    data["epochs"][1]["compile_seconds"] = value  # required: row left out
    data["hlo"]["peak_tflops"] = value  # required: section left out
    data["decision"]["trial_seconds"] = value  # optional, shown with :.1f
    data["baseline"] = {"no_xla_step_ms": value, "xla_step_ms": 2.0}
    data["verdict"]["speedup"] = value  # required: section left out
    path = write(tmp_path, data)
    code, out, err = report(capsys, path)
    assert code == 0, err
    assert err.count("\n") == 1 and "Traceback" not in err
    notes = err.split(": read without 6 part(s) it could not read: ")[1]
    assert notes.rstrip("\n").split("; ") == [
        f"epochs[0].examples_per_second_overall (bad value {shown})",
        f"epochs[1] (bad `compile_seconds`: {shown})",
        f"hlo (bad `peak_tflops`: {shown})",
        f"decision.trial_seconds (bad value {shown})",
        f"baseline.no_xla_step_ms (bad value {shown})",
        f"verdict (bad `speedup`: {shown})",
    ]
    lines = out.splitlines()
    assert (
        lines[1] == "jit: requested True, enabled True. jit_compile=True is on."
    )
    assert lines[4:7] == [
        "epoch  steps  compiles  recompiles  compile s  median ms  p90 ms"
        "    ex/s",
        "0          5         2           1       0.50       2.00    4.00"
        "  1000.0",
        "total      5         2           1       0.50",
    ]
    assert lines[-1] == "  Fix: Drop it."
    assert "Trial: 12 steps, - s." in out
    assert "HLO of the train step" not in out
    # --json: strict JSON, without what was left out.
    code, out, _ = report(capsys, path, "--json")
    assert code == 0
    loaded = strict_json(out)
    assert loaded["epochs"][0]["examples_per_second_overall"] is None
    assert [e["epoch"] for e in loaded["epochs"]] == [0]
    assert (loaded["hlo"], loaded["verdict"]) == (None, None)
    assert loaded["decision"]["trial_seconds"] is None
    assert loaded["baseline"]["xla_step_ms"] == 2.0


@pytest.mark.parametrize("value", [0, 0.0])
def test_zero_throughput_compares_without_dividing(tmp_path, capsys, value):
    first = full_report()
    second = copy.deepcopy(first)
    for epoch in second["epochs"]:
        epoch["examples_per_second"] = value
        epoch["compile_seconds"] = value
    first_path = write(tmp_path / "first", first)
    second_path = write(tmp_path / "second", second)
    code, out, err = report(capsys, first_path, second_path)
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert lines[12:15] == [
        "compile seconds             1.00    0.00          0.00  second",
        "median step ms              2.00    2.00          1.00",
        "examples/s (steady)       1100.0     0.0          0.00   first",
    ]
    assert lines[-1] == "No steady throughput to compare."
    code, out, err = report(capsys, second_path, first_path, "--json")
    assert code == 0
    rows = strict_json(out)["rows"]
    assert rows["examples_per_second"]["values"] == [0, 1100.0]
    assert rows["examples_per_second"]["ratio"] is None
    assert rows["examples_per_second"]["better"] == "first"


def test_an_overflowing_ratio_is_null_in_json(tmp_path, capsys):
    first = full_report()
    second = copy.deepcopy(first)
    for epoch in first["epochs"]:
        epoch["examples_per_second"] = 5e-324  # The smallest float.
    first_path = write(tmp_path / "first", first)
    second_path = write(tmp_path / "second", second)
    code, out, err = report(capsys, first_path, second_path, "--json")
    assert (code, err) == (0, "")
    data = strict_json(out)
    assert data["rows"]["examples_per_second"]["ratio"] is None
    assert data["conclusion"] == "No steady throughput to compare."


def test_nan_in_a_free_form_field_is_null_in_json(tmp_path, capsys):
    data = full_report()
    data["environment"]["peak"] = math.nan
    data["recompilations"][0]["before"] = [math.inf, 4]
    data["outside_compilations"] = [{"seconds": -math.inf}]
    path = write(tmp_path, data)
    assert "NaN" in open(path).read()
    code, out, err = report(capsys, path, "--json")
    assert (code, err) == (0, "")
    loaded = strict_json(out)
    assert loaded["environment"]["peak"] is None
    assert loaded["recompilations"][0]["before"] == [None, 4]
    assert loaded["outside_compilations"] == [{"seconds": None}]
    code, out, _ = report(capsys, path)
    assert code == 0
    assert "tensorflow 2.21.0, peak nan" in out.splitlines()


def test_an_earlier_writers_names_are_read_under_the_names_now():
    """A report written before each figure had one name kept the host's
    time, the wait and the tuner's own time in `step_time_ms`."""
    data = full_report()
    data["epochs"][0]["step_time_ms"].update(
        dispatch_median=0.5, input_median=3.0, input_share=0.15
    )
    data["epochs"][0]["step_time_ms"]["tuner_median"] = "bad"
    # Where both are there, the name now wins.
    data["epochs"][1]["step_time_ms"]["input_median"] = 9.0
    data["epochs"][1]["input_ms_median"] = 4.0
    report = XLAReport.from_dict(data)
    first, second = report.epochs
    assert first.step_time_ms == {"median": 2.0, "p90": 4.0}
    assert (first.dispatch_ms_median, first.input_ms_median) == (0.5, 3.0)
    assert (first.input_share, first.tuner_ms_median) == (0.15, None)
    assert second.input_ms_median == 4.0
    assert report.skipped == ["epochs[0].tuner_ms_median (bad value 'bad')"]
    assert XLAReport.from_dict(report.to_dict()).epochs == report.epochs


def test_wrong_types_inside_fields_are_skipped(tmp_path, capsys):
    data = full_report()
    data["jit"] = ["not", "an", "object"]
    data["epochs"][0]["step_time_ms"] = {"median": "fast", "p90": [1]}
    data["epochs"][1]["steps"] = "5"
    data["findings"] = {"code": "not a list"}
    data["clustering"]["clusters"] = {"train/c0": "two", "train/c1": 3}
    data["hlo"]["largest_unfused"] = [1, None, "add add.2 f32[4]"]
    data["profile"]["steps"] = [2]
    data["verdict"]["next_steps"] = [
        5,
        {"code": "a", "seconds": "x", "fix": "f"},
        {"code": "b", "fix": "f"},
        {"code": "c", "seconds": 1.25, "fix": "Do c."},
    ]
    path = write(tmp_path, data)
    code, out, err = report(capsys, path)
    assert code == 0, err
    notes = err.split(": read without 12 part(s) it could not read: ")[1]
    assert notes.rstrip("\n").split("; ") == [
        "jit (not an object)",
        "epochs[0].step_time_ms.median (bad value 'fast')",
        "epochs[0].step_time_ms.p90 (bad value [1])",
        "epochs[1] (bad `steps`: '5')",
        "findings (not a list)",
        "clustering.clusters.train/c0 (bad value 'two')",
        "hlo.largest_unfused[0] (bad value 1)",
        "hlo.largest_unfused[1] (bad value None)",
        "profile (bad `steps`: [2])",
        "verdict.next_steps[0] (bad value 5)",
        "verdict.next_steps[1] (bad value {'code': 'a', 'seconds': 'x', "
        "'fix': 'f'})",
        "verdict.next_steps[2] (bad value {'code': 'b', 'fix': 'f'})",
    ]
    lines = out.splitlines()
    assert lines[:3] == [
        f"Report: {path}",
        "Verdict: XLA paid off.",
        "Next: [c] (1.25 s in this run) Do c.",
    ]
    assert lines[5:8] == [
        "epoch  steps  compiles  recompiles  compile s  median ms  p90 ms"
        "    ex/s",
        "0          5         2           1       0.50          -       -"
        "  1000.0",
        "total      5         2           1       0.50",
    ]
    assert "  largest unfused: add add.2 f32[4]" in lines
    assert lines[-1] == "Findings (0)"
    assert not any(line.startswith(("Profile of", "jit:")) for line in lines)


@pytest.mark.parametrize(
    "steps", [[2], [2, 4, 6], ["2", "4"], [2, None], "2-4", {"a": 2}]
)
def test_profile_steps_not_a_pair_leave_the_profile_out(
    tmp_path, capsys, steps
):
    data = full_report()
    data["profile"]["steps"] = steps
    code, out, err = report(capsys, write(tmp_path, data))
    assert code == 0
    assert f"profile (bad `steps`: {steps!r})" in err
    assert "Profile of train steps" not in out


def test_control_characters_are_escaped_on_the_terminal(tmp_path, capsys):
    data = full_report()
    data["findings"][0]["message"] = "ok\r\nkeras-xla: forged\x1b[2K"
    data["jit"]["reason"] = "\x1b]0;title\x07on\x9b31m"
    data["environment"]["\x1b[31mkey"] = "value\u202e\x00"
    data["verdict"]["headline"] = "XLA\tpaid\x7f off."
    data["new\x1b[2Jkey"] = 1  # unknown key: noted on stderr
    directory = tmp_path / "run\x1b[2J\rdir\nX"
    path = write(directory, data)
    code, out, err = report(capsys, str(directory))
    assert code == 0
    for char in "\x1b\r\x00\x07\x7f\x9b\t\u202e":
        assert char not in out + err
    lines = out.splitlines()
    shown_dir = str(tmp_path) + "/run\\x1b[2J\\rdir\\nX"
    assert lines[0] == f"Report: {shown_dir}/xla_report.json"
    assert lines[1] == "Verdict: XLA\\tpaid\\x7f off."
    assert lines[3] == (
        "jit: requested True, enabled True. \\x1b]0;title\\x07on\\x9b31m"
    )
    assert "\\x1b[31mkey value\\u202e\\x00" in lines[4]
    start = lines.index("[partial-last-batch] warning, count 2, 0.70 s "
                        "compiling")  # fmt: skip
    assert lines[start + 1] == "  ok\\r\\nkeras-xla: forged\\x1b[2K"
    assert err == (
        f"keras-xla report: {shown_dir}/xla_report.json: read without 1 "
        "part(s) it could not read: new\\x1b[2Jkey (unknown)\n"
    )
    # --json keeps the strings as they are, escaped by JSON itself.
    code, out, _ = report(capsys, path, "--json")
    assert code == 0
    assert "\x1b" not in out and "\r" not in out
    loaded = strict_json(out)
    assert loaded["findings"][0]["message"] == data["findings"][0]["message"]


def test_control_characters_in_compared_labels(tmp_path, capsys):
    first = write(tmp_path / "a\x1b[2J", full_report())
    second = write(tmp_path / "b\rX", full_report())
    code, out, err = report(capsys, first, second)
    assert (code, err) == (0, "")
    assert "\x1b" not in out and "\r" not in out
    assert out.splitlines()[:2] == [
        f"a\\x1b[2J: {tmp_path}/a\\x1b[2J/xla_report.json",
        f"b\\rX: {tmp_path}/b\\rX/xla_report.json",
    ]


def test_an_error_while_rendering_exits_2_in_one_line(
    tmp_path, capsys, monkeypatch
):
    def broken(report, path):
        raise KeyError("no\x1b[2Jkey")

    monkeypatch.setattr(render, "full_report", broken)
    path = write(tmp_path, full_report())
    code, out, err = report(capsys, path)
    assert (code, out) == (2, "")
    assert err == (
        f"keras-xla report: {path}: cannot be rendered (KeyError: "
        "'no\\x1b[2Jkey').\n"
    )


def test_a_number_longer_than_python_reads_exits_2(tmp_path, capsys):
    text = json.dumps({"schema": SCHEMA, "epochs": 0})
    path = write(tmp_path, text.replace("0}", "9" * 5000 + "}"))
    code, out, err = report(capsys, path)
    assert (code, out) == (2, "")
    assert err.startswith(f"keras-xla report: {path} is not a keras_xla report")
    assert err.count("\n") == 1 and "Traceback" not in err


def test_a_file_not_utf8_exits_2(tmp_path, capsys):
    path = tmp_path / "xla_report.json"
    path.write_bytes(b'{"schema": "\xff\xfe"}')
    code, out, err = report(capsys, str(path))
    assert (code, out) == (2, "")
    assert err.startswith(f"keras-xla report: {path} is not a keras_xla report")
    assert "can't decode byte 0xff" in err


# Every field of the report, given each hostile value: the command ends
# with 0 or 2, never raises, and --json stays strict JSON.
HOSTILE = [math.nan, -math.inf, 0, -1, BIG, "\x1b[31m\r\n", [], {}, None]


def paths(value, prefix=()):
    yield prefix
    if isinstance(value, dict):
        for key, item in value.items():
            yield from paths(item, (*prefix, key))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from paths(item, (*prefix, i))


def test_every_field_given_every_hostile_value(tmp_path, capsys):
    base = full_report()
    outcomes = {0: 0, 2: 0}
    for where in list(paths(base))[1:]:
        for value in HOSTILE:
            data = copy.deepcopy(base)
            parent = data
            for key in where[:-1]:
                parent = parent[key]
            parent[where[-1]] = value
            path = write(tmp_path, data)
            for flag in ([], ["--json"]):
                code, out, err = report(capsys, path, *flag)
                label = (where, value, flag, err)
                outcomes[code] += 1
                assert "\x1b" not in out + err, label
                if code == 2:
                    assert out == "" and err.count("\n") == 1, label
                    assert where == ("schema",), label
                elif flag:
                    strict_json(out)
    assert outcomes[2] == 2 * len(HOSTILE)
    assert outcomes[0] > 1000


def test_fits_refuses_numbers_no_writer_produces():
    assert reading.fits("float | None", 2.5)
    assert reading.fits("float", 3)
    assert reading.fits("int", reading.MAX_INT)
    assert not reading.fits("int", reading.MAX_INT + 1)
    assert not reading.fits("float", BIG)
    for value in (math.nan, math.inf, -math.inf):
        assert not reading.fits("float | None", value)
    assert not reading.fits("int", True)
    assert reading.fits("Any", math.nan)  # free-form: not checked


def test_nesting_depth_is_counted_without_recursion():
    assert reading.nesting_depth(1) == 0
    assert reading.nesting_depth({"a": [1, {"b": []}]}) == 4
    deep: list = []
    for _ in range(100_000):
        deep = [deep]
    assert reading.nesting_depth(deep, limit=64) == 65
    assert reading.nesting_depth(deep, limit=10**6) == 100_001


def test_printable_escapes_controls_only():
    assert render.printable("a\x1b[2Jb\r\n\t\x00\x7f\x85") == (
        "a\\x1b[2Jb\\r\\n\\t\\x00\\x7f\\x85"
    )
    assert render.printable("\u202e\u2028\ud800") == "\\u202e\\u2028\\ud800"
    assert render.printable("é ü 日本 [ok] 1.5 ms") == "é ü 日本 [ok] 1.5 ms"


def test_json_text_is_strict():
    text = render.json_text({"a": math.nan, "b": (1, math.inf), "c": "\x1b"})
    assert strict_json(text) == {"a": None, "b": [1, None], "c": "\x1b"}
    assert "\x1b" not in text
