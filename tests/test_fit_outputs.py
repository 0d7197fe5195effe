"""A fit's outputs on a full log disk: the report JSON first and whole,
the large files after it, nothing truncated, no temporary file."""

import errno
import json
import os
import types

from keras_xla.core import files
from keras_xla.core.findings import OUTPUT_FAILED, FindingBook
from keras_xla.core.report import HloSection, XLAReport
from keras_xla.fit_outputs import FitOutputs
from keras_xla.tf_backend import hlo_analysis

MODULE = b"\x08" * 200_000  # An HLO module far larger than the report.


def outputs(log_dir):
    settings = types.SimpleNamespace(log_dir=str(log_dir), strict=False)
    report = XLAReport(environment={"run": "full disk"})
    return FitOutputs(settings, report, FindingBook(report.findings))


def analyze(out):
    """What the epoch-end HLO check does: writes the module, then puts
    its path in the report."""
    path = os.path.join(out.log_dir, hlo_analysis.HLO_MODULE)
    module = hlo_analysis._write(path, MODULE)
    out.report.hlo = HloSection(
        0, {}, 0.1, 3, 1, 0.5, 0, 0, 2304, [], None, None, None, None, module
    )


def test_the_report_json_is_written_before_the_module(tmp_path, monkeypatch):
    order, real = [], files.write_whole
    monkeypatch.setattr(
        files,
        "write_whole",
        lambda path, data: (
            order.append(os.path.basename(path)) or real(path, data)
        ),
    )
    out = outputs(tmp_path)
    out.safely("_check", analyze, out)
    assert order == []  # Held until the JSON is written.
    out.write()
    assert order == ["xla_report.json", "train_step.optimized.hlo.pb"]
    assert (tmp_path / hlo_analysis.HLO_MODULE).read_bytes() == MODULE
    written = json.load(open(tmp_path / "xla_report.json"))
    assert written["hlo"]["module"] == str(tmp_path / hlo_analysis.HLO_MODULE)


def test_a_full_disk_costs_the_module_not_the_report(tmp_path, monkeypatch):
    real = os.write

    def write(fd, data):  # Room for the report, not for the module.
        if len(data) > 100_000:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(fd, data)

    monkeypatch.setattr(os, "write", write)
    out = outputs(tmp_path)
    out.safely("_check", analyze, out)
    out.write()
    monkeypatch.undo()
    assert sorted(os.listdir(tmp_path)) == ["hlo", "xla_report.json"]
    assert os.listdir(tmp_path / "hlo") == []  # Nothing truncated.
    written = json.load(open(tmp_path / "xla_report.json"))
    assert written == json.loads(out.report.to_json())
    assert written["environment"] == {"run": "full disk"}
    assert written["hlo"]["flops_per_step"] == 2304
    assert written["hlo"]["module"] is None  # It names no missing file.
    [finding] = written["findings"]
    assert finding["code"] == OUTPUT_FAILED
    assert "train_step.optimized.hlo.pb" in finding["message"]
    assert "No space left on device" in finding["message"]
