"""Outputs: folders and files checked before long work, atomic writes, stale temporaries cleaned."""

import os
import subprocess
import sys
from pathlib import Path

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


def _train(folder, epochs, *options):
    """An `alac train --out folder` of small synthetic data (reference backend); its exit status."""
    from alac.cli.commands import main

    return main(["train", "--model", "lr", "--synthetic", "600", "--epochs", str(epochs), "--optimizer", "sgd",
                 "--early-stopping", "none", "--backend", "reference", "--out", str(folder), *options])


def _run_of(folder):
    """(epochs of history.csv, epochs of model.alac, loss.png there) of a folder."""
    import torch

    saved = torch.load(folder / "model.alac", weights_only=True)
    history = (folder / "history.csv").read_text().splitlines()[1:]
    return len(history), saved["epoch"], (folder / "loss.png").exists()


class _Crash(BaseException):
    """A kill -9 at that point: nothing after it runs, no handler sees it."""


def test_a_run_killed_while_writing_its_outputs_leaves_one_runs_files(tmp_path):
    """A second run (3 epochs, no plot) killed at each of its file moves and removals in turn leaves the
    first run's set (2 epochs, loss.png) or, once the next alac opens the folder, its own: never a
    mixture (it used to leave the new model.alac beside the old metrics)."""
    import shutil

    from alac import outputs

    first = tmp_path / "first"
    assert _train(first, 2, "--plot") == 0 and _run_of(first) == (2, 2, True)
    real_replace, real_unlink = os.replace, Path.unlink
    for crash_at in range(1, 10):
        out = tmp_path / f"crash-{crash_at}"
        shutil.copytree(first, out)
        steps = []

        def counted(real):
            def step(*args, **kwargs):
                steps.append(args)
                if len(steps) == crash_at:
                    raise _Crash
                return real(*args, **kwargs)
            return step

        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(outputs.os, "replace", counted(real_replace))
            patch.setattr(outputs.Path, "unlink", counted(real_unlink))
            try:
                _train(out, 3)
            except _Crash:
                pass
        assert _run_of(out) in ((2, 2, True), (3, 3, False)) or (out / outputs.JOURNAL).exists()
        outputs.settle(out)
        assert _run_of(out) in ((2, 2, True), (3, 3, False)), crash_at
        # (a staging folder of this process, which is alive, stays: a killed writer's is removed, below)
        names = sorted(p.name for p in out.iterdir() if not p.name.startswith(".alac-run."))
        assert names in (["history.csv", "loss.png", "metrics.json", "model.alac"],
                         ["history.csv", "metrics.json", "model.alac"]), crash_at


def test_a_run_replaces_every_file_of_the_previous_one(tmp_path):
    """Files another run wrote and this one does not (a plot, an SCD run's weights) do not stay."""
    out = tmp_path / "run"
    (tmp_path / "run").mkdir()
    (out / "weights.npy").write_bytes(b"an SCD run's")
    (out / "notes.txt").write_text("the user's own")
    assert _train(out, 2, "--plot") == 0
    assert _train(out, 3) == 0
    assert _run_of(out) == (3, 3, False)
    assert sorted(p.name for p in out.iterdir()) == ["history.csv", "metrics.json", "model.alac", "notes.txt"]


def test_a_stale_staging_folder_of_a_killed_run_is_removed(tmp_path):
    from alac.outputs import settle

    stale = tmp_path / f".alac-run.{_dead_pid()}.0123456789ab.tmp"
    stale.mkdir()
    (stale / "model.alac").write_bytes(b"half")
    settle(tmp_path)
    assert not stale.exists()


@pytest.mark.parametrize("name, message", [
    ("", "the output folder's name is empty"),
    ("x" * 300, "File name too long"),
])
def test_output_folder_names_that_cannot_work_are_one_line(tmp_path, monkeypatch, capsys, name, message):
    from alac.cli.commands import main

    monkeypatch.chdir(tmp_path)
    status = main(["train", "--model", "lr", "--synthetic", "300", "--backend", "reference", "--out", name])
    error = capsys.readouterr().err
    assert status == 2 and message in error and error.count("\n") == 1, error
    assert list(tmp_path.iterdir()) == [tmp_path / "alac-cache"] or not any(tmp_path.iterdir())
