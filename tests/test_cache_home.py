"""keras_xla's cache home: a home it cannot use falls back to a private
temporary folder, said once per machine, and import stays fast: it runs
the flag-table probe at most once where anything can be kept, and not at
all for well-known flags."""

import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile

import pytest

from keras_xla.core import cache_home, json_files

# A flag outside the built-in table of well-known flags: checking it at
# import needs TensorFlow's table (the probe), kept in the cache home.
UNUSUAL = "--tf_xla_clustering_fuel=100"
# A child that counts the flag-table probes it starts (and answers them
# at once, as a TensorFlow whose flags are all listed would).
CHILD = r"""
import json, subprocess, sys
probes, real = [], subprocess.Popen

class Probe:
    def __init__(self, args, env=None, **kwargs):
        probes.append([v for v, text in env.items() if text == "--help"][0])

    def communicate(self, timeout=None):
        usage = (
            "Flags:\n\t--tf_xla_auto_jit=\"\"\tstring\tauto jit\n"
            "\t--tf_xla_clustering_fuel=9\tint64\tfuel\n\n"
        )
        return "[]\n", usage

    def kill(self):
        pass

def popen(args, *rest, env=None, **kwargs):
    if "--help" in (env or {}).values():
        return Probe(args, env)
    return real(args, *rest, env=env, **kwargs)

subprocess.Popen = popen
import keras_xla
loaded = sorted(
    m for m in ("tensorflow", "keras_xla.tf_backend.flag_tables")
    if m in sys.modules
)
print(json.dumps({"probes": probes, "loaded": loaded}))
"""
SAID = "cannot be used"  # The cache home's warning.


def import_keras_xla(home, tmp, **flags):
    """`import keras_xla` in a fresh process with the cache home `home`
    and the temporary directory `tmp`; returns the probes it started,
    the modules it loaded and its stderr."""
    flags = flags or {"TF_XLA_FLAGS": UNUSUAL}
    env = {k: v for k, v in os.environ.items() if "XLA_FLAGS" not in k}
    env.update(KERAS_XLA_CACHE_DIR=str(home), TMPDIR=str(tmp), **flags)
    env.pop("KERAS_XLA_FIX_FLAGS", None)  # So the import checks flags.
    result = subprocess.run(
        [sys.executable, "-c", CHILD],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout.splitlines()[-1])
    return out["probes"], out["loaded"], result.stderr


def test_a_home_that_is_a_file_probes_the_flags_once(tmp_path):
    home = tmp_path / "a_file"
    home.write_text("not a directory")
    (tmp_path / "tmp").mkdir()
    fallback = tmp_path / "tmp" / f"keras_xla-{os.getuid()}"
    first, _, said = import_keras_xla(home, tmp_path / "tmp")
    assert first == ["TF_XLA_FLAGS", "XLA_FLAGS"]
    assert said.count(SAID) == 1
    assert f"{home} cannot be used (a file, not a directory)" in said
    assert "KERAS_XLA_CACHE_DIR" in said
    assert os.stat(fallback).st_mode & 0o777 == 0o700
    assert (
        "tf_xla_clustering_fuel" in (fallback / "flag_tables.json").read_text()
    )
    second, _, said = import_keras_xla(home, tmp_path / "tmp")
    assert second == []  # Read from the fallback: no probe.
    assert said.count(SAID) == 0  # Said once, not per process.
    assert home.read_text() == "not a directory"


@pytest.fixture
def read_only_home(tmp_path):
    """A cache home directory this user cannot write: its mode where
    that stops the user, else (root) the immutable attribute."""
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    if os.geteuid() != 0:
        home.chmod(0o500)
        try:
            yield home
        finally:
            home.chmod(0o700)
        return
    if shutil.which("chattr") is None:
        pytest.skip("root ignores modes and chattr is not installed")
    done = subprocess.run(
        ["chattr", "+i", str(home)], capture_output=True, text=True
    )
    if done.returncode != 0:
        pytest.skip(f"root ignores modes and chattr +i failed: {done.stderr}")
    try:
        yield home
    finally:
        subprocess.run(["chattr", "-i", str(home)], check=True)


