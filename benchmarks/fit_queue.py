"""Trainer.fit with its epochs queued in groups (one loss read per group) against one epoch at a
time (a no-op callback forces that), async LR with the default plan on the synthetic Criteo-shaped
set, two rounds of each in one process. Each measurement trains at least --epochs epochs and at
least --seconds of training (a long run's steady state: fit's first group is one epoch that measures
the group size, and every group waits once for its host work), so small sets run many epochs.

    PYTHONPATH=. python benchmarks/fit_queue.py [--rows 1000000,4000000] [--epochs 40] [--seconds 2]
                                                [--out DIR]

Writes results/fit_queue.json and .md: ms per epoch as fit records them (the layout build of each
fit call is not counted), ns per non-zero and its ratio to the largest set's queued figure, the last
training loss.
"""

from __future__ import annotations

import argparse
import math
import dataclasses
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.report import environment, table, write  # noqa: E402

MODES = ("one at a time", "queued")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", default="1000000,4000000")
    parser.add_argument("--epochs", type=int, default=40)
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--out", default=os.environ.get("OUT"))
    args = parser.parse_args()

    import torch

    from alac.data.synthetic import criteo_like
    from alac.plan import Plan
    from alac.runtime.planner import hot_size_for_data
    from alac.train import Trainer
    from alac.zoo import build_model, load_model_file

    results = []
    for rows in [int(r) for r in args.rows.split(",")]:
        data = criteo_like(rows, device="cuda")
        plan = Plan(semantics="async", batch_size=1024, chunk_size=32)
        plan = dataclasses.replace(plan, hot_size=hot_size_for_data(data, plan))
        for mode in MODES * 2:
            callbacks = [lambda trainer, record: False] if mode == "one at a time" else []
            # the last trainer's layout goes before this one builds its own: at 64M rows two layouts
            # and the build's temporaries do not fit in 80 GB together
            trainer = None
            torch.cuda.empty_cache()
            trainer = Trainer(build_model(load_model_file("lr")), lr=2.0, plan=plan, backend="triton",
                              device="cuda", callbacks=callbacks)
            trainer.fit(data, epochs=3)  # compiles, and measures an epoch for the group size
            epochs = max(args.epochs, math.ceil(args.seconds / trainer.history[-1]["seconds"]))
            trainer.fit(data, epochs=epochs)
            ms = 1000 * sum(r["seconds"] for r in trainer.history[-epochs:]) / epochs
            results.append({"rows": rows, "nnz": data.nnz, "mode": mode, "epochs": epochs, "ms_per_epoch": ms,
                            "ns_per_nnz": ms / data.nnz * 1e6, "last_train_loss": trainer.history[-1]["train_loss"]})
            print(results[-1], flush=True)
        del data, trainer
    largest = max(r["rows"] for r in results)
    reference = min(r["ns_per_nnz"] for r in results if r["rows"] == largest and r["mode"] == "queued")
    for r in results:
        r["vs_largest_queued"] = r["ns_per_nnz"] / reference
    env = environment()
    markdown = "\n".join([
        f"Trainer.fit, async LR (default plan), at least {args.epochs} epochs and {args.seconds:g} s per "
        f"measurement; ratio to the best queued figure at {largest:,} rows; {env['device']}, "
        f"torch {env['torch']}, triton {env['triton']}, {env['date']}.", "",
        table(["rows", "epochs", "ms / epoch", "ns / non-zero", "ratio", "last training loss"],
              [[f"{r['rows']:,}", f"{r['epochs']} {r['mode']}", f"{r['ms_per_epoch']:.3f}", f"{r['ns_per_nnz']:.4f}",
                f"{r['vs_largest_queued']:.3f}",
                f"{r['last_train_loss']:.5f}"] for r in results])])
    write("fit_queue", {"device": env["device"], "environment": env, "arguments": vars(args), "results": results},
          markdown, args.out)
    print(markdown)


if __name__ == "__main__":
    main()
