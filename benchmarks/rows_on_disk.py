"""Rows on disk: a model whose rows exceed both the GPU budget and the host memory budget, trained
from memory-mapped files behind the HybridHash cache (alac.runtime.rows.disk), side by side with the
same cache over a table in pinned host memory and with every row on the GPU, in one process.

    PYTHONPATH=. python benchmarks/rows_on_disk.py [--rows 10000000] [--valid-rows 500000]
        [--gpu-budget-mb 256] [--host-budget-mb 1024] [--epochs 3] [--rows-dir DIR] [--out DIR]

The Kaggle-shaped synthetic set (26 categorical fields, 33.8M feature rows, Zipf 1.1 ids), FM k = 16
with AdaGrad (76 bytes a row: a 2.6 GB table) through the Trainer, sync batches of 4096. Each arm
reports samples/s of the mean epoch after the first, validation AUC and logloss after --epochs, the
rows the cache loaded over the run, and for the disk arm the table's bytes on disk against the
host budget and the process's peak anonymous resident memory while it trained (file pages the OS
caches are not the process's: it may drop them).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from alac import metrics
from alac.data.synthetic import kaggle_like
from alac.models import zoo_model
from alac.plan import Plan
from alac.runtime.planning.planner import layout_bytes
from alac.train.trainer import Trainer
from benchmarks.report import environment, table, write

K, LR, SEED, BATCH = 16, 0.1, 1, 4096


def anonymous_bytes():
    """The process's resident anonymous memory (RssAnon: not the file pages it maps)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("RssAnon:"):
            return int(line.split()[1]) * 1024
    return 0


class PeakMemory:
    """The highest RssAnon seen while the block runs, sampled every 50 ms."""

    def __enter__(self):
        self.peak, self._running = anonymous_bytes(), True
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def _sample(self):
        while self._running:
            self.peak = max(self.peak, anonymous_bytes())
            time.sleep(0.05)

    def __exit__(self, *exc):
        self._running = False
        self._thread.join()


def arm(name, train, valid, args, gpu_budget=None, host_budget=None):
    plan = Plan(batch_size=BATCH, memory_budget=None if gpu_budget is None else
                layout_bytes(train, Plan.chunk_size) + gpu_budget, host_memory_budget=host_budget,
                rows_folder=args.rows_dir, param_mode="auto" if gpu_budget is None else "hybrid_hash")
    trainer = Trainer(zoo_model("fm", k=K), lr=LR, epochs=args.epochs, plan=plan, seed=SEED, optimizer="adagrad")
    before = anonymous_bytes()
    with PeakMemory() as memory:
        trainer.fit(train)
    positive = valid.labels > 0.5
    probability = trainer.predict(valid)
    seconds = [record["seconds"] for record in trainer.history]
    timed = seconds[1:] or seconds
    store = trainer.executor
    statistics = store.statistics
    row = {"name": name, "placement": trainer.placement.mode, "epoch_seconds": seconds,
           "samples_per_s": train.n_rows * len(timed) / sum(timed),
           "auc": float(metrics.auc(probability, positive)), "logloss": float(metrics.logloss(probability, positive)),
           "table_bytes": trainer.placement.table_bytes, "gpu_budget_bytes": gpu_budget,
           "host_budget_bytes": host_budget,
           "peak_anonymous_bytes": memory.peak, "anonymous_bytes_before": before,
           "hit_ratio": trainer.history[-1].get("hit_ratio"),
           "rows_in": None if statistics is None else statistics.rows_in,
           "rows_out": None if statistics is None else statistics.rows_out,
           "reasons": trainer.placement.lines()}
    if store.kind == "disk":
        row["files_bytes"] = sum(f.stat().st_size for f in store.whole.folder.glob("*.npy"))
    del trainer, store
    torch.cuda.empty_cache()
    return row


def disk_table(result):
    """The arms side by side (BENCHMARKS.md's section)."""
    return table(["arm", "placement", "M samples/s", "all-GPU / arm", "AUC", "AUC − all-GPU", "hit ratio",
                  "rows in (all epochs)", "table GB", "host budget GB", "peak anon GB"],
                 [[r["name"], r["placement"], f"{r['samples_per_s'] / 1e6:.2f}", f"{r['all_gpu_over_arm']:.2f}×",
                   f"{r['auc']:.4f}", f"{r['auc_minus_all_gpu']:+.4f}",
                   "-" if r["hit_ratio"] is None else f"{r['hit_ratio']:.3f}",
                   "-" if r["rows_in"] is None else f"{r['rows_in']:,}", f"{r['table_bytes'] / 1e9:.2f}",
                   "-" if r["host_budget_bytes"] is None else f"{r['host_budget_bytes'] / 1e9:.2f}",
                   f"{r['peak_anonymous_bytes'] / 1e9:.2f}"] for r in result["arms"]])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--valid-rows", type=int, default=500_000)
    parser.add_argument("--gpu-budget-mb", type=int, default=256)
    parser.add_argument("--host-budget-mb", type=int, default=1024)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--rows-dir", default=tempfile.gettempdir())
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    every = kaggle_like(args.rows + args.valid_rows, zipf=1.1, seed=SEED, device="cuda")
    train = every.take(torch.arange(args.rows, device="cuda"))
    valid = every.take(torch.arange(args.rows, args.rows + args.valid_rows, device="cuda"))
    del every
    gpu, host = args.gpu_budget_mb * 2**20, args.host_budget_mb * 2**20
    arms = [arm("all_gpu", train, valid, args),
            arm("hybrid_hash_host_table", train, valid, args, gpu_budget=gpu),
            arm("disk", train, valid, args, gpu_budget=gpu, host_budget=host)]
    reference = arms[0]
    for row in arms:
        row["auc_minus_all_gpu"] = row["auc"] - reference["auc"]
        row["all_gpu_over_arm"] = reference["samples_per_s"] / row["samples_per_s"]
    payload = {"environment": environment(), "arguments": vars(args), "arms": arms}
    markdown = disk_table(payload)
    print(markdown)
    write("rows_on_disk", payload, markdown, args.out)


if __name__ == "__main__":
    main()
