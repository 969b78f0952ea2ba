"""Optimizers inside the kernels: epoch cost and convergence of SGD, AdaGrad, FTRL (and momentum,
Adam) for LR and FM on the synthetic Criteo-shaped set, sync and async, side by side on one GPU.

    PYTHONPATH=. python benchmarks/optimizers.py [--rows 4000000] [--epochs 10] [--out DIR]

Learning rates: SGD the tuned sync value (lr 2 for LR, 0.5 for FM); every other optimizer its
default (alac.optimizers: AdaGrad 0.05, FTRL alpha 0.05 with beta 1 / B, Adam 0.01, momentum 0.1 x
the model's SGD default), never tuned on this data. Sync runs the default sync plan (C = 16, the
planner's hot segment and replicas for LR, none for FM); async the default async plan (C = 32, the
planner's hot segment); async FTRL runs twice, with its weight derived from z and n where it is read
(the default, `Plan.derive_params`) and stored ("ftrl, w stored"). Writes results/<name>.json and .md
(name: optimizers, or --name).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.flow import alac_arm, synthetic_train_valid
from benchmarks.report import environment, table, write


def default_lr(optimizer, model_default):
    from alac.optimizers import OPTIMIZERS

    o = OPTIMIZERS[optimizer]
    return o.default_lr if o.default_lr is not None else model_default * o.lr_factor


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=4_000_000)
    parser.add_argument("--valid-rows", type=int, default=500_000)
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--models", default="lr,fm")
    parser.add_argument("--optimizers", default="sgd,adagrad,ftrl,momentum,adam")
    parser.add_argument("--name", default="optimizers")
    parser.add_argument("--out", default=os.environ.get("OUT"))
    args = parser.parse_args()

    from alac.plan import Plan
    from alac.runtime.planning.planner import hot_segment_for_data

    train, valid = synthetic_train_valid(args.rows, args.valid_rows, "cuda")
    # the zoo defaults: LR 1.0, FM 0.5; SGD itself runs at the tuned sync rates of the flow benchmark
    model_defaults = {"lr": 1.0, "fm": 0.5}
    sgd_rates = {"lr": 2.0, "fm": 0.5}
    async_plan = Plan(semantics="async", batch_size=1024, chunk_size=32)
    results, described = [], {}
    for model in args.models.split(","):
        k = 16 if model == "fm" else 0
        # the default plans: the planner's hot segment (async: H from the cost model, flushed every 8
        # chunks; sync: H and R replicas for models with scalar params only)
        plans = {"sync": hot_segment_for_data(train, Plan(batch_size=1024, chunk_size=16), factor_size=k),
                 "async": hot_segment_for_data(train, async_plan, factor_size=k)}
        described.update({f"{model} {semantics}": plan.describe() for semantics, plan in plans.items()})
        for semantics, plan in plans.items():
            arms = [(optimizer, optimizer, plan) for optimizer in args.optimizers.split(",")]
            if semantics == "async" and "ftrl" in args.optimizers.split(","):
                arms.append(("ftrl", "ftrl, w stored", dataclasses.replace(plan, derive_params=False)))
            for optimizer, label, arm_plan in arms:
                lr = sgd_rates[model] if optimizer == "sgd" else default_lr(optimizer, model_defaults[model])
                history = alac_arm(train, valid, args.epochs, lr, k, 0, arm_plan, optimizer)
                seconds = [s for s, _ in history]
                row = {"model": model, "semantics": semantics, "optimizer": label, "lr": lr,
                       "ms_per_epoch": 1000 * statistics.median(seconds), "val_logloss": [v for _, v in history]}
                results.append(row)
                print(row, flush=True)
    for row in results:
        sgd = next(r for r in results if r["model"] == row["model"] and r["semantics"] == row["semantics"]
                   and r["optimizer"] == "sgd")
        sync_sgd = next(r for r in results if r["model"] == row["model"] and r["semantics"] == "sync"
                        and r["optimizer"] == "sgd")
        row["cost_vs_sgd"] = row["ms_per_epoch"] / sgd["ms_per_epoch"]
        row["logloss_vs_sync_sgd"] = row["val_logloss"][-1] - sync_sgd["val_logloss"][-1]
    env = environment()
    markdown = "\n".join([
        f"Optimizers, {args.rows:,} × 39 synthetic rows, {args.epochs} epochs, batch 1024; "
        f"{env['device']}, triton {env['triton']}, {env['date']}. Plans: "
        + "; ".join(f"{name}: {text}" for name, text in described.items()) + ".", "",
        table(["model", "semantics", "optimizer", "lr", "ms / epoch", "vs SGD (same semantics)",
               "val logloss", "vs sync SGD"],
              [[r["model"], r["semantics"], r["optimizer"], f"{r['lr']:g}", f"{r['ms_per_epoch']:.2f}",
                f"{r['cost_vs_sgd']:.2f}×", f"{r['val_logloss'][-1]:.4f}", f"{r['logloss_vs_sync_sgd']:+.4f}"]
               for r in results])])
    write(args.name, {"device": env["device"], "environment": env, "arguments": vars(args), "plans": described,
                      "results": results},
          markdown, args.out)
    print(markdown)


if __name__ == "__main__":
    main()
