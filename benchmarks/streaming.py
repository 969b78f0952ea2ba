"""Streamed training against resident training: blocks from pinned host memory through a copy stream.

    PYTHONPATH=. python benchmarks/streaming.py [--rows 4000000] [--budget-gb 1] [--epochs 4] [--out DIR]

The 4M x 39 synthetic set (benchmarks/flow.py's), async LR and FM k = 16 with the flow's async plan:
resident (the layout on the GPU), streamed with the copy of block i + 1 overlapping the kernels of
block i, and streamed without overlap (every copy in the kernels' stream). Epoch times are of epochs
run back to back after a first one; the validation loss per epoch comes from a second run.
copy_bound_ms is the bytes an epoch moves at the measured pinned host -> device bandwidth.
Writes results/streaming.json and .md.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from alac.runtime.timing import gpu_milliseconds
from benchmarks.flow import _model, _seconds, synthetic_train_valid
from benchmarks.render import streaming_table
from benchmarks.report import environment, write


def pinned_gb_per_s(megabytes=256):
    source = torch.empty(megabytes * 2**20 // 4).pin_memory()
    target = torch.empty_like(source, device="cuda")
    milliseconds, _ = gpu_milliseconds(lambda: target.copy_(source, non_blocking=True), repeats=10)
    return source.numel() * 4 / milliseconds / 1e6


def _back_to_back(epoch, epochs):
    """Seconds per epoch of epochs 1 .. epochs run back to back after epoch 0 (each epoch's copies
    counted, the next epoch's first block included), as a fit without validation runs them."""
    return _seconds(lambda: [epoch(e) for e in range(1, epochs + 1)]) / epochs


def _losses(epoch, executor, trainer, valid_layout, valid, epochs):
    """The validation logloss after each epoch of a second run from fresh parameters."""
    executor.state = None
    losses = []
    for e in range(epochs):
        epoch(e)
        trainer.executor.state = executor.state   # the trainer's evaluation reads these params
        losses.append(trainer.evaluate_layout(valid_layout, valid)["logloss"])
    return losses


def run_model(k, train, valid, args, bandwidth):
    from alac.plan import Plan
    from alac.runtime.executor import Executor
    from alac.runtime.planner import hot_size_for_data
    from alac.runtime.streams import StreamedLayout
    from alac.train import Trainer

    base = Plan(semantics="async", batch_size=1024, chunk_size=32)
    plan = Plan(semantics="async", batch_size=1024, chunk_size=32,
                hot_size=hot_size_for_data(train, base, "cuda", k))
    lr = args.fm_lr if k else args.lr
    name = f"fm_k{k}" if k else "lr"
    trainer = Trainer(_model(k), lr=lr, plan=plan, backend="triton", device="cuda", seed=args.seed)
    layout, labels = trainer.prepare(train)
    valid_layout = trainer.layout_of(valid)
    results = []
    for overlap, depth in ((True, 2), (True, 4), (True, 8), (False, 4)):
        streamed = StreamedLayout(layout, plan.chunks_per_batch, int(args.budget_gb * 2**30), "cuda", overlap, depth)
        executor = Executor(_model(k), plan, backend="triton", device="cuda", seed=args.seed)

        def epoch(e, streamed=streamed, executor=executor):
            return executor.train_streamed_epoch(streamed, lambda block: trainer.labels.model_labels(block.labels),
                                                 e, lr)

        epoch(0)  # compiles the kernels and makes the parameters off the clock
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base_bytes = torch.cuda.memory_allocated()
        seconds = _back_to_back(epoch, args.epochs)
        losses = _losses(epoch, executor, trainer, valid_layout, valid, args.epochs)
        results.append({"name": f"{name}_streamed_{depth}_per_budget" + ("" if overlap else "_no_overlap"),
                        "source": "host_pinned",
                        "blocks": len(streamed.blocks), "bytes_per_epoch": streamed.bytes_per_epoch,
                        "bytes_per_edge": streamed.bytes_per_epoch / train.nnz,
                        "ms_per_epoch": 1000 * seconds,
                        "copy_bound_ms": 1000 * streamed.bytes_per_epoch / (bandwidth * 1e9),
                        "val_logloss": losses,
                        "peak_gpu_bytes_above_start": torch.cuda.max_memory_allocated() - base_bytes})
    trainer.executor.state = None
    executor = trainer.executor

    def resident(e):
        return executor.train_epoch(layout, labels, e, lr)

    resident(0)
    resident_ms = 1000 * _back_to_back(resident, args.epochs)
    losses = _losses(resident, executor, trainer, valid_layout, valid, args.epochs)
    results.append({"name": f"{name}_resident", "source": "device", "ms_per_epoch": resident_ms,
                    "val_logloss": losses})
    for r in results:
        r["resident_ms"] = resident_ms
    return results


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=4_000_000)
    parser.add_argument("--valid-rows", type=int, default=400_000)
    parser.add_argument("--budget-gb", type=float, default=1.0)
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--lr", type=float, default=2.0)
    parser.add_argument("--fm-lr", type=float, default=0.5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=os.environ.get("OUT"))
    args = parser.parse_args()
    bandwidth = pinned_gb_per_s()
    train, valid = synthetic_train_valid(args.rows, args.valid_rows, "cuda", args.seed)
    arms = [arm for k in (0, 16) for arm in run_model(k, train, valid, args, bandwidth)]
    env = environment()
    payload = {"environment": env, "device": env["device"], "pinned_h2d_gb_per_s": bandwidth, "rows": args.rows,
               "budget_gb": args.budget_gb, "arms": arms}
    markdown = (f"Streamed against resident training ({env['device']}, {env['date']}; `PYTHONPATH=. python "
                f"benchmarks/streaming.py`): {args.rows:,} x 39 synthetic rows, async plans, budget "
                f"{args.budget_gb:g} GB.\n\n" + streaming_table(payload))
    print(markdown)
    write("streaming", payload, markdown, args.out)


if __name__ == "__main__":
    main()
