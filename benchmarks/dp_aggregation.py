"""How data-parallel ranks' changes combine (alac.train.data_parallel), measured where the order of steps is
exact: two gloo ranks on the CPU with the reference backend (an async plan runs there as sequential
SGD, chunk after chunk), against one process on all the rows, on the synthetic Criteo-shaped set.

    PYTHONPATH=. python benchmarks/dp_aggregation.py [--out benchmarks/results]

Per arm: `name`, `ranks`, `aggregation`, `val_logloss` per epoch; each model's one-process arm is
the reference. Writes results/dp_aggregation.json and .md (a CPU run goes to the temporary folder
unless --out names one).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from alac.data.synthetic import criteo_like
from alac.models import zoo_model
from alac.plan import Plan
from alac.runtime.ranks.distributed import Ranks, init_ranks
from alac.train.data_parallel import AGGREGATIONS, DataParallelTrainer
from benchmarks.report import environment, table, write

# (model, k, rows, lr): LR at benchmarks/flow.py's lr, FM at its --lr 0.5
PROBLEMS = (("lr", 0, 400_000, 2.0), ("fm", 8, 200_000, 0.5))
VALID_ROWS = 50_000


def _options(lr, seed):
    return dict(lr=lr, plan=Plan(semantics="async", batch_size=1024, chunk_size=32), backend="reference",
                device="cpu", seed=seed)


def _model(name, k):
    return zoo_model("fm", k=k) if name == "fm" else zoo_model("lr")


def _data(rows, seed):
    return criteo_like(rows, seed=seed, device="cpu"), criteo_like(VALID_ROWS, seed=seed, device="cpu",
                                                                    first_row=rows)


def _arm(name, model, trainer, train, valid):
    history = trainer.fit(train, valid)
    return {"name": name, "model": model, "ranks": trainer.ranks.world, "aggregation": trainer.aggregation,
            "val_logloss": [r["valid_logloss"] for r in history]}


def _ranks(rank, world, store, args, out):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    arms = []
    for model, k, rows, lr in PROBLEMS:
        train, valid = _data(rows, args.seed)
        for aggregation in AGGREGATIONS:
            trainer = DataParallelTrainer(_model(model, k), ranks=init_ranks(), aggregation=aggregation,
                                          epochs=args.epochs, **_options(lr, args.seed))
            arms.append(_arm(f"{model}_{world}_ranks_{aggregation}", model, trainer, train, valid))
    if rank == 0:
        torch.save(arms, out)
    dist.destroy_process_group()


def report(payload):
    """A row per model: one process's validation logloss per epoch, each aggregation's last against it."""
    rows = []
    for model in dict.fromkeys(a["model"] for a in payload["arms"]):
        arms = [a for a in payload["arms"] if a["model"] == model]
        alone = next(a for a in arms if a["ranks"] == 1)
        last = {a["aggregation"]: a["val_logloss"][-1] - alone["val_logloss"][-1] for a in arms if a["ranks"] > 1}
        rows.append([model, " / ".join(f"{v:.4f}" for v in alone["val_logloss"])]
                    + [f"{last[a]:+.4f}" if a in last else "-" for a in AGGREGATIONS])
    return table(["model", "one process: validation logloss per epoch"]
                 + [f"2 ranks {a}: last against it" for a in AGGREGATIONS], rows)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    torch.set_num_threads(2)
    arms = []
    for model, k, rows, lr in PROBLEMS:
        train, valid = _data(rows, args.seed)
        trainer = DataParallelTrainer(_model(model, k), ranks=Ranks(), epochs=args.epochs, **_options(lr, args.seed))
        arms.append(_arm(f"{model}_one_process", model, trainer, train, valid))
    folder = tempfile.mkdtemp()
    mp.spawn(_ranks, args=(2, os.path.join(folder, "store"), args, os.path.join(folder, "arms.pt")), nprocs=2)
    arms += torch.load(os.path.join(folder, "arms.pt"))
    payload = {"environment": environment(), "arguments": vars(args),
               "problems": [dict(zip(("model", "k", "rows", "lr"), p)) for p in PROBLEMS], "arms": arms}
    write("dp_aggregation", payload, report(payload), args.out)
    print(report(payload))


if __name__ == "__main__":
    main()
