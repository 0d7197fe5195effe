"""The same fit gives the same report on TensorFlow and on JAX.

Each backend runs `parity_run.py` in its own process (JAX's without
TensorFlow importable).
"""

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("jax")

HERE = os.path.dirname(os.path.abspath(__file__))


def run(backend, log_dir):
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("TF_XLA_FLAGS", "XLA_FLAGS", "KERAS_BACKEND")
    }
    env["KERAS_BACKEND"] = backend
    env["JAX_PLATFORMS"] = "cpu"
    code = [sys.executable, os.path.join(HERE, "parity_run.py"), log_dir]
    if backend == "jax":  # the JAX path must not import TensorFlow
        code = [
            sys.executable,
            "-c",
            "import runpy, sys; sys.modules['tensorflow'] = None; "
            f"sys.argv = {code[1:]!r}; "
            "runpy.run_path(sys.argv[0], run_name='__main__')",
        ]
    proc = subprocess.run(
        code, capture_output=True, text=True, timeout=300, env=env
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_a_partial_last_batch_the_baseline_saw_first(tmp_path):
    tf_run = run("tensorflow", str(tmp_path / "tf"))
    jax_run = run("jax", str(tmp_path / "jax"))
    assert (tf_run["backend"], jax_run["backend"]) == ("tensorflow", "jax")
    # The no-XLA baseline ran on both, before XLA met the short batches.
    assert tf_run["baseline_steps"] > 0 and jax_run["baseline_steps"] > 0
    assert (
        tf_run["compilations"]
        == jax_run["compilations"]
        == {
            "train": 2,
            "test": 2,
        }
    )
    expected = [
        ["test", "x", 0, [32, 8], [6, 8], "partial_batch"],
        ["train", "x", 0, [32, 8], [8, 8], "partial_batch"],
    ]
    assert tf_run["recompilations"] == jax_run["recompilations"] == expected
