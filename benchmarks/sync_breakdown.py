"""Where a sync batch-1024 epoch goes: the grid-wide barrier's cost, the launch and update modes
side by side, and the epoch kernel against copies of it with one part removed.

    PYTHONPATH=. python benchmarks/sync_breakdown.py [--rows 4000000] [--out DIR]

1. A kernel of P programs that only meets at N grid barriers (alac.codegen.triton_helpers.
   grid_barrier): microseconds per barrier, for P = 16, 64 and 132.
2. LR and FM (k = 16) sync epochs on the synthetic 4M x 39 set: per-batch launches (a CUDA graph)
   or one grid-barrier launch per epoch, each with touched-flag or edge updates (each edge added,
   the default, or a slot's equal features summed first); then chunk size, program count and the
   hot segment (H 256 to 16,384, 1 or 4 replicas) on the default plan; the planner's H and R (what
   the zoo scripts run: none for FM) with SGD and with Adagrad. All run the same steps (validation
   logloss equal to ~1e-8).
3. The LR epoch kernel, as generated and with a part removed or doubled (timing only: the patches
   make the math wrong), for touched-flag and edge updates; with edge updates also what one barrier
   per batch would cost (the first removed, and with every edge's addition made twice, as a batch
   adding its own and the previous batch's changes into a second copy of w would).
Writes results/sync_breakdown.json and .md.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.patches import replace_checked  # noqa: E402
from benchmarks.report import environment, table, write  # noqa: E402

BARRIER = "grid_barrier(arrivals_ptr, barriers * tl.num_programs(0))"
EXCHANGE = 'first = present & (tl.atomic_xchg(touched_ptr + feature, 0, mask=present, sem="relaxed") == 1)'
GRADIENT_SUM = 'tl.atomic_add(grad_w_ptr + feature, grad_w, mask=present, sem="relaxed")'
TOUCH = 'tl.store(touched_ptr + feature, tl.full([S, C], 1, tl.int32), mask=present)'
EDGE_ADD = 'tl.atomic_add(w_ptr + feature, delta_p, mask=present, sem="relaxed")'
# the barrier after a batch's gradients, with its count (the arrival count it waits for must grow with it)
FIRST_BARRIER = "barriers += 1\n        " + BARRIER
PATCHES = {
    "touched flags": {
        "as generated": [],
        "without the barriers": [(BARRIER, "barriers += 0")],
        "without the touched exchange (update masked off)": [(EXCHANGE, "first = present & (feature < 0)")],
        "without the touched stores": [(TOUCH, "present = present")],
        "without the gradient sums": [(GRADIENT_SUM, "grad_w += 0.0")],
        "without all three": [(EXCHANGE, "first = present & (feature < 0)"), (TOUCH, "present = present"),
                              (GRADIENT_SUM, "grad_w += 0.0")],
    },
    "edge updates, each edge added": {
        "as generated": [],
        "without the barriers": [(BARRIER, "barriers += 0")],
        "without the atomic additions to w": [(EDGE_ADD, "delta_p += 0.0")],
        # what a double-buffered design would cost: one barrier per batch (a batch reads one copy of w
        # while its changes, and the previous batch's once more, go into the other)
        "one barrier per batch (the first removed)": [(FIRST_BARRIER, "", 1)],
        "one barrier per batch, each edge added twice": [(FIRST_BARRIER, "", 1), (EDGE_ADD, EDGE_ADD + "; " + EDGE_ADD)],
    },
}
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


def patched(source, patches):
    """source with each (old, new[, count]) replaced (every occurrence without a count)."""
    for old, new, *count in patches:
        source = replace_checked(source, old, new, *count)
    return source


def epoch_launch(trainer, layout, patches):
    """(run, programs): run launches the trainer's bound epoch kernel, patched, once (after a first
    epoch has bound it), its barrier's arrival count zeroed first."""
    from alac.codegen.module_cache import load_module
    from alac.runtime.schedule import sync_programs

    backend = trainer.executor.backend
    _, arguments, constants = backend._bound_epoch
    arrivals = backend._buffers[1]["arrivals_ptr"]
    programs = sync_programs(trainer.plan, layout, backend.interpret)
    generated = dataclasses.replace(backend.generated, source=patched(backend.generated.source, patches))
    kernel = getattr(load_module(generated, interpret=backend.interpret), generated.epoch.name)

    def run():
        arrivals.zero_()
        kernel[(programs,)](*arguments, **constants)

    return run, programs


def _barrier_cost(programs, barriers=8000):
    import torch
    import triton
    import triton.language as tl

    from alac.codegen.triton_helpers import grid_barrier

    @triton.jit
    def only_barriers(arrivals_ptr, n):
        for i in range(n):
            grid_barrier(arrivals_ptr, (i + 1) * tl.num_programs(0))

    arrivals = torch.zeros(1, dtype=torch.int32, device="cuda")

    def run():
        arrivals.zero_()
        only_barriers[(programs,)](arrivals, barriers)

    return 1000 * _milliseconds(run) / barriers


def _milliseconds(function, repeats=4):
    import torch

    function()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        torch.cuda.synchronize()
        started = time.perf_counter()
        function()
        torch.cuda.synchronize()
        times.append(1000 * (time.perf_counter() - started))
    return statistics.median(times)


def _trainer(model_name, k, lr, plan, train, optimizer="sgd"):
    from alac.models import zoo_model
    from alac.train import Trainer

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
    from alac.runtime.planner import hot_segment_for_data
    from benchmarks.flow import synthetic_train_valid

    barriers = [{"programs": p, "us_per_barrier": _barrier_cost(p)} for p in (16, 64, 132)]
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
    kernels = []
    for updates, variants in PATCHES.items():
        plan = Plan(batch_size=1024, chunk_size=16, edge_updates=updates != "touched flags")
        trainer, layout, labels = _trainer("lr", 0, 2.0, plan, train)
        trainer.executor.train_epoch(layout, labels, 0, 2.0)
        for name, patches in variants.items():
            run, programs = epoch_launch(trainer, layout, patches)
            kernels.append({"updates": updates, "kernel": name, "programs": programs, "ms": _milliseconds(run)})
            print(kernels[-1], flush=True)
    env = environment()
    markdown = "\n".join([
        f"Sync batch 1024, {args.rows:,} × 39 synthetic rows, C = 16 (64 chunks per batch, "
        f"{-(-args.rows // 1024):,} batches); {env['device']}, triton {env['triton']}, {env['date']}; "
        "median of 4 epochs (wall clock).", "",
        "Grid barrier alone:", "",
        table(["programs", "µs per barrier"], [[b["programs"], f"{b['us_per_barrier']:.3f}"] for b in barriers]), "",
        "Launch and update modes:", "",
        table(["model", "configuration", "ms / epoch", "val logloss"],
              [[c["model"], c["config"], f"{c['ms']:.2f}", f"{c['val_logloss']:.6f}"] for c in configs]), "",
        "LR epoch kernel with a part removed:", "",
        table(["updates", "kernel", "ms / epoch"], [[r["updates"], r["kernel"], f"{r['ms']:.2f}"] for r in kernels])])
    write("sync_breakdown", {"device": env["device"], "environment": env, "arguments": vars(args),
                             "barriers": barriers, "configs": configs, "kernels": kernels}, markdown, args.out)
    print(markdown)


if __name__ == "__main__":
    main()
