"""The compile ledger: XLA's own record of this process's compilations."""

import json
import os
import subprocess
import sys
import time

import pytest

from keras_xla.tf_backend import cache_entry
from keras_xla.tf_backend import compile_ledger as ledger


def install(monkeypatch, environ, started=False):
    monkeypatch.setattr(ledger, "tensorflow_started", lambda: started)
    monkeypatch.setattr(ledger, "_STATUS", ledger._STATUS)
    return ledger.install(environ)


def test_install_points_the_flag_at_memory_of_this_process(monkeypatch):
    environ = {"TF_XLA_FLAGS": "--tf_xla_auto_jit=2"}
    status = install(monkeypatch, environ)
    assert status.owned
    assert status.directory == f"ram://keras_xla_ledger_{os.getpid()}"
    # Appended to the user's text, which is kept exactly as written.
    assert environ["TF_XLA_FLAGS"] == (
        "--tf_xla_auto_jit=2 --tf_xla_persistent_cache_directory="
        + status.directory
    )
    assert status.user_flags == "--tf_xla_auto_jit=2"


def test_install_keeps_the_users_cache_and_replaces_a_parents(monkeypatch):
    users = {"TF_XLA_FLAGS": "--tf_xla_persistent_cache_directory=/c"}
    status = install(monkeypatch, users)
    assert (status.directory, status.owned) == ("/c", False)
    assert users["TF_XLA_FLAGS"] == "--tf_xla_persistent_cache_directory=/c"
    parent = "ram://keras_xla_ledger_1"  # a parent process's ledger
    child = {
        "TF_XLA_FLAGS": "--tf_xla_auto_jit=2 "
        f"--tf_xla_persistent_cache_directory={parent}"
    }
    status = install(monkeypatch, child)
    assert status.owned and status.directory != parent
    assert child["TF_XLA_FLAGS"] == (
        "--tf_xla_auto_jit=2 --tf_xla_persistent_cache_directory="
        + status.directory
    )


def test_install_too_late_or_turned_off_says_why(monkeypatch):
    late = install(monkeypatch, {}, started=True)
    assert late.directory is None and "before keras_xla" in late.reason
    assert "Import keras_xla before" in late.fix
    off = install(monkeypatch, {"KERAS_XLA_LEDGER": "0"})
    assert off.directory is None and "KERAS_XLA_LEDGER=0" in off.reason
    assert off.fix == "Unset KERAS_XLA_LEDGER to record them."


@pytest.mark.parametrize(
    "flags", ['--tf_xla_auto_jit="2', "--tf_xla_auto_jit='2'", "flagfile"]
)
def test_flags_it_cannot_extend_safely_are_left_alone(monkeypatch, flags):
    # TensorFlow trains with `--tf_xla_auto_jit="2` alone and aborts once
    # another flag follows it: the ledger stays off rather than risk it.
    environ = {"TF_XLA_FLAGS": flags}
    status = install(monkeypatch, environ)
    assert status.directory is None and "TF_XLA_FLAGS" in status.reason
    assert environ == {"TF_XLA_FLAGS": flags}


def test_environment_is_given_back_once_tensorflow_read_it(monkeypatch):
    environ = {"TF_XLA_FLAGS": "--tf_xla_auto_jit=2"}
    install(monkeypatch, environ)
    assert not ledger.release_environment(environ)  # not started yet
    assert "ram://" in environ["TF_XLA_FLAGS"]
    monkeypatch.setattr(ledger, "tensorflow_started", lambda: True)
    assert ledger.release_environment(environ)
    assert environ == {"TF_XLA_FLAGS": "--tf_xla_auto_jit=2"}
    # Nothing set: the variable goes away again.
    monkeypatch.setattr(ledger, "tensorflow_started", lambda: False)
    bare = {}
    install(monkeypatch, bare)
    monkeypatch.setattr(ledger, "tensorflow_started", lambda: True)
    assert ledger.release_environment(bare) and bare == {}
    # A value the user changed after the import is theirs: left alone.
    monkeypatch.setattr(ledger, "tensorflow_started", lambda: False)
    changed = {}
    install(monkeypatch, changed)
    changed["TF_XLA_FLAGS"] = "--tf_xla_cpu_global_jit"
    monkeypatch.setattr(ledger, "tensorflow_started", lambda: True)
    ledger.release_environment(changed)
    assert changed == {"TF_XLA_FLAGS": "--tf_xla_cpu_global_jit"}


def test_stale_disk_ledgers_of_dead_processes_are_removed(tmp_path):
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
    ).stdout.strip()
    stale = tmp_path / f"keras_xla_ledger_{dead}_abc"
    stale.mkdir()
    (stale / "xla_compile_cache__1__2__XLA_CPU_JIT.pb").write_bytes(b"x")
    alive = tmp_path / f"keras_xla_ledger_{os.getpid()}_def"
    alive.mkdir()
    victim = tmp_path / "victim"
    victim.mkdir()
    link = tmp_path / f"keras_xla_ledger_{dead}_link"
    link.symlink_to(victim)
    removed = ledger.remove_stale_ledgers(str(tmp_path))
    assert removed == [str(stale)]
    assert not stale.exists() and alive.is_dir() and victim.is_dir()


def test_read_modules_rejects_what_is_not_an_entry(tmp_path):
    path = tmp_path / "xla_compile_cache__1__2__XLA_CPU_JIT.pb"
    path.write_bytes(b"\x12\x03abc")  # field 2 only
    with pytest.raises(ValueError, match="not an XLA cache entry"):
        cache_entry.read_modules(str(path))
    path.write_bytes(b"\x12\xff")  # a length past the end
    with pytest.raises(ValueError, match="truncated"):
        cache_entry.read_modules(str(path))


