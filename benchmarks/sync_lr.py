"""Sync mini-batch LR on the synthetic Criteo-shaped set: alac against PyTorch, side by side.

    PYTHONPATH=. python benchmarks/sync_lr.py [--rows 4000000] [--epochs 10] [--lr 2] [--out DIR]

Arms, all on the same GPU in one process, same data, same batch size (1024), same learning rate on
the batch-mean gradient, zero initial weights:
- pytorch_embeddingbag: idiomatic PyTorch, nn.EmbeddingBag(sparse=True) + optim.SGD, rows reshuffled
  every epoch;
- alac_reference: alac's reference executor (vectorized PyTorch of the same IR: gathers, index_add)
  on the GPU, the stage-based PyTorch baseline;
- alac_stage: alac's generated stage-based Triton kernels (accums and deltas through global memory);
- alac_fused: alac's generated fused flow kernel (aggregate + loss + apply in one program per chunk).
Per arm: ms per epoch (every epoch, and the median), G non-zeros per second, validation logloss after
every epoch. Writes results/sync_lr.json, results/sync_lr.md and results/sync_lr.png.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.report import environment, result_folders, table, write  # noqa: E402


def _synchronize():
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def pytorch_embeddingbag(train, valid, epochs, lr, batch_size, seed):
    from alac import metrics

    device = train.device
    width = int(train.row_lengths()[0])
    indices = train.indices.long().view(train.n_rows, width)
    labels = train.labels
    bag = torch.nn.EmbeddingBag(train.n_features, 1, mode="sum", sparse=True).to(device)
    torch.nn.init.zeros_(bag.weight)
    bias = torch.nn.Parameter(torch.zeros(1, device=device))
    sparse_sgd = torch.optim.SGD(bag.parameters(), lr=lr)
    dense_sgd = torch.optim.SGD([bias], lr=lr)
    loss_function = torch.nn.BCEWithLogitsLoss()
    offsets = torch.arange(0, batch_size * width, width, device=device)
    valid_indices = valid.indices.long().view(valid.n_rows, width)
    generator = torch.Generator(device=device).manual_seed(seed)
    history = []
    for _ in range(epochs):
        _synchronize()
        started = time.perf_counter()
        order = torch.randperm(train.n_rows, device=device, generator=generator)
        for start in range(0, train.n_rows, batch_size):
            rows = order[start:start + batch_size]
            logits = bag(indices[rows].view(-1), offsets[:rows.numel()]).squeeze(1) + bias
            loss = loss_function(logits, labels[rows])
            sparse_sgd.zero_grad()
            dense_sgd.zero_grad()
            loss.backward()
            sparse_sgd.step()
            dense_sgd.step()
        _synchronize()
        seconds = time.perf_counter() - started
        with torch.no_grad():
            logits = bag(valid_indices.view(-1), torch.arange(0, valid.nnz, width, device=device)).squeeze(1) + bias
            history.append((seconds, metrics.logloss(torch.sigmoid(logits), valid.labels > 0.5)))
    return history


def alac_arm(train, valid, epochs, lr, batch_size, seed, backend, kernels):
    from alac.models import zoo_model
    from alac.plan import Plan
    from alac.train import Trainer

    model = zoo_model("lr")
    plan = Plan(batch_size=batch_size, kernels=kernels)
    # compile the kernels off the clock, on a few batches
    warm = Trainer(model, lr=lr, epochs=1, plan=plan, backend=backend, device=train.device, seed=seed)
    warm.fit(train.take(torch.arange(min(train.n_rows, 4 * batch_size), device=train.device)))
    trainer = Trainer(model, lr=lr, plan=plan, backend=backend, device=train.device, seed=seed)
    layout, labels = trainer.prepare(train)
    valid_layout = trainer.layout_of(valid)
    history = []
    for epoch in range(epochs):
        _synchronize()
        started = time.perf_counter()
        trainer.executor.train_epoch(layout, labels, epoch, lr)
        _synchronize()
        seconds = time.perf_counter() - started
        history.append((seconds, trainer.evaluate_layout(valid_layout, valid)["logloss"]))
    return history


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=4_000_000)
    parser.add_argument("--valid-rows", type=int, default=500_000)
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--lr", type=float, default=2.0)
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--arms", default="pytorch_embeddingbag,alac_reference,alac_stage,alac_fused")
    parser.add_argument("--out", default=os.environ.get("OUT"))
    args = parser.parse_args()

    from alac.data.synthetic import criteo_like

    device = "cuda" if torch.cuda.is_available() else "cpu"
    data = criteo_like(args.rows + args.valid_rows, seed=args.seed, device=device)
    train = data.take(torch.arange(args.rows, device=device))
    valid = data.take(torch.arange(args.rows, args.rows + args.valid_rows, device=device))
    del data
    arms = {
        "pytorch_embeddingbag": lambda: pytorch_embeddingbag(train, valid, args.epochs, args.lr, args.batch_size, args.seed),
        "alac_reference": lambda: alac_arm(train, valid, args.epochs, args.lr, args.batch_size, args.seed, "reference", "fused"),
        "alac_stage": lambda: alac_arm(train, valid, args.epochs, args.lr, args.batch_size, args.seed, "triton", "stage"),
        "alac_fused": lambda: alac_arm(train, valid, args.epochs, args.lr, args.batch_size, args.seed, "triton", "fused"),
    }
    results = []
    for name in args.arms.split(","):
        history = arms[name]()
        seconds = [s for s, _ in history]
        median = statistics.median(seconds)
        results.append({"name": name, "ms_per_epoch": 1000 * median, "ms_per_epoch_all": [1000 * s for s in seconds],
                        "gnnz_per_s": train.nnz / median / 1e9, "val_logloss": [v for _, v in history],
                        "wall_s": list(_cumulative(seconds))})
        print(f"{name}: {1000 * median:.1f} ms/epoch, val logloss {history[-1][1]:.5f}", flush=True)
    env = environment()
    baseline = next((r for r in results if r["name"] == "pytorch_embeddingbag"), None)
    rows = []
    for r in results:
        speedup = f"{baseline['ms_per_epoch'] / r['ms_per_epoch']:.1f}×" if baseline else "-"
        rows.append([r["name"], f"{r['ms_per_epoch']:.1f}", f"{r['gnnz_per_s']:.3f}", speedup,
                     f"{r['val_logloss'][0]:.4f}", f"{r['val_logloss'][-1]:.4f}"])
    markdown = "\n".join([
        f"LR, sync mini-batch SGD, batch {args.batch_size}, lr {args.lr}, {args.epochs} epochs; synthetic "
        f"Criteo-shaped set, {train.n_rows:,} training rows × 39 fields ({train.nnz:,} non-zeros), "
        f"{valid.n_rows:,} validation rows; {env['device']}, torch {env['torch']}, triton {env['triton']}, "
        f"{env['date']}.", "",
        table(["arm", "ms / epoch (median)", "G nnz / s", "vs PyTorch EmbeddingBag", "val logloss, epoch 1",
               f"val logloss, epoch {args.epochs}"], rows)])
    payload = {"device": env["device"], "environment": env, "arguments": vars(args), "arms": results}
    write("sync_lr", payload, markdown, args.out)
    _plot(results, args.out)
    print(markdown)


def _cumulative(values):
    total = 0.0
    for value in values:
        total += value
        yield total


def _plot(results, out_dir):
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    figure, axis = plt.subplots(figsize=(7, 4.5))
    for r in results:
        axis.plot(r["wall_s"], r["val_logloss"], marker="o", label=r["name"])
    axis.set_xscale("log")
    axis.set_xlabel("training wall time (s, log scale)")
    axis.set_ylabel("validation logloss")
    axis.set_title("LR, sync SGD, batch 1024: validation loss against time")
    axis.legend()
    figure.tight_layout()
    for folder in result_folders(out_dir):
        figure.savefig(Path(folder) / "sync_lr.png", dpi=120)


if __name__ == "__main__":
    main()
