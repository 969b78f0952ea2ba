"""Async epochs on the 4M x 39 synthetic set for Nsight Compute, with flow.py's plan (C = 32, the hot
segment from the cost model): LR, or FM with --k:

    ncu --clock-control none -k regex:async -s 1 -c 1 --section SpeedOfLight --section MemoryWorkloadAnalysis \\
        --section WarpStateStats --section Occupancy --section LaunchStats \\
        python3 benchmarks/profile_async.py --k 16

(-s 1: the second epoch's launch, the first compiles and warms the caches.)
"""

import argparse
import dataclasses
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main():
    from alac.data.synthetic import criteo_like
    from alac.models import zoo_model
    from alac.plan import Plan
    from alac.runtime.planning.planner import hot_size_for_data
    from alac.train.trainer import Trainer

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--k", type=int, default=0, help="FM's factors (0: LR)")
    parser.add_argument("--epochs", type=int, default=2)
    args = parser.parse_args()
    data = criteo_like(4_000_000, device="cuda")
    plan = Plan(semantics="async", chunk_size=32)
    plan = dataclasses.replace(plan, hot_size=hot_size_for_data(data, plan, "cuda", args.k))
    model, lr = (zoo_model("fm", k=args.k), 0.5) if args.k else (zoo_model("lr"), 2.0)   # flow.py's rates
    trainer = Trainer(model, lr=lr, plan=plan, backend="triton", device="cuda")
    layout, labels = trainer.prepare(data)
    print(f"alac: {trainer.plan.describe()}", flush=True)
    for epoch in range(args.epochs):
        trainer.executor.train_epoch(layout, labels, epoch, lr)
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
