"""keras_xla's cache home: a home it cannot use falls back to a private
temporary folder with one logged reason, and import stays fast."""

import json
import logging
import os
import subprocess
import sys
import tempfile

import pytest

from keras_xla.core import cache_home

# A child that counts the flag-table probes it starts (and answers them
# at once, as a TensorFlow whose flags are all listed would).
CHILD = r"""
import json, subprocess, sys
probes, real = [], subprocess.Popen

class Probe:
    def __init__(self, args, env=None, **kwargs):
        probes.append([v for v, text in env.items() if text == "--help"][0])

    def communicate(self, timeout=None):
        usage = "Flags:\n\t--tf_xla_auto_jit=\"\"\tint32\tauto jit\n\n"
        return "[]\n", usage

    def kill(self):
        pass

def popen(args, *rest, env=None, **kwargs):
    if "--help" in (env or {}).values():
        return Probe(args, env)
    return real(args, *rest, env=env, **kwargs)

subprocess.Popen = popen
import keras_xla
print(json.dumps(probes))
"""


def import_keras_xla(home, tmp):
    env = dict(
        os.environ,
        KERAS_XLA_CACHE_DIR=str(home),
        TMPDIR=str(tmp),
        TF_XLA_FLAGS="--tf_xla_auto_jit=0",  # So the import checks flags.
    )
    env.pop("KERAS_XLA_FIX_FLAGS", None)
    result = subprocess.run(
        [sys.executable, "-c", CHILD],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.splitlines()[-1]), result.stderr


def test_a_home_that_is_a_file_probes_the_flags_once(tmp_path):
    home = tmp_path / "a_file"
    home.write_text("not a directory")
    (tmp_path / "tmp").mkdir()
    fallback = tmp_path / "tmp" / f"keras_xla-{os.getuid()}"
    first, said = import_keras_xla(home, tmp_path / "tmp")
    assert first == ["TF_XLA_FLAGS", "XLA_FLAGS"]
    assert said.count("cannot be used") == 1
    assert f"{home} cannot be used (a file, not a directory)" in said
    assert os.stat(fallback).st_mode & 0o777 == 0o700
    assert "tf_xla_auto_jit" in (fallback / "flag_tables.json").read_text()
    second, said = import_keras_xla(home, tmp_path / "tmp")
    assert second == []  # Read from the fallback: no probe.
    assert said.count("cannot be used") == 1
    assert home.read_text() == "not a directory"


@pytest.fixture
def temporary(tmp_path, monkeypatch):
    """The temporary directory is `tmp_path`; returns the fallback."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr(cache_home, "_CHOSEN", {})
    return tmp_path / f"keras_xla-{os.getuid()}"


def test_a_usable_home_is_used(tmp_path, temporary):
    home = tmp_path / "home" / "keras_xla"
    assert cache_home.unusable(str(home)) is None
    assert home.is_dir()


def test_a_home_every_user_can_write_is_not_used(
    tmp_path, temporary, monkeypatch, caplog
):
    home = tmp_path / "shared"
    home.mkdir()
    home.chmod(0o777)
    monkeypatch.setenv("KERAS_XLA_CACHE_DIR", str(home))
    with caplog.at_level(logging.WARNING, logger=cache_home.__name__):
        assert cache_home.directory() == str(temporary)
        assert cache_home.directory() == str(temporary)
    [record] = caplog.records  # One reason, once.
    assert "writable by every user" in record.getMessage()


@pytest.mark.parametrize("planted", ["link", "open"])
def test_a_fallback_not_private_to_the_user_is_not_used(
    tmp_path, temporary, monkeypatch, planted
):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    if planted == "link":
        os.symlink(elsewhere, temporary)
    else:
        temporary.mkdir()
        temporary.chmod(0o755)
    home = tmp_path / "a_file"
    home.write_text("")
    monkeypatch.setenv("KERAS_XLA_CACHE_DIR", str(home))
    assert cache_home.directory() == str(home)  # Memory only, then.
    assert os.listdir(elsewhere) == []


def test_a_file_not_kept_is_said_once(monkeypatch, caplog):
    monkeypatch.setattr(cache_home, "_said", set())
    error = OSError(28, "No space left on device")
    with caplog.at_level(logging.WARNING, logger=cache_home.__name__):
        for _ in range(3):
            cache_home.cannot_keep("the decision", error)
            cache_home.cannot_keep("the compile times", error, home=False)
    assert [r.getMessage() for r in caplog.records] == [
        "keras_xla: cannot keep the decision ([Errno 28] No space left "
        "on device); kept for this process.",
        "keras_xla: cannot keep the compile times ([Errno 28] No space "
        "left on device); kept for this process.",
    ]
