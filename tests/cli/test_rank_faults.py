"""Faults across ranks (alac.runtime.ranks.rank_watch): a rank killed or stopped mid-training ends the run on
the other within the bounded wait, which exits with status 4 and one line naming the failed rank and
what it was doing, and leaves the output folder as it was. Two gloo ranks on the CPU, started by hand
(rank 0 then hosts the store) and by torchrun."""

import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from benchmarks.rank_faults import rank_pid

ROOT = Path(__file__).resolve().parents[2]
TRAIN = ["-m", "alac", "train", "--model", "lr", "--synthetic", "6000", "--epochs", "300", "--early-stopping", "none",
         "--optimizer", "sgd", "--lr", "0.5", "--backend", "reference", "--sync-every", "1", "--rank-timeout", "3"]
# a field model's run over ranks (its tables sharded, the ranks' exchanges every step)
DEEP = ["-m", "alac", "train", "--model", "deepfm", "--synthetic", "3000", "--epochs", "300", "--patience", "300",
        "--k", "4", "--hidden", "8", "--batch-size", "128", "--device", "cpu", "--rank-tables", "sharded",
        "--rank-timeout", "3"]


def _environment(**extra):
    return {**os.environ, "CUDA_VISIBLE_DEVICES": "", "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", **extra}


def _free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _wait_for_training(path, process, deadline=90):
    """Until rank 0 has printed its second epoch (training, collectives between the ranks)."""
    end = time.monotonic() + deadline
    while time.monotonic() < end and process.poll() is None:
        if "epoch   2" in path.read_text():
            return
        time.sleep(0.2)
    pytest.fail(f"no training (exit status {process.poll()}): {path.read_text()[-2000:]}")


def _old_outputs(folder):
    folder.mkdir()
    (folder / "metrics.json").write_text("the previous run's")


def _kept(folder):
    return sorted(p.name for p in folder.iterdir()) == ["metrics.json"] and \
        (folder / "metrics.json").read_text() == "the previous run's"


# (kill -9 of rank 1: under torchrun, below)
@pytest.mark.parametrize("command, victim, sig, message", [
    (TRAIN, 1, signal.SIGSTOP, "alac: error: rank 1 failed (silent for 3 s) while training epoch"),
    (TRAIN, 0, signal.SIGKILL, "alac: error: the store the ranks meet at stopped answering"),
    (DEEP, 1, signal.SIGSTOP, "alac: error: rank 1 failed (silent for 3 s) while training epoch"),
])
def test_a_killed_or_stopped_rank_ends_the_run_on_the_other_in_one_line(tmp_path, command, victim, sig, message):
    out = tmp_path / "out"
    _old_outputs(out)
    port = _free_port()
    ranks = []
    for rank in range(2):
        log = tmp_path / f"{rank}.out"
        environment = _environment(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                                   LOCAL_RANK=str(rank), WORLD_SIZE="2")
        ranks.append(subprocess.Popen([sys.executable, *command, "--out", str(out)], env=environment, cwd=tmp_path,
                                      stdout=open(log, "w"), stderr=subprocess.PIPE, text=True))
    try:
        _wait_for_training(tmp_path / "0.out", ranks[0])
        os.kill(ranks[victim].pid, sig)
        killed = time.monotonic()
        survivor = ranks[1 - victim]
        _, error = survivor.communicate(timeout=30)
        seconds = time.monotonic() - killed
    finally:
        for process in ranks:
            process.kill()
            process.wait()
    assert survivor.returncode == 4, error
    lines = [line for line in error.splitlines() if line.startswith("alac")]
    assert len(lines) == 1 and lines[0].startswith(message) and "Traceback" not in error, error
    assert lines[0].endswith(f"rank {1 - victim} stops too (--rank-timeout 3 s)")
    assert seconds < (3 + 4 if sig == signal.SIGSTOP else 4)
    assert _kept(out)


@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="finds torchrun's ranks through /proc")
def test_under_torchrun_a_killed_rank_is_named_by_the_survivor(tmp_path):
    out = tmp_path / "out"
    _old_outputs(out)
    marker = uuid.uuid4().hex
    log = tmp_path / "torchrun.out"
    run = subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                            *TRAIN, "--out", str(out)], env=_environment(ALAC_FAULT_RUN=marker), cwd=tmp_path,
                           stdout=open(log, "w"), stderr=open(tmp_path / "torchrun.err", "w"))
    try:
        _wait_for_training(log, run)
        os.kill(rank_pid(marker, 1), signal.SIGKILL)
        run.wait(timeout=60)
    finally:
        run.kill()
        run.wait()
    error = (tmp_path / "torchrun.err").read_text()
    assert run.returncode != 0
    assert "alac: error: rank 1 failed (its process is gone) while training epoch" in error, error
    assert _kept(out)
