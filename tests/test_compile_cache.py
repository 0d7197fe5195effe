"""The persistent XLA compile cache across processes."""

import json
import os
import subprocess
import sys

import pytest
import tensorflow as tf

from keras_xla.tf_backend import compile_cache as cache_lib

HERE = os.path.dirname(os.path.abspath(__file__))


def run(cache_dir, log_dir, *extra, env_extra=None):
    cmd = [
        sys.executable,
        os.path.join(HERE, "cache_run.py"),
        str(cache_dir),
        str(log_dir),
        *extra,
    ]
    env = {k: v for k, v in os.environ.items() if k != "TF_XLA_FLAGS"}
    env.update(env_extra or {})
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


def test_late_enable_is_mirrored_through_the_ledger(tmp_path):
    # TensorFlow compiled before the tuner existed (the usual order: model
    # first, tuner second): the cache still works, through the ledger.
    cache = tmp_path / "cache"
    first = run(cache, tmp_path / "run1", "late")
    assert first["compile_cache"]["active"] is True
    assert first["cache"] == ["miss", "miss"]
    # Saved out: the fit's two signatures and the script's own early
    # compilation (every compilation of the process goes to the cache).
    assert len(cache_lib.cache_entries(str(cache))) == 3
    second = run(cache, tmp_path / "run2", "late")
    assert second["cache"] == ["hit", "hit"]
    assert second["compile_cache"]["entries_at_start"] == 3
    assert second["steps"] == 6 and second["weights_moved"]


def test_late_enable_without_the_ledger_is_a_finding(tmp_path):
    off = {"KERAS_XLA_LEDGER": "0"}
    out = run(tmp_path / "cache", tmp_path / "run", "late", env_extra=off)
    assert out["compile_cache"]["active"] is False
    assert "compile-cache-inactive" in out["codes"]
    assert out["cache"] == [None, None]
    assert cache_lib.cache_entries(str(tmp_path / "cache")) == {}
    assert out["steps"] == 6


def test_corrupt_entries_are_set_aside_and_training_goes_on(tmp_path):
    cache = tmp_path / "cache"
    run(cache, tmp_path / "run1")
    random_bytes, truncated = sorted(cache_lib.cache_entries(str(cache)))
    size = os.path.getsize(cache / truncated)
    (cache / random_bytes).write_bytes(os.urandom(size))
    (cache / truncated).write_bytes((cache / truncated).read_bytes()[:1000])
    empty = "xla_compile_cache__1__2__XLA_CPU_JIT.pb"
    (cache / empty).write_bytes(b"")
    out = run(cache, tmp_path / "run2")
    # Every step trained (Keras reads a truncated entry as the end of the
    # data and would train none), and each bad file is named.
    assert out["steps"] == 6 and out["weights_moved"]
    assert out["codes"].count("compile-cache-corrupt") == 3
    for name in (random_bytes, truncated, empty):
        assert any(name in m for m in out["messages"])
        assert (cache / f"{name}.corrupt").exists()
    # The two signatures compiled again, and their entries are whole.
    assert out["cache"] == ["miss", "miss"]
    assert sorted(cache_lib.cache_entries(str(cache))) == [
        random_bytes,
        truncated,
    ]


def test_bad_cache_paths(tmp_path):
    a_file = tmp_path / "file"
    a_file.write_text("x")
    with pytest.raises(ValueError, match=r"compile_cache=.*file.*a file"):
        cache_lib.enable_compile_cache(str(a_file))
    status = cache_lib.enable_compile_cache(str(a_file / "sub"))
    assert status.active is False
    assert "cannot be created" in status.message
    assert str(a_file / "sub") in status.message


def test_read_only_cache_is_read_not_written(tmp_path, monkeypatch):
    from keras_xla.tf_backend import cache_entries, compile_ledger

    # In this process TensorFlow has started: the cache is mirrored.
    monkeypatch.setattr(cache_entries, "writable", lambda directory: False)
    status = cache_lib.enable_compile_cache(str(tmp_path / "ro"))
    assert status.active is True and status.persist is False
    assert status.live == compile_ledger.status().directory
    assert "cannot be written" in status.message
    (finding,) = cache_lib.setup_findings(status)
    assert finding[0] == "compile-cache-read-only"


def test_label_cache_use_matches_entries_to_steps(tmp_path):
    from keras_xla.core.report import Compilation

    entry = tmp_path / "xla_compile_cache__1__2__XLA_CPU_JIT.pb"
    entry.write_bytes(b"x")
    os.utime(entry, (105.0, 105.0))
    log = [
        Compilation("train", 0, 0, {}, 1.0, True, 100.0, 0, 106.0),
        Compilation("train", 0, 9, {}, 0.1, False, 200.0, 0, 200.2),
    ]
    from keras_xla.tf_backend.cache_savings import label_cache_use

    label_cache_use(log, {}, str(tmp_path))
    assert [c.cache for c in log] == ["miss", "hit"]


def test_bad_directory_is_named():
    with pytest.raises(ValueError, match=r"compile_cache=3"):
        cache_lib.enable_compile_cache(3)
