"""A sweep of plan settings (chunk size, edge tile, hot segment, warps, programs in flight) for LR and
FM on the synthetic set: the measurements behind the planner's defaults.

    PYTHONPATH=. python benchmarks/flow_sweep.py [--rows 4000000] [--models lr,fm] [--out DIR]

Each setting: one warm-up epoch, then the median of --epochs timed epochs, and the validation
logloss after them. Writes results/flow_sweep.json and .md.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import sys
from pathlib import Path


sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.flow import _model, _seconds, synthetic_train_valid  # noqa: E402
from benchmarks.report import environment, table, write  # noqa: E402


def settings(model):
    from alac.plan import Plan

    k = 16 if model == "fm" else 0
    out = []
    # FM's factor tiles make a large C slow in sync (8 programs per batch at C = 128: 2.5 s / epoch
    # in a first run), so its sweep stays at small chunks and one in-flight budget.
    chunk_sizes = (16, 32, 64) if k else (16, 32, 64, 128)
    budgets = (132 * 128,) if k else (132 * 64, 132 * 128, 132 * 256)
    for chunk_size in chunk_sizes:
        out.append(("sync", Plan(batch_size=1024, chunk_size=chunk_size)))
    for chunk_size in chunk_sizes:
        for in_flight in budgets:
            out.append(("async", Plan(semantics="async", batch_size=1024, chunk_size=chunk_size,
                                      max_in_flight=in_flight)))
    slots = (1, 4, 16) if k else (8, 64)
    for s in slots:
        out.append(("async", Plan(semantics="async", batch_size=1024, chunk_size=32, slots_per_step=s)))
    for warps in (1, 2, 8):
        out.append(("async", Plan(semantics="async", batch_size=1024, chunk_size=32, num_warps=warps)))
    return k, out


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=4_000_000)
    parser.add_argument("--valid-rows", type=int, default=200_000)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--models", default="lr,fm")
    parser.add_argument("--lr", type=float, default=2.0)
    parser.add_argument("--fm-lr", type=float, default=0.5)
    parser.add_argument("--out", default=os.environ.get("OUT"))
    args = parser.parse_args()

    from alac.ir.pipeline import lower
    from alac.runtime.layout import LayoutOptions, build_layout
    from alac.runtime.planner import plan_for
    from alac.runtime.schedule import async_programs, slots_per_step
    from alac.train import Trainer

    train, valid = synthetic_train_valid(args.rows, args.valid_rows, "cuda")
    results = []
    for model_name in args.models.split(","):
        k, configurations = settings(model_name)
        lr = args.fm_lr if k else args.lr
        hot_sizes = {}
        for semantics, plan in configurations:
            for hot in (False, True):
                if hot and (plan.slots_per_step or plan.num_warps != 4):
                    continue
                if hot:
                    if plan.chunk_size not in hot_sizes:
                        layout = build_layout(train, LayoutOptions(chunk_size=plan.chunk_size), "cuda")
                        hot_sizes[plan.chunk_size] = plan_for(layout, lower(_model(k)), semantics, 1024, plan,
                                                               use_hot_segment=True).plan
                    chosen = hot_sizes[plan.chunk_size]
                    plan = dataclasses.replace(plan, hot_size=chosen.hot_size,
                                               replicas=chosen.replicas if semantics == "sync" else 1)
                trainer = Trainer(_model(k), lr=lr, plan=plan, backend="triton", device="cuda", seed=0)
                layout, labels = trainer.prepare(train)
                trainer.executor.train_epoch(layout, labels, 0, lr)
                times = [_seconds(lambda: trainer.executor.train_epoch(layout, labels, e, lr))
                         for e in range(1, args.epochs + 1)]
                loss = trainer.evaluate(valid)["logloss"]
                row = {"model": model_name, "semantics": semantics, "chunk_size": plan.chunk_size,
                       "slots": slots_per_step(plan, layout, k), "warps": plan.num_warps,
                       "programs": async_programs(plan, layout) if semantics == "async" else plan.chunks_per_batch,
                       "hot_size": plan.hot_size, "replicas": plan.replicas,
                       "ms_per_epoch": 1000 * statistics.median(times), "val_logloss": loss,
                       "epochs_trained": args.epochs + 1}
                results.append(row)
                print(row, flush=True)
                del trainer, layout, labels
        _write(args, results)


def _write(args, results):
    env = environment()
    markdown = "\n".join([
        f"Plan sweep, {args.rows:,} × 39 synthetic rows, {env['device']}, triton {env['triton']}, {env['date']}: "
        f"median ms per epoch of {args.epochs} epochs after a warm-up, validation logloss after "
        f"{args.epochs + 1} epochs.", "",
        table(["model", "semantics", "C", "S", "warps", "programs", "H", "R", "ms / epoch", "val logloss"],
              [[r["model"], r["semantics"], r["chunk_size"], r["slots"], r["warps"], r["programs"], r["hot_size"],
                r["replicas"], f"{r['ms_per_epoch']:.2f}", f"{r['val_logloss']:.4f}"] for r in results])])
    write("flow_sweep", {"device": env["device"], "environment": env, "arguments": vars(args),
                         "results": results}, markdown, args.out)
    print(markdown)


if __name__ == "__main__":
    main()
