"""The persistent XLA compile cache across processes."""

import json
import os
import subprocess
import sys

import pytest
import tensorflow as tf

from keras_xla.tf_backend import compile_cache as cache_lib

HERE = os.path.dirname(os.path.abspath(__file__))


def run(cache_dir, log_dir, *extra):
    cmd = [
        sys.executable,
        os.path.join(HERE, "cache_run.py"),
        str(cache_dir),
        str(log_dir),
        *extra,
    ]
    env = {k: v for k, v in os.environ.items() if k != "TF_XLA_FLAGS"}
    proc = subprocess.run(
        cmd, capture_output=True, text=True, timeout=300, env=env
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_restarted_run_is_served_from_the_cache(tmp_path):
    from test_tuner import read_events

    cache = tmp_path / "cache"
    first = run(cache, tmp_path / "run1")
    # Batches of 16, 16, 8: two signatures, both compiled afresh.
    assert first["compilations"] == 2
    assert first["cache"] == ["miss", "miss"]
    assert first["compile_cache"]["active"] is True
    assert first["compile_cache"]["misses"] == 2
    assert len(cache_lib.cache_entries(str(cache))) == 2
    second = run(cache, tmp_path / "run2")
    assert second["compilations"] == 2
    assert second["cache"] == ["hit", "hit"]
    assert second["hits"] == [2, 0]
    summary = second["compile_cache"]
    assert (summary["hits"], summary["misses"]) == (2, 0)
    assert summary["entries_at_start"] == 2
    # Loading is cheaper than compiling (asserted loosely: timings).
    assert second["compile_seconds"] < first["compile_seconds"]
    assert summary["seconds_saved"] > 0
    events = read_events(str(tmp_path / "run2" / "train"))
    hits = [
        float(tf.make_ndarray(e.tensor_proto))
        for e in events["xla/compile_cache_hits"]
    ]
    assert hits == [2.0, 0.0]
    assert cache_lib.clear_compile_cache(str(cache)) == 2
    assert cache_lib.cache_entries(str(cache)) == {}


def test_late_enable_is_a_finding_not_a_silent_no_op(tmp_path):
    out = run(tmp_path / "cache", tmp_path / "run", "late")
    assert out["compile_cache"]["active"] is False
    assert "compile-cache-inactive" in out["codes"]
    assert out["cache"] == [None, None]
    assert cache_lib.cache_entries(str(tmp_path / "cache")) == {}


def test_label_cache_use_matches_entries_to_steps(tmp_path):
    from keras_xla.core.report import Compilation

    entry = tmp_path / "xla_compile_cache__1__2__XLA_CPU_JIT.pb"
    entry.write_bytes(b"x")
    os.utime(entry, (105.0, 105.0))
    log = [
        Compilation("train", 0, 0, {}, 1.0, True, 100.0, 0, 106.0),
        Compilation("train", 0, 9, {}, 0.1, False, 200.0, 0, 200.2),
    ]
    cache_lib.label_cache_use(log, {}, str(tmp_path))
    assert [c.cache for c in log] == ["miss", "hit"]


def test_bad_directory_is_named():
    with pytest.raises(ValueError, match=r"compile_cache=3"):
        cache_lib.enable_compile_cache(3)