def test_a_read_only_home_probes_the_flags_once(tmp_path, read_only_home):
    (tmp_path / "tmp").mkdir()
    first, _, said = import_keras_xla(read_only_home, tmp_path / "tmp")
    assert first == ["TF_XLA_FLAGS", "XLA_FLAGS"]
    assert said.count(SAID) == 1
    assert f"{read_only_home} cannot be used (not writable)" in said
    second, _, said = import_keras_xla(read_only_home, tmp_path / "tmp")
    assert second == [] and said.count(SAID) == 0
    assert os.listdir(read_only_home) == []


@pytest.fixture
def memory_only(tmp_path):
    """A cache home every user can write, and a fallback planted by
    someone else (not private): neither may be used, so nothing is kept
    on disk. Returns the home and the fallback."""
    home = tmp_path / "shared"
    home.mkdir()
    home.chmod(0o777)
    (tmp_path / "tmp").mkdir()
    planted = tmp_path / "tmp" / f"keras_xla-{os.getuid()}"
    planted.mkdir()
    planted.chmod(0o755)
    return home, planted


def test_memory_only_well_known_flags_run_no_probe_at_import(memory_only):
    home, planted = memory_only
    flags = {
        "TF_XLA_FLAGS": "--tf_xla_auto_jit=2",
        "XLA_FLAGS": "--xla_force_host_platform_device_count=2",
    }
    for _ in range(2):
        probes, _, said = import_keras_xla(home, planted.parent, **flags)
        assert probes == []
        assert said.count(SAID) == 0  # The import needs no cache home.
    assert os.listdir(home) == [] and os.listdir(planted) == []


def test_memory_only_an_unusual_flag_is_checked_in_each_process(memory_only):
    home, planted = memory_only
    for _ in range(2):  # Nothing can be kept, nor that it was said.
        probes, _, said = import_keras_xla(home, planted.parent)
        assert probes == ["TF_XLA_FLAGS", "XLA_FLAGS"]
        assert said.count(SAID) == 1
        assert "in memory for this process" in said
    assert os.listdir(home) == [] and os.listdir(planted) == []


def test_on_jax_the_import_runs_nothing_of_the_flag_tables(tmp_path):
    (tmp_path / "tmp").mkdir()
    probes, loaded, _ = import_keras_xla(
        tmp_path / "home",
        tmp_path / "tmp",
        KERAS_BACKEND="jax",
        XLA_FLAGS="--xla_unlisted_flag=1",  # JAX's own; not checked.
    )
    assert (probes, loaded) == ([], [])
    assert not (tmp_path / "home").exists()


@pytest.fixture
def temporary(tmp_path, monkeypatch):
    """The temporary directory is `tmp_path`; returns the fallback."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr(cache_home, "_CHOSEN", {})
    monkeypatch.setattr(json_files, "_MEMORY_ONLY", set())
    monkeypatch.setattr(json_files, "_IN_MEMORY", {})
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
    monkeypatch.setattr(cache_home, "_CHOSEN", {})  # As a later process.
    caplog.clear()
    with caplog.at_level(logging.DEBUG, logger=cache_home.__name__):
        assert cache_home.directory() == str(temporary)
    [record] = caplog.records
    assert record.levelno == logging.DEBUG  # Warned once per machine.
    assert json_files.read_object(str(temporary / "homes_not_used.json")) == {
        str(home): "writable by every user"
    }


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
    kept = os.path.join(home, "peaks.json")
    assert json_files.update(kept, lambda d: d.update(x=1)) == {"x": 1}
    assert json_files.read_object(kept) == {"x": 1}  # From memory.
    assert os.listdir(elsewhere) == [] and home.read_text() == ""


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
