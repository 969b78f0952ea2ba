"""Faults across ranks under torchrun: how long a run takes to end when one of its ranks is killed or
stopped mid-training, and what the survivor says.

    PYTHONPATH=. python benchmarks/rank_faults.py [--rows 2000000] [--rank-timeout 10] [--out DIR]

Two ranks (NCCL on two GPUs, else gloo on the CPU with the reference backend) train sync LR (AdaGrad)
on synthetic rows with the parameters synchronised every batch; once rank 0 has printed its second
epoch, the victim gets the signal. Recorded per scenario: seconds from the signal until the surviving
rank has exited and until torchrun has (torchrun gives a stopped rank 30 s after SIGTERM before it
kills it), the survivor's exit status and its alac line. Writes results/rank_faults.json and .md.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.report import environment, table, write

SCENARIOS = (("kill -9 rank 1", 1, signal.SIGKILL), ("SIGSTOP rank 1", 1, signal.SIGSTOP),
             ("kill -9 rank 0", 0, signal.SIGKILL))


def rank_pid(marker, rank):
    """The pid of the rank whose environment holds ALAC_FAULT_RUN=marker (torchrun's children)."""
    for environ in Path("/proc").glob("[0-9]*/environ"):
        try:
            variables = environ.read_bytes().split(b"\0")
        except OSError:
            continue
        if f"ALAC_FAULT_RUN={marker}".encode() in variables and f"RANK={rank}".encode() in variables:
            return int(environ.parent.name)
    return None


def _running(pid):
    try:
        state = Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in (b"Z", b"X")


def run_scenario(name, victim, sig, args, folder):
    import torch

    gpus = torch.cuda.device_count() >= 2
    marker = uuid.uuid4().hex
    log, errors = folder / f"{marker}.out", folder / f"{marker}.err"
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", "-m", "alac",
               "train", "--model", "lr", "--synthetic", str(args.rows), "--epochs", "100000", "--early-stopping",
               "none", "--optimizer", "adagrad", "--sync-every", "1", "--rank-timeout", str(args.rank_timeout),
               "--backend", "triton" if gpus else "reference"]
    environment_ = {**os.environ, "ALAC_FAULT_RUN": marker, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    run = subprocess.Popen(command, env=environment_, stdout=open(log, "w"), stderr=open(errors, "w"), cwd=folder)
    try:
        end = time.monotonic() + 300
        while "epoch   2" not in log.read_text() and run.poll() is None and time.monotonic() < end:
            time.sleep(0.2)
        pids = [rank_pid(marker, rank) for rank in range(2)]
        os.kill(pids[victim], sig)
        signalled = time.monotonic()
        survivor_exit = None
        while run.poll() is None and time.monotonic() - signalled < 240:
            if survivor_exit is None and not _running(pids[1 - victim]):
                survivor_exit = time.monotonic() - signalled
            time.sleep(0.05)
        torchrun_exit = time.monotonic() - signalled
    finally:
        run.kill()
        run.wait()
    lines = [line for line in errors.read_text().splitlines() if line.startswith("alac: ")]
    return {"name": name, "victim": victim, "signal": sig.name, "backend": "nccl" if gpus else "gloo",
            "survivor_exit_seconds": survivor_exit, "torchrun_exit_seconds": torchrun_exit,
            "torchrun_status": run.returncode, "survivor_line": lines[0] if lines else None,
            "rank_timeout": args.rank_timeout}


def report(result):
    def seconds(value):
        return "-" if value is None else f"{value:.1f}"

    rows = [[a["name"], a["backend"], seconds(a["survivor_exit_seconds"]), seconds(a["torchrun_exit_seconds"]),
             a["survivor_line"] or "-"] for a in result["arms"]]
    return table(["fault", "backend", "survivor exited (s)", "torchrun exited (s)", "the survivor's line"], rows)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--rank-timeout", type=float, default=10.0)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    arms = []
    with tempfile.TemporaryDirectory() as folder:
        for name, victim, sig in SCENARIOS:
            arms.append(run_scenario(name, victim, sig, args, Path(folder)))
            print(arms[-1], flush=True)
    result = {"environment": environment(), "arguments": vars(args), "arms": arms}
    write("rank_faults", result, report(result), args.out)


if __name__ == "__main__":
    main()
