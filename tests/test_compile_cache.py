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


# Safety: what the cache loads, where it writes, and a full disk.


COMPILED = []


def entry_bytes():
    """A real cache entry: a new tiny compilation, written to the
    process's in-memory ledger."""
    from keras_xla.tf_backend import cache_entry, compile_ledger

    ledger = compile_ledger.status().directory
    assert cache_entry.in_memory(ledger), "the test process has a ledger"
    COMPILED.append(None)
    # A shape no other test (and no other call) compiles.
    size = 7919 + os.getpid() % 1000 + 1009 * len(COMPILED)
    tf.function(lambda v: v * 3.0, jit_compile=True)(tf.ones([size]))
    compile_ledger.stamp()
    newest = max(compile_ledger.entries(ledger).items(), key=lambda kv: kv[1])
    return os.path.basename(newest[0]), cache_entry.read_bytes(newest[0])


def test_a_directory_others_can_write_is_not_used(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)  # like a shared scratch folder
    status = cache_lib.enable_compile_cache(str(shared))
    assert status.active is False and status.untrusted is True
    assert "other users can write it (mode 1777)" in status.message
    (finding,) = [
        f for f in cache_lib.setup_findings(status) if "untrusted" in f[0]
    ]
    assert finding[0] == "compile-cache-untrusted"
    assert "chmod go-w" in finding[2] and "trust_shared_cache" in finding[2]
    # The user can say they trust it.
    trusted = cache_lib.enable_compile_cache(str(shared), trust_shared=True)
    assert trusted.active is True and trusted.untrusted is False


def test_entries_others_could_write_and_links_are_never_loaded(tmp_path):
    from keras_xla.tf_backend import cache_entries, compile_ledger

    name, data = entry_bytes()
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    planted = cache / name.replace("__", "__9", 1)
    planted.write_bytes(data)
    planted.chmod(0o666)  # anyone could have written it
    victim = tmp_path / "victim"
    victim.write_bytes(data)
    link = cache / name.replace("__", "__8", 1)
    link.symlink_to(victim)
    ledger = compile_ledger.status().directory
    copied, left_out = cache_entries.copy_in(str(cache), ledger, trust=False)
    assert copied == []
    assert dict(left_out) == {
        planted.name: "other users can write it (mode 666)",
        link.name: "it is a link or not a file",
    }
    loaded = {os.path.basename(p) for p in compile_ledger.entries(ledger)}
    assert planted.name not in loaded and link.name not in loaded
    # Trusted: the shared file loads; a link still never does.
    copied, left_out = cache_entries.copy_in(str(cache), ledger, trust=True)
    assert copied == [planted.name]
    assert [n for n, _ in left_out] == [link.name]
    compile_ledger.remove(f"{ledger}/{planted.name}")


def in_force(cache):
    """`cache` is the compile cache in force, as enabling it makes it:
    what compiles from now on is its to save."""
    from keras_xla.tf_backend import cache_entries, compile_ledger

    cache.mkdir(mode=0o700)
    cache_entries.claim(str(cache), compile_ledger.status().directory)


def test_copy_out_never_writes_through_a_link(tmp_path):
    from keras_xla.tf_backend import cache_entries, compile_ledger

    cache = tmp_path / "cache"
    in_force(cache)
    name, data = entry_bytes()
    victim = tmp_path / "victim"
    victim.write_bytes(b"the user's file")
    # A link at the entry's name and at every name an old version used
    # for its temporary copy.
    (cache / name).symlink_to(victim)
    (cache / f".{name}.{os.getpid()}.partial").symlink_to(victim)
    ledger = compile_ledger.status().directory
    copied, problem = cache_entries.copy_out(ledger, str(cache))
    assert problem is None
    assert name not in copied  # the directory already has that name
    assert victim.read_bytes() == b"the user's file"
    # Where the name is free, the entry is written whole, and only there.
    (cache / name).unlink()
    copied, problem = cache_entries.copy_out(ledger, str(cache))
    assert name in copied and problem is None
    assert (cache / name).read_bytes() == data
    assert victim.read_bytes() == b"the user's file"


