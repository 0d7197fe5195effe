"""XLATuner's arguments: each bad value named, with the fix."""

import numpy as np
import pytest

from keras_xla import XLATuner


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"profile_steps": (5, 2)}, r"profile_steps=\(5, 2\)"),
        ({"profile_steps": (-3, 2)}, r"profile_steps=\(-3, 2\)"),
        ({"profile_steps": ("a", "b")}, r"profile_steps=\('a', 'b'\)"),
        ({"profile_steps": (1, 2, 3)}, r"profile_steps=\(1, 2, 3\)"),
        ({"profile_steps": 5}, r"profile_steps=5"),
        ({"peak_flops": "x"}, r"peak_flops='x'"),
        ({"peak_flops": -5}, r"peak_flops=-5"),
        ({"strict": "no"}, r"strict='no'"),
        ({"analyze_hlo": "no"}, r"analyze_hlo='no'"),
        ({"log_dir": ""}, r"log_dir=''"),
        ({"baseline": 1}, r"baseline=1"),
        ({"trust_shared_cache": "yes"}, r"trust_shared_cache='yes'\)`: pass"),
    ],
)
def test_bad_arguments_are_named_with_the_fix(kwargs, match, tmp_path):
    if "profile_steps" in kwargs:
        kwargs["log_dir"] = str(tmp_path)
    with pytest.raises(ValueError, match=match):
        XLATuner(**kwargs)


def test_numpy_integers_are_accepted_where_ints_are_meant(tmp_path):
    tuner = XLATuner(
        trial_budget=np.int64(100),
        profile_steps=(np.int64(1), np.int32(2)),
        log_dir=str(tmp_path),
    )
    assert tuner.trial_budget == 100 and type(tuner.trial_budget) is int
    assert tuner.profile_steps == (1, 2)


def test_the_arguments_are_one_checked_value():
    import inspect

    from keras_xla.settings import ARGUMENTS

    # Every argument of the signature is a field of the one value, and
    # the other way round.
    signature = inspect.signature(XLATuner.__init__).parameters
    assert tuple(p for p in signature if p != "self") == ARGUMENTS
    tuner = XLATuner(verbose=0, trial_budget=np.int64(40))
    assert (tuner.verbose, tuner.trial_budget, tuner.jit_compile) == (
        0,
        40,
        True,
    )
    # Assigning an argument checks it like the constructor does; the next
    # fit reads the new value.
    tuner.jit_compile = "auto"
    assert tuner._settings.jit_compile == "auto"
    with pytest.raises(ValueError, match=r"jit_compile='yes'"):
        tuner.jit_compile = "yes"
    assert tuner.jit_compile == "auto"
    # The compile cache is set up when the tuner is made.
    with pytest.raises(
        AttributeError, match=r"XLATuner\(compile_cache=\.\.\.\)"
    ):
        tuner.compile_cache = "elsewhere"
