"""Outputs: folders and files checked before long work, atomic writes, stale temporaries cleaned."""

import os
import subprocess
import sys

import pytest

from alac.outputs import OutputError, check_output_file, check_output_folder, write_atomically, write_text_atomically


def _dead_pid():
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_a_stale_temporary_of_a_killed_writer_is_removed_by_the_next_write(tmp_path):
    target = tmp_path / "model.alac"
    stale = tmp_path / f".model.alac.{_dead_pid()}.tmp"
    stale.write_bytes(b"half a checkpoint")
    live = tmp_path / f".model.alac.{os.getppid()}.tmp"     # a writer that is still running: kept
    live.write_bytes(b"being written")
    write_text_atomically(target, "new")
    assert target.read_text() == "new" and not stale.exists() and live.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == [live.name, "model.alac"]


def test_a_failed_write_leaves_the_previous_file(tmp_path):
    target = tmp_path / "metrics.json"
    write_text_atomically(target, "old")

    def broken(handle):
        handle.write(b"partial")
        raise OSError(28, "No space left on device")

    with pytest.raises(OutputError, match="metrics.json: cannot write"):
        write_atomically(target, broken)
    assert target.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["metrics.json"]


def test_output_folders_are_checked(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(OutputError, match="exists and is not a folder"):
        check_output_folder(tmp_path / "file")
    with pytest.raises(OutputError, match="cannot make this folder"):
        check_output_folder(tmp_path / "file" / "below")
    (tmp_path / "run" / "model.alac").mkdir(parents=True)
    with pytest.raises(OutputError, match="model.alac: is a folder"):
        check_output_folder(tmp_path / "run", ["model.alac"])
    check_output_folder(tmp_path / "new" / "deeper", ["model.alac"])
    assert (tmp_path / "new" / "deeper").is_dir()


def test_output_files_are_checked(tmp_path):
    with pytest.raises(OutputError, match="is a folder; give a file name"):
        check_output_file(tmp_path)
    with pytest.raises(OutputError, match="the folder .* does not exist"):
        check_output_file(tmp_path / "missing" / "p.txt")
    check_output_file(tmp_path / "p.txt")
    assert not (tmp_path / "p.txt").exists()
