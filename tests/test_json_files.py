"""The JSON files keras_xla keeps: changed under a lock, so processes
saving at once lose nothing; kept in memory where they cannot be
written."""

import json
import multiprocessing
import os
import types

import pytest

from keras_xla.auto import memory as decision_memory
from keras_xla.core import json_files

KEYS = 40


def _update_keys(path, worker, barrier):
    barrier.wait()
    for i in range(KEYS):
        json_files.update(path, lambda d, i=i: d.update({f"{worker}/{i}": i}))


def _remember_decisions(directory, worker, barrier):
    memory = decision_memory.DecisionMemory.__new__(
        decision_memory.DecisionMemory
    )  # Without a model: the key comes from `_base` and the signature.
    memory.path = os.path.join(directory, decision_memory.FILE)
    memory._base = {"model": ["Stub"], "worker": worker}
    barrier.wait()
    for i in range(KEYS):
        tensor = types.SimpleNamespace(path="x", shape=(i, 4), dtype="f")
        signature = types.SimpleNamespace(tensors=(tensor,))
        memory.remember(signature, f"xla/{worker}", "faster")


def _run_at_once(monkeypatch, target, where, workers):
    # The children check no flags at import (a probe of seconds).
    monkeypatch.setenv("KERAS_XLA_FIX_FLAGS", "0")
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(workers)
    processes = [
        context.Process(target=target, args=(where, w, barrier))
        for w in range(workers)
    ]
    for p in processes:
        p.start()
    for p in processes:
        p.join(120)
    assert [p.exitcode for p in processes] == [0] * workers


def test_processes_updating_at_once_lose_no_key(tmp_path, monkeypatch):
    path = str(tmp_path / "kept.json")
    _run_at_once(monkeypatch, _update_keys, path, 2)
    data = json.load(open(path))
    assert data == {f"{w}/{i}": i for w in range(2) for i in range(KEYS)}
    assert sorted(os.listdir(tmp_path)) == ["kept.json", "kept.json.lock"]


def test_decisions_saved_at_once_are_all_kept(tmp_path, monkeypatch):
    _run_at_once(monkeypatch, _remember_decisions, str(tmp_path), 2)
    data = json.load(open(tmp_path / decision_memory.FILE))
    assert len(data) == 2 * KEYS
    winners = sorted(entry["winner"] for entry in data.values())
    assert winners == ["xla/0"] * KEYS + ["xla/1"] * KEYS


def test_what_cannot_be_written_is_kept_in_memory(tmp_path):
    path = str(tmp_path / "a_file" / "kept.json")
    (tmp_path / "a_file").write_text("not a directory")
    with pytest.raises(OSError):
        json_files.update(path, lambda d: d.update(a=1))
    with pytest.raises(OSError):
        json_files.update(path, lambda d: d.update(b=2))
    assert json_files.read_object(path) == {"a": 1, "b": 2}
    json_files._IN_MEMORY.pop(path)
    assert json_files.read_object(path) == {}


def test_a_link_is_not_read(tmp_path):
    (tmp_path / "real.json").write_text('{"a": 1}')
    os.symlink(tmp_path / "real.json", tmp_path / "link.json")
    assert json_files.read_object(str(tmp_path / "real.json")) == {"a": 1}
    assert json_files.read_object(str(tmp_path / "link.json")) == {}
