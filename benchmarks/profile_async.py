"""One async LR epoch on the 4M x 39 synthetic set, for Nsight Compute:

    ncu --clock-control none -k regex:async -c 1 --section SpeedOfLight --section MemoryWorkloadAnalysis \\
        --section WarpStateStats python3 benchmarks/profile_async.py
"""

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main():
    from alac.data.synthetic import criteo_like
    from alac.models import zoo_model
    from alac.plan import Plan
    from alac.train import Trainer

    data = criteo_like(4_000_000, device="cuda")
    trainer = Trainer(zoo_model("lr"), lr=2.0,
                      plan=Plan(semantics="async", chunk_size=32), backend="triton", device="cuda")
    layout, labels = trainer.prepare(data)
    for epoch in range(2):
        trainer.executor.train_epoch(layout, labels, epoch, 2.0)
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