def _field(number: int, payload) -> bytes:
    """A protobuf field: a varint for an int, else length-delimited."""

    def varint(n: int) -> bytes:
        out = b""
        while n > 0x7F:
            out += bytes([n & 0x7F | 0x80])
            n >>= 7
        return out + bytes([n])

    if isinstance(payload, int):
        return varint(number << 3) + varint(payload)
    return varint(number << 3 | 2) + varint(len(payload)) + payload


def test_program_bytes_sums_the_buffer_allocations():
    # An entry: field 3 the executable, its field 2 the buffer
    # assignment, whose allocations (field 3) have a size (field 2); a
    # thread-local one (field 3) is not memory the program holds.
    allocations = [
        _field(2, 1 << 20),
        _field(1, 1) + _field(2, 4096),
        _field(2, 512) + _field(3, 1),
    ]
    assignment = b"".join(_field(3, a) for a in allocations)
    executable = _field(1, _field(1, b"")) + _field(2, assignment)
    entry = _field(2, b"") + _field(3, executable)
    assert cache_entry.program_bytes(entry) == (1 << 20) + 4096
    assert cache_entry.program_bytes(_field(2, b"")) is None


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


SAFE = """
import json, os, subprocess, sys, warnings
import numpy as np
import keras_xla
import keras
from keras_xla.tf_backend import compile_ledger
warnings.simplefilter("ignore")
model = keras.Sequential([keras.Input((6,)), keras.layers.Dense(4)])
model.compile("sgd", "mse", jit_compile=True)
steps = []
count = keras.callbacks.LambdaCallback(
    on_train_batch_end=lambda batch, logs: steps.append(batch))
tuner = keras_xla.XLATuner(verbose=0)
model.fit(np.ones((40, 6)), np.ones((40, 4)), batch_size=4, verbose=0,
          callbacks=[tuner, count])
child = subprocess.run(
    [sys.executable, "-c", "import os; print(os.environ.get('TF_XLA_FLAGS'))"],
    capture_output=True, text=True).stdout.strip()
print(json.dumps({
    "steps": len(steps),
    "ledger": compile_ledger.status().directory,
    "hlo_fusions": tuner.report.hlo.fusions if tuner.report.hlo else None,
    "flags": os.environ.get("TF_XLA_FLAGS"),
    "child": child,
}))
"""


def test_no_disk_is_needed_and_children_inherit_the_users_flags(tmp_path):
    # The temporary directory cannot be written at all (a full disk, a
    # read-only one): the ledger needs none, so every step trains and the
    # HLO analysis still reads the step's module; after the fit, a
    # subprocess sees TF_XLA_FLAGS as the user set it.
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    env = {k: v for k, v in os.environ.items() if k != "TF_XLA_FLAGS"}
    env.update(
        TMPDIR=str(blocker / "tmp"),
        TF_CPP_MIN_LOG_LEVEL="3",
        TF_XLA_FLAGS="--tf_xla_enable_lazy_compilation=true",
    )
    result = subprocess.run(
        [sys.executable, "-c", SAFE],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    out = json.loads(result.stdout.strip().splitlines()[-1])
    assert out["steps"] == 10
    assert out["ledger"].startswith("ram://keras_xla_ledger_")
    assert out["hlo_fusions"] is not None and out["hlo_fusions"] > 0
    assert out["flags"] == "--tf_xla_enable_lazy_compilation=true"
    assert out["child"] == "--tf_xla_enable_lazy_compilation=true"
    assert sorted(os.listdir(tmp_path)) == ["file"]


def test_the_ledger_stays_under_its_budget(monkeypatch):
    import tensorflow as tf

    status = ledger.status()
    assert cache_entry.in_memory(status.directory)
    f = tf.function(lambda v: v + 1.0, jit_compile=True)
    ledger.stamp()
    before = set(ledger.entries(status.directory))
    f(tf.ones([3001]))
    (first,) = set(ledger.entries(status.directory)) - before
    # Room for two entries of this size and a half.
    budget = cache_entry.size(first) * 5 // 2
    monkeypatch.setattr(ledger, "BUDGET_BYTES", budget)
    order = [first]
    for n in range(4):
        seen = set(ledger.entries(status.directory))
        f(tf.ones([3002 + n]))
        ledger.stamp(time.time() + n)
        order += sorted(set(ledger.entries(status.directory)) - seen)
    left = ledger.entries(status.directory)
    assert sum(cache_entry.size(p) for p in left) <= budget
    # The newest two stay; the oldest went first.
    assert len(order) == 5 and sorted(left) == sorted(order[-2:])


def test_another_keras_backend_leaves_tensorflow_flags_alone():
    code = (
        "import sys, os; sys.modules['tensorflow'] = None\n"
        "import keras_xla\n"
        "print('keras_xla.tf_backend' in sys.modules)\n"
        "print(os.environ.get('TF_XLA_FLAGS'))\n"
        "from keras_xla.tf_backend import compile_ledger\n"
        "print(compile_ledger.status().reason)\n"
    )
    env = dict(os.environ, KERAS_BACKEND="jax", TF_XLA_FLAGS="--x=1")
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env
    )
    assert result.returncode == 0, result.stderr[-2000:]
    loaded, flags, reason = result.stdout.strip().splitlines()[-3:]
    assert loaded == "False"  # nothing of TensorFlow's side at import
    assert flags == "--x=1"  # not fixed, not extended
    assert reason == (
        "keras_xla was not imported with TensorFlow as the Keras backend"
    )