def test_a_full_disk_costs_the_cache_never_a_file(tmp_path, monkeypatch):
    import collections
    import errno

    from keras_xla.tf_backend import cache_entries, compile_ledger

    cache = tmp_path / "cache"
    in_force(cache)
    name, _ = entry_bytes()
    ledger = compile_ledger.status().directory
    usage = collections.namedtuple("usage", "total used free")
    monkeypatch.setattr(
        cache_entries.shutil, "disk_usage", lambda d: usage(1, 1, 1 << 20)
    )
    copied, problem = cache_entries.copy_out(ledger, str(cache))
    assert copied == [] and "1 MiB free" in problem
    assert os.listdir(cache) == []
    # The check passed, and the disk filled up while writing.
    monkeypatch.setattr(
        cache_entries.shutil, "disk_usage", lambda d: usage(1, 1, 1 << 40)
    )

    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(cache_entries.os, "fsync", full)
    copied, problem = cache_entries.copy_out(ledger, str(cache))
    assert copied == [] and "No space left on device" in problem
    assert os.listdir(cache) == []  # no partial file left behind
    assert name  # the entry stays in the ledger for a later try


def test_the_tuner_passes_trust_to_the_cache(tmp_path):
    from keras_xla import XLATuner

    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    untrusted = XLATuner(verbose=0, compile_cache=str(shared))
    assert untrusted._settings.cache_status.untrusted is True
    trusted = XLATuner(
        verbose=0, compile_cache=str(shared), trust_shared_cache=True
    )
    assert trusted._settings.cache_status.active is True


def test_entries_loaded_from_one_cache_never_go_to_another(tmp_path):
    # Two caches in one process (two trials with different directories):
    # what was loaded from A is A's; B gets only what this process
    # compiled.
    from keras_xla.tf_backend import cache_entries, compile_ledger

    ledger = compile_ledger.status().directory
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir(mode=0o700)
    in_force(b)
    name, data = entry_bytes()
    from_a = name.replace("__", "__7", 1)
    (a / from_a).write_bytes(data)
    (a / from_a).chmod(0o600)
    copied, _ = cache_entries.copy_in(str(a), ledger, trust=False)
    assert copied == [from_a]
    written, problem = cache_entries.copy_out(ledger, str(b))
    assert problem is None
    assert from_a not in written and not (b / from_a).exists()
    assert name in written  # compiled here
    compile_ledger.remove(f"{ledger}/{from_a}")


def test_each_cache_gets_only_what_was_compiled_under_it(tmp_path):
    # One process trains with compile_cache=A, then with B (two trials):
    # A's compilation is A's alone, B's is B's alone, whichever saves
    # first or last.
    from keras_xla.tf_backend import cache_entries, compile_ledger

    ledger = compile_ledger.status().directory
    a, b = tmp_path / "a", tmp_path / "b"
    in_force(a)
    under_a, _ = entry_bytes()
    in_force(b)
    under_b, _ = entry_bytes()
    assert under_a != under_b
    assert cache_entries.copy_out(ledger, str(b))[0] == [under_b]
    # (A also gets what the process compiled before any cache: a late
    # enable.)
    saved = cache_entries.copy_out(ledger, str(a))[0]
    assert under_a in saved and under_b not in saved
    # A again: what compiles now is A's; B keeps what it had.
    cache_entries.claim(str(a), ledger)
    again, _ = entry_bytes()
    assert cache_entries.copy_out(ledger, str(b))[0] == []
    assert cache_entries.copy_out(ledger, str(a))[0] == [again]


def test_copy_in_takes_the_newest_entries_up_to_half_the_ledger(
    tmp_path, monkeypatch
):
    from keras_xla.tf_backend import cache_entries, compile_ledger

    name, data = entry_bytes()
    ledger = compile_ledger.status().directory
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    names = [name.replace("__", f"__{i}", 1) for i in (4, 5, 6, 3)]
    for age, entry in enumerate(names):
        (cache / entry).write_bytes(data)
        (cache / entry).chmod(0o600)
        os.utime(cache / entry, (1000.0 + age, 1000.0 + age))
    monkeypatch.setattr(compile_ledger, "MAX_ENTRIES", 4)
    copied, left_out = cache_entries.copy_in(str(cache), ledger, trust=False)
    assert copied == [names[3], names[2]] and left_out == []
    for entry in copied:
        compile_ledger.remove(f"{ledger}/{entry}")


def test_only_the_process_that_enabled_the_cache_saves_to_it_at_exit(
    tmp_path,
):
    # A forked child inherits the exit handler: it must not write the
    # parent's cache (nor remove anything of the parent's).
    from keras_xla.tf_backend import compile_cache, compile_ledger

    ledger = compile_ledger.status().directory
    cache = tmp_path / "cache"
    in_force(cache)
    entry_bytes()
    compile_cache._save_at_exit(ledger, str(cache), os.getpid() + 1)
    assert os.listdir(cache) == []
    compile_cache._save_at_exit(ledger, str(cache), os.getpid())
    assert os.listdir(cache) != []
