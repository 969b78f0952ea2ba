"""Where a sync batch-1024 epoch goes: the grid-wide barrier's cost and the launch, update and
hot-segment modes side by side.

    PYTHONPATH=. python benchmarks/sync_breakdown.py [--rows 4000000] [--out DIR]

1. A kernel of P programs that only meets at N grid barriers (alac.runtime.planning.roofline.
   barrier_microseconds): microseconds per barrier, for P = 16, 64 and 132.
2. LR and FM (k = 16) sync epochs on the synthetic 4M x 39 set: per-batch launches (a CUDA graph)
   or one grid-barrier launch per epoch, each with touched-flag or edge updates (each edge added,
   the default, or a slot's equal features summed first); then chunk size, program count and the
   hot segment (H 256 to 16,384, 1 or 4 replicas) on the default plan; the planner's H and R (what
   the zoo scripts run: none for FM) with SGD and with Adagrad. All run the same steps (validation
   logloss equal to ~1e-8).
Writes results/sync_breakdown.json and .md.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from alac.runtime.device.timing import gpu_milliseconds
from benchmarks.report import environment, table, write

CONFIGS = {
    "per-batch launches (CUDA graph), touched flags": dict(grid_barrier=False, edge_updates=False),
    "per-batch launches (CUDA graph), edge updates": dict(grid_barrier=False),
    "grid barrier, touched flags": dict(edge_updates=False),
    "grid barrier, edge updates, each edge added (default)": dict(),
    "grid barrier, edge updates, a slot's equal features summed": dict(sum_equal_edges=True),
    "default, C = 32": dict(chunk_size=32),
    "default, 32 programs": dict(programs=32),
}
# the hot segment on the default plan: H hot features, R replicas of their sums
CONFIGS.update({f"default, H = {hot:,}, R = {replicas}": dict(hot_size=hot, replicas=replicas)
                for hot in (256, 1024, 4096, 16384) for replicas in (1, 4)})
# the planner's hot segment (planner.hot_segment_for_data, what the zoo scripts run: for LR the cost
# model's H and R, for FM none), and the default without it, with Adagrad (touched flags) at lr 0.1:
# a rate at which LR trains (validation logloss 0.508); FM's factors do not (0.81), which a timing of
# the same steps with and without the hot segment does not need
PLANNED = "planner"
CONFIGS.update({
    "default + the planner's H and R": dict(hot_size=PLANNED),
    "Adagrad, default": dict(optimizer="adagrad"),
    "Adagrad, default + the planner's H and R": dict(hot_size=PLANNED, optimizer="adagrad"),
})


def _milliseconds(function):
    return gpu_milliseconds(function, repeats=4)[0]


def _trainer(model_name, k, lr, plan, train, optimizer="sgd"):
    from alac.models import zoo_model
    from alac.train.trainer import Trainer

    model = zoo_model("fm", k=k) if k else zoo_model(model_name)
    trainer = Trainer(model, lr=lr, plan=plan, backend="triton", device="cuda", seed=0, optimizer=optimizer)
    layout, labels = trainer.prepare(train)
    return trainer, layout, labels


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=4_000_000)
    parser.add_argument("--out", default=os.environ.get("OUT"))
    args = parser.parse_args()

    from alac.plan import Plan
    from alac.runtime.planning.planner import hot_segment_for_data
    from alac.runtime.planning.roofline import barrier_microseconds
    from benchmarks.flow import synthetic_train_valid

    barriers = [{"programs": p, "us_per_barrier": barrier_microseconds(p, "cuda")} for p in (16, 64, 132)]
    print(barriers, flush=True)
    train, valid = synthetic_train_valid(args.rows, 100_000, "cuda")
    configs = []
    for model_name, k, lr in (("lr", 0, 2.0), ("fm", 16, 0.5)):
        for name, options in CONFIGS.items():
            options = dict(options)
            optimizer = options.pop("optimizer", "sgd")
            step = lr if optimizer == "sgd" else 0.1
            planned = options.get("hot_size") == PLANNED
            if planned:
                del options["hot_size"]
            plan = Plan(**dict(dict(batch_size=1024, chunk_size=16), **options))
            if planned:
                plan = hot_segment_for_data(train, plan, factor_size=k)
            trainer, layout, labels = _trainer(model_name, k, step, plan, train, optimizer)
            epoch = [0]

            def run():
                epoch[0] += 1
                trainer.executor.train_epoch(layout, labels, epoch[0], step)

            ms = _milliseconds(run)
            configs.append({"model": model_name, "config": name, "plan": plan.describe(), "ms": ms,
                            "epochs": epoch[0], "val_logloss": trainer.evaluate(valid)["logloss"]})
            print(configs[-1], flush=True)
    env = environment()
    markdown = "\n".join([
        f"Sync batch 1024, {args.rows:,} × 39 synthetic rows, C = 16 (64 chunks per batch, "
        f"{-(-args.rows // 1024):,} batches); {env['device']}, triton {env['triton']}, {env['date']}; "
        "median of 4 epochs (CUDA events, host work included).", "",
        "Grid barrier alone:", "",
        table(["programs", "µs per barrier"], [[b["programs"], f"{b['us_per_barrier']:.3f}"] for b in barriers]), "",
        "Launch and update modes:", "",
        table(["model", "configuration", "ms / epoch", "val logloss"],
              [[c["model"], c["config"], f"{c['ms']:.2f}", f"{c['val_logloss']:.6f}"] for c in configs])])
    write("sync_breakdown", {"device": env["device"], "environment": env, "arguments": vars(args),
                             "barriers": barriers, "configs": configs}, markdown, args.out)
    print(markdown)


if __name__ == "__main__":
    main()
