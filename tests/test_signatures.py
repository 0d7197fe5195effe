import pytest

from keras_xla.core import signatures as S
from keras_xla.core.signatures import (
    Signature,
    SignatureTracker,
    TensorSignature,
)


def sig(trace=0, **shapes):
    tensors = []
    for path, spec in shapes.items():
        shape, dtype = spec if isinstance(spec[-1], str) else (spec, "float32")
        tensors.append(TensorSignature(path.replace("__", "/"), shape, dtype))
    return Signature(trace, tuple(tensors))


def test_tracker_counts_each_signature_once_per_function():
    tracker = SignatureTracker()
    a, b = sig(x=(8, 4)), sig(x=(2, 4))
    assert tracker.observe("train", a) is True
    assert tracker.observe("train", a) is False
    assert tracker.observe("train", b) is True
    assert tracker.observe("test", a) is True
    assert tracker.observe("train", a, replica=1) is True
    assert tracker.compiled("train") == [a, b]
    assert tracker.compiled("train", replica=1) == [a]
    tracker.reset("train")
    assert tracker.compiled("train") == []
    assert tracker.observe("train", a) is True


@pytest.mark.parametrize(
    "old, new, last, cause, path, dim",
    [
        (
            sig(x=(32, 4), y=(32, 1)),
            sig(x=(8, 4), y=(8, 1)),
            True,
            S.PARTIAL_BATCH,
            "x",
            0,
        ),
        (
            sig(x=(32, 4), y=(32, 1)),
            sig(x=(8, 4), y=(8, 1)),
            False,
            S.BATCH_SIZE,
            "x",
            0,
        ),
        (sig(x=(8, 4)), sig(x=(16, 4)), True, S.BATCH_SIZE, "x", 0),
        (
            sig(x__tokens=(8, 12)),
            sig(x__tokens=(8, 20)),
            False,
            S.DYNAMIC_DIM,
            "x/tokens",
            1,
        ),
        (
            sig(x=((8, 4), "float32")),
            sig(x=((8, 4), "float64")),
            False,
            S.DTYPE,
            "x",
            None,
        ),
        (
            sig(x=(8, 4)),
            sig(x=(8, 4), sample_weight=(8,)),
            False,
            S.NEW_INPUT,
            "sample_weight",
            None,
        ),
        (
            sig(x=(8, 4), sample_weight=(8,)),
            sig(x=(8, 4)),
            False,
            S.REMOVED_INPUT,
            "sample_weight",
            None,
        ),
        (sig(x=(8, 4)), sig(x=(8, 4, 1)), False, S.RANK, "x", None),
        (sig(0, x=(8, 4)), sig(1, x=(8, 4)), False, S.RETRACE, None, None),
    ],
)
def test_explain_names_cause_input_and_dim(old, new, last, cause, path, dim):
    change, changes = S.explain([old], new, last)
    assert (change.cause, change.input, change.dim) == (cause, path, dim)
    assert change in changes


def test_partial_batch_reports_shapes_and_every_input():
    old = sig(x=(32, 4), y=(32, 1))
    new = sig(x=(8, 4), y=(8, 1))
    change, changes = S.explain([old], new, last_step=True)
    assert change.before == [32, 4] and change.after == [8, 4]
    assert [(c.input, c.cause) for c in changes] == [
        ("x", S.PARTIAL_BATCH),
        ("y", S.PARTIAL_BATCH),
    ]


def test_growing_last_batch_is_not_partial():
    change, _ = S.explain([sig(x=(8, 4))], sig(x=(9, 4)), last_step=True)
    assert change.cause == S.BATCH_SIZE


def test_closest_previous_prefers_fewest_changes_then_most_recent():
    a = sig(x=(8, 10))
    b = sig(x=(8, 20))
    c = sig(x=(4, 40))
    new = sig(x=(8, 30))
    assert S.closest_previous([a, b, c], new) == b
    change, _ = S.explain([a, b, c], new, last_step=False)
    assert (change.before, change.after) == ([8, 20], [8, 30])


def test_explain_needs_a_previous_signature():
    with pytest.raises(ValueError, match="at least one previous"):
        S.explain([], sig(x=(1,)), False)


def test_fixes_point_to_the_right_remedy():
    partial = S.ShapeChange("x", 0, [32, 4], [8, 4], S.PARTIAL_BATCH)
    assert "drop_remainder=True" in S.fix_for(partial)
    assert "pad_batches" in S.fix_for(partial)
    seq = S.ShapeChange("x/tokens", 1, [8, 12], [8, 20], S.DYNAMIC_DIM)
    assert "bucket_by_length" in S.fix_for(seq)
    assert "`x/tokens` dim 1" in S.fix_for(seq)
    text = S.describe(seq, "train")
    assert text == (
        "train: input `x/tokens` dim 1 changed [8, 12] -> [8, 20] "
        "(a non-batch dimension changed)."
    )


def test_image_size_drift_names_both_dims_and_fixed_slice():
    old = sig(x=(8, 51, 51, 3))
    new = sig(x=(8, 55, 55, 3))
    change, changes = S.explain([old], new, last_step=False)
    assert (change.dim, len(changes)) == (1, 2)
    assert S.describe(change, "train", changes) == (
        "train: input `x` dims 1, 2 changed [8, 51, 51, 3] -> [8, 55, 55, 3] "
        "(a non-batch dimension changed)."
    )
    assert "fixed_slice" in S.fix_for(change)


def test_every_cause_has_a_finding_code():
    causes = [
        v
        for k, v in vars(S).items()
        if k.isupper() and isinstance(v, str) and k != "FINDING_CODES"
    ]
    assert set(causes) == set(S.FINDING_CODES)


def test_batch_size_prefers_x():
    s = sig(y=(3, 1), x__a=(5, 2))
    assert s.batch_size() == 5
    assert sig(y=(3, 1)).batch_size() == 3
    assert sig(x=((), "float32")).batch_size() is None
