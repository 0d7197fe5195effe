"""The compile ledger: XLA's own record of this process's compilations."""

import os
import subprocess
import sys

import pytest

from keras_xla.tf_backend import compile_ledger as ledger


def install(monkeypatch, environ, started=False):
    monkeypatch.setattr(ledger, "tensorflow_started", lambda: started)
    monkeypatch.setattr(ledger, "_STATUS", ledger._STATUS)
    return ledger.install(environ)


def test_install_points_the_flag_at_a_directory_of_this_process(monkeypatch):
    environ = {"TF_XLA_FLAGS": "--tf_xla_auto_jit=2"}
    status = install(monkeypatch, environ)
    assert status.owned and os.path.isdir(status.directory)
    assert os.path.basename(status.directory).startswith(
        f"keras_xla_ledger_{os.getpid()}_"
    )
    assert environ["TF_XLA_FLAGS"] == (
        "--tf_xla_auto_jit=2 --tf_xla_persistent_cache_directory="
        + status.directory
    )


def test_install_keeps_the_users_cache_and_replaces_a_parents(monkeypatch):
    users = {"TF_XLA_FLAGS": "--tf_xla_persistent_cache_directory=/c"}
    status = install(monkeypatch, users)
    assert (status.directory, status.owned) == ("/c", False)
    assert users["TF_XLA_FLAGS"] == "--tf_xla_persistent_cache_directory=/c"
    parent = "/tmp/keras_xla_ledger_1_abc"  # a parent process's ledger
    child = {"TF_XLA_FLAGS": f"--tf_xla_persistent_cache_directory={parent}"}
    status = install(monkeypatch, child)
    assert status.owned and status.directory != parent
    assert parent not in child["TF_XLA_FLAGS"]


def test_install_too_late_or_turned_off_says_why(monkeypatch):
    late = install(monkeypatch, {}, started=True)
    assert late.directory is None and "before keras_xla" in late.reason
    off = install(monkeypatch, {"KERAS_XLA_LEDGER": "0"})
    assert off.directory is None and "KERAS_XLA_LEDGER=0" in off.reason


def test_read_modules_rejects_what_is_not_an_entry(tmp_path):
    path = tmp_path / "xla_compile_cache__1__2__XLA_CPU_JIT.pb"
    path.write_bytes(b"\x12\x03abc")  # field 2 only
    with pytest.raises(ValueError, match="not an XLA cache entry"):
        ledger.read_modules(str(path))
    path.write_bytes(b"\x12\xff")  # a length past the end
    with pytest.raises(ValueError, match="truncated"):
        ledger.read_modules(str(path))


LATE = """
import os, sys, warnings
import numpy as np, tensorflow as tf
tf.constant(1.0)  # TensorFlow starts before keras_xla is imported
import keras
import keras_xla
model = keras.Sequential([keras.Input((6,)), keras.layers.Dense(4)])
model.compile("sgd", "mse")
tuner = keras_xla.XLATuner(verbose=0)
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    model.fit(np.ones((32, 6)), np.ones((32, 4)), batch_size=16,
              verbose=0, callbacks=[tuner])
print(tuner.report.hlo, tuner.report.finding_codes())
"""


def test_without_a_ledger_the_analysis_is_off_and_says_why():
    env = {k: v for k, v in os.environ.items() if k != "TF_XLA_FLAGS"}
    env["TF_CPP_MIN_LOG_LEVEL"] = "3"
    result = subprocess.run(
        [sys.executable, "-c", LATE], capture_output=True, text=True, env=env
    )
    assert result.returncode == 0, result.stderr[-2000:]
    last = result.stdout.strip().splitlines()[-1]
    assert last.startswith("None [") and "'hlo-analysis-off'" in last
