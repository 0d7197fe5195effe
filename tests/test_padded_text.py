"""A transformer on padded text (keras-io's NER example, small): the HLO
analysis, the recompilations in the order they happened, a last batch
both partial and of a new length, and the verdict on data of unknown
length. One fit, several checks; shapes the test controls are the truth.
"""

import logging
import warnings

import pytest
from conftest import ner_like

from keras_xla import XLATuner
from keras_xla.core import render


@pytest.fixture(scope="module")
def ner_fit():
    """Lengths 7, 9, 12 in turn (four sentences a batch), then three
    sentences of length 13; validation on the same data."""
    model, data = ner_like()
    tuner = XLATuner(verbose=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.fit(
            data, validation_data=data, epochs=2, callbacks=[tuner], verbose=0
        )
    return model, tuner.report


def test_the_hlo_analysis_succeeds(ner_fit):
    _, report = ner_fit
    codes = {f.code for f in report.findings}
    assert "hlo-analysis-failed" not in codes
    assert report.hlo is not None and report.hlo.shapes["x"][0] == 4
    # Attention's and the dense layers' matmuls, counted.
    assert report.hlo.flops_per_step > 0
    assert report.hlo.kernels_per_step > 0


def test_recompilations_in_the_order_they_happened(ner_fit):
    _, report = ner_fit
    recompiles = report.recompilations
    # train compiled 7, then recompiled for 9, 12, and the last [3, 13];
    # then validation (test) compiled 7 and recompiled likewise.
    assert [(r.function, r.epoch, r.step) for r in recompiles] == [
        ("train", 0, 1),
        ("train", 0, 2),
        ("train", 0, 6),
        ("test", 0, 1),
        ("test", 0, 2),
        ("test", 0, 6),
    ]
    log = [(c.function, c.step) for c in report.compile_log]
    assert log == [("train", s) for s in (0, 1, 2, 6)] + [
        ("test", s) for s in (0, 1, 2, 6)
    ]


def test_a_partial_last_batch_of_a_new_length_names_both(ner_fit):
    _, report = ner_fit
    last = report.recompilations[2]
    assert (last.before, last.after) == ([4, 12], [3, 13])
    assert last.cause == "partial_batch"
    assert {(c["input"], c["dim"], c["cause"]) for c in last.changes} == {
        ("x", 0, "partial_batch"),
        ("x", 1, "dynamic_dim"),
        ("y", 0, "partial_batch"),
        ("y", 1, "dynamic_dim"),
    }
    # Both causes and both fixes: pad_batches alone would still compile.
    assert "(a partial last batch)" in last.message
    assert "(a non-batch dimension changed)" in last.message
    assert "pad_batches" in last.fix and "padded_shapes" in last.fix
    table = render.full_report(report, "r").splitlines()
    (row,) = [r for r in table if r.split()[:3] == ["train", "0", "6"]]
    assert "partial_batch + dynamic_dim" in row


def test_a_failed_hlo_analysis_keeps_its_traceback_off_the_console(
    monkeypatch, caplog
):
    from keras_xla.tf_backend import hlo

    def broken(*args, **kwargs):
        raise KeyError((60, 231928233999))

    monkeypatch.setattr(hlo, "analyze", broken)
    monkeypatch.setattr(hlo, "analyze_function", broken)
    model, data = ner_like(batches=(7, 7), last=0)
    tuner = XLATuner(verbose=0)
    with caplog.at_level(logging.INFO, logger="keras_xla"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model.fit(data, epochs=1, callbacks=[tuner], verbose=0)
    (failed,) = [
        f for f in tuner.report.findings if f.code == "hlo-analysis-failed"
    ]
    assert "KeyError" in failed.message and "debug" in failed.message
    assert not [r for r in caplog.records if r.exc_info]
    assert tuner.report.hlo is None
