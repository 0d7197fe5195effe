"""Files written whole: a full disk, a permission or a planted link
leaves the earlier file, no temporary file, and nothing outside."""

import errno
import json
import os

import pytest

from keras_xla.core import files, json_files
from keras_xla.core.report import XLAReport


def full_disk(monkeypatch, larger_than=0):
    """`os.write` of more than `larger_than` bytes fails: no space."""
    real = os.write

    def write(fd, data):
        if len(data) > larger_than:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(fd, data)

    monkeypatch.setattr(os, "write", write)


def test_a_file_is_written_whole_with_the_usual_permissions(tmp_path):
    path = str(tmp_path / "a.json")
    assert files.write_whole(path, "{}\n") == path
    assert files.write_whole(path, b"[1]") == path
    assert open(path, "rb").read() == b"[1]"
    assert os.listdir(tmp_path) == ["a.json"]
    assert os.stat(path).st_mode & 0o777 == 0o666 & ~files._umask()


@pytest.mark.parametrize("failing", ["write", "fsync", "replace"])
def test_a_failed_write_keeps_the_old_file_and_leaves_nothing(
    tmp_path, monkeypatch, failing
):
    path = str(tmp_path / "xla_report.json")
    files.write_whole(path, '{"old": 1}')

    def fail(*args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, failing, fail)
    with pytest.raises(OSError) as raised:
        files.write_whole(path, '{"new": 2}' * 1000)
    monkeypatch.undo()
    assert raised.value.errno == errno.ENOSPC
    assert os.listdir(tmp_path) == ["xla_report.json"]
    assert json.load(open(path)) == {"old": 1}


def test_a_report_on_a_full_disk_keeps_the_earlier_report(
    tmp_path, monkeypatch
):
    first = XLAReport(environment={"run": "first"})
    first.write(str(tmp_path))
    second = XLAReport(environment={"run": "second"})
    second._written = True  # The same fit writing again.
    full_disk(monkeypatch)
    with pytest.raises(OSError):
        second.write(str(tmp_path))
    monkeypatch.undo()
    assert os.listdir(tmp_path) == ["xla_report.json"]
    assert XLAReport.load(str(tmp_path)).environment == {"run": "first"}


def test_no_link_at_a_guessable_name_is_followed(tmp_path):
    log_dir, outside = tmp_path / "logs", tmp_path / "outside"
    log_dir.mkdir()
    outside.mkdir()
    victims = {}
    guesses = [
        "xla_report.json.tmp",
        f"xla_report.json.{os.getpid()}.tmp",
        ".xla_report.json.tmp",
        f"kept.json.{os.getpid()}.tmp",
        "kept.json.tmp",
        "kept.json.lock",
    ]
    for i, name in enumerate(guesses):
        victim = outside / f"victim{i}"
        victim.write_text(f"mine {i}")
        victims[victim] = f"mine {i}"
        os.symlink(victim, log_dir / name)
    XLAReport(environment={"run": "1"}).write(str(log_dir))
    json_files.write(str(log_dir / "kept.json"), {"a": 1})
    with pytest.raises(OSError) as raised:  # The lock is never a link.
        json_files.update(str(log_dir / "kept.json"), lambda d: None)
    assert raised.value.errno == errno.ELOOP
    assert {v: v.read_text() for v in victims} == victims
    assert json.load(open(log_dir / "xla_report.json"))["environment"] == {
        "run": "1"
    }
    assert json.load(open(log_dir / "kept.json")) == {"a": 1}
    assert sorted(os.listdir(log_dir)) == sorted(
        guesses + ["xla_report.json", "kept.json"]
    )


def test_a_link_at_the_final_name_is_replaced_not_followed(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("mine")
    path = tmp_path / "logs" / "hlo" / "train_step.optimized.hlo.pb"
    path.parent.mkdir(parents=True)
    os.symlink(victim, path)
    files.write_whole(str(path), b"\x00module")
    assert victim.read_text() == "mine"
    assert not path.is_symlink() and path.read_bytes() == b"\x00module"


def test_a_folder_reached_through_a_link_is_not_written(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (tmp_path / "logs").mkdir()
    os.symlink(outside, tmp_path / "logs" / "hlo")
    path = str(tmp_path / "logs" / "hlo" / "train_step.optimized.hlo.pb")
    with pytest.raises(OSError) as raised:
        files.write_into_own_directory(path, b"module")
    assert raised.value.errno == errno.ENOTDIR
    assert os.listdir(outside) == []


def test_deferred_files_wait_for_their_owner(tmp_path):
    path = str(tmp_path / "hlo" / "module.pb")
    pending = []
    with files.deferring(pending):
        assert files.write_later(path, b"late") == path
    assert pending == [(path, b"late")] and not os.path.exists(path)
    files.write_later(path, b"now")  # No deferring block: written now.
    assert open(path, "rb").read() == b"now"
