"""The findings table and the book that records each cause once."""

import warnings

import pytest

from keras_xla.core import findings
from keras_xla.core.findings import CODES, FindingBook, XLARecompilationWarning
from keras_xla.core.signatures import FINDING_CODES
from keras_xla.tf_backend import flags


def test_every_emitted_code_is_in_the_table():
    assert set(FINDING_CODES.values()) <= set(CODES)
    assert set(flags._MESSAGES) <= set(CODES)
    assert all(c == c.lower() and " " not in c for c in CODES)
    assert findings.severity("unknown-xla-flag") == "error"
    with pytest.raises(ValueError, match="'no-such-code'"):
        findings.severity("no-such-code")


def test_a_cause_whose_message_changes_is_recorded_and_warned_once():
    book = FindingBook([])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for median in (0.41, 0.37, 0.52):
            book.add(
                findings.DISPATCH_BOUND_STEPS,
                f"The median train step takes {median:.2f} ms.",
                "Use steps_per_execution.",
            )
    (finding,) = book.findings
    assert (finding.code, finding.count) == ("dispatch-bound-steps", 3)
    assert finding.message == "The median train step takes 0.41 ms."
    assert len(caught) == 1
    # The warning points at this file (the caller outside keras_xla).
    assert caught[0].filename == __file__


def test_a_revised_finding_is_reworded_or_withdrawn_and_warned_once():
    findings_list = []
    book = FindingBook(findings_list)
    code = findings.COMPILE_DOMINATES
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        book.revise(code, ("Compiling took 2.0 s.", "Train longer."))
        book.revise(code, ("Compiling took 2.5 s.", "Train longer."))
    assert [(f.code, f.message) for f in findings_list] == [
        (code, "Compiling took 2.5 s.")
    ]
    assert len(caught) == 1
    book.revise(code, None)  # the verdict says it paid back after all
    assert findings_list == []
    book.revise(code, None)
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        book.revise(code, ("Again.", "Fix."))
    assert [f.message for f in findings_list] == ["Again."]


def test_places_keep_distinct_causes_apart():
    book = FindingBook([])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for place, seconds in (
            (("train", "x", 0), 0.5),
            (("test", "x", 0), 0.25),
            (("train", "x", 0), 0.5),
        ):
            book.add("partial-last-batch", "short", "drop it", place, seconds)
    assert [(f.count, f.compile_seconds) for f in book.findings] == [
        (2, 1.0),
        (1, 0.25),
    ]
    assert "Seen 2 times, 1.00 s of compiling" in book.findings[0].message
    assert [w.category for w in caught] == [XLARecompilationWarning] * 2


def test_a_fit_warns_once_per_cause_at_the_users_fit_call():
    from conftest import conv_model, regression_data

    from keras_xla import XLATuner

    x, y = regression_data(40)  # batches 16, 16, 8
    tuner = XLATuner(verbose=0, analyze_hlo=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        conv_model().fit(
            x, y, batch_size=16, epochs=3, verbose=0, callbacks=[tuner]
        )
    ours = [w for w in caught if str(w.message).startswith("[")]
    codes = [str(w.message).split("]")[0][1:] for w in ours]
    assert codes.count("partial-last-batch") == 1
    # A 2-core CPU runs this step in well under 1 ms or not; either way
    # the code is recorded at most once over three epochs.
    assert tuner.report.finding_codes().count("dispatch-bound-steps") <= 1
    assert codes.count("dispatch-bound-steps") <= 1
    assert {w.filename for w in ours} == {__file__}


def test_the_tuner_docstring_lists_every_code():
    import re

    from keras_xla import XLATuner

    listed = set(re.findall(r"`([a-z0-9-]+)`", XLATuner.__doc__))
    assert set(CODES) <= listed
