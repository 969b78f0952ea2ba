"""A sweep of plan settings (chunk size, warps, hot segment H and flush period, programs in flight,
edge tile) for LR and FM on the synthetic set: the measurements behind the planner's defaults.

    PYTHONPATH=. python benchmarks/flow_sweep.py [--rows 4000000] [--models lr,fm] [--out DIR]

Each setting trains --epochs epochs from scratch: the median epoch time after the first (which
compiles), and the validation logloss at the end. Writes results/flow_sweep.json and .md; --tiles
(FM's async edge tiles) results/flow_tiles, --hot (FM's async hot segment sizes against the L2)
results/flow_hot, each row against the floor of its accesses.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.flow import _model, _seconds, synthetic_train_valid
from benchmarks.report import environment, merge, table, write


def settings(model):
    """(semantics, plan, hot) to run: hot None = no hot segment, "model" = the cost model's H for the
    plan, an int = that H."""
    from alac.plan import Plan

    k = 16 if model == "fm" else 0
    # smaller chunks give a batch's phases more programs (1024 / C, one multiprocessor each at most)
    out = [("sync", Plan(batch_size=1024, chunk_size=c), None) for c in (4, 8, 16, 32)]
    async_plan = Plan(semantics="async", batch_size=1024, chunk_size=32)
    for chunk_size in (16, 32, 64):
        for warps in (4, 8):
            for hot in (None, "model"):
                out.append(("async", dataclasses.replace(async_plan, chunk_size=chunk_size, num_warps=warps), hot))
    for flush in (1, 2, 4, 16, 32):
        out.append(("async", dataclasses.replace(async_plan, flush_every=flush), "model"))
    for hot in ((1024, 4096, 16384) if not k else (4096,)):
        out.append(("async", async_plan, hot))
    for in_flight in (132 * 64, 132 * 256):
        out.append(("async", dataclasses.replace(async_plan, max_in_flight=in_flight), "model"))
    if not k:
        out += [("async", dataclasses.replace(async_plan, slots_per_step=s), "model") for s in (8, 16)]
    return k, out


def tile_settings(k):
    """FM k's async edge tiles: chunk sizes 8, 16 and 32, [S, C] tiles of 2,048 to 16,384 values with
    the factor block, at the automatic warp count and twice it, each with the cost model's hot segment;
    S = 64 holds a whole 39-edge row (ONE_TILE: the apply pass gathers no params again)."""
    from alac.codegen import next_power_of_two
    from alac.plan import Plan
    from alac.runtime.execution.schedule import warps_for_tile

    lanes = next_power_of_two(k)
    # the planner's own tile (S and warps left automatic) first
    out = [("async", Plan(semantics="async", batch_size=1024, chunk_size=32), "model")]
    for chunk_size in (8, 16, 32):
        for slots in (1, 2, 4, 8, 16, 32, 64):
            values = slots * chunk_size * lanes
            if not 2048 <= values <= 16384:
                continue
            auto = warps_for_tile(Plan(semantics="async", batch_size=1024, chunk_size=chunk_size), slots, k)
            for warps in (auto, 2 * auto):
                out.append(("async", Plan(semantics="async", batch_size=1024, chunk_size=chunk_size,
                                          slots_per_step=slots, num_warps=warps), "model"))
    return k, out


def hot_settings(k):
    """Async FM k's hot segment sizes around the L2: no segment, the cost model's H without and with the
    planner's cap on the programs' sums (planner.HOT_SUMS_L2_SHARE), and H from 1/4 to 2x 16,384 / k."""
    from alac.plan import Plan

    plan = Plan(semantics="async", batch_size=1024, chunk_size=32)
    ladder = [16384 // k * n // 8 for n in (2, 3, 4, 6, 8, 12, 16)]
    return k, [("async", plan, hot) for hot in (None, "model", "uncapped", *ladder)]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=4_000_000)
    parser.add_argument("--valid-rows", type=int, default=500_000)
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--models", default="lr,fm")
    parser.add_argument("--lr", type=float, default=2.0)
    parser.add_argument("--fm-lr", type=float, default=0.5)
    parser.add_argument("--tiles", default="", help="instead: FM's async edge tiles at these k (e.g. 16,32,64)")
    parser.add_argument("--hot", default="", help="instead: FM's async hot segment sizes at these k (e.g. 16,32,64)")
    parser.add_argument("--merge", nargs="+", metavar="JSON", help="write one result of these --tiles runs' JSON")
    parser.add_argument("--out", default=os.environ.get("OUT"))
    args = parser.parse_args()
    if args.merge:
        payload = merge(args.merge, "flow_sweep.py")
        write("flow_tiles", payload, sweep_markdown(payload), args.out)
        return

    from alac.ir.pipeline import lower
    from alac.runtime.execution.schedule import async_programs, slots_per_step, warps_for_tile
    from alac.runtime.movement.layout import LayoutOptions, build_layout
    from alac.runtime.planning.planner import hot_size_from_costs, measure_access_costs, plan_for, rows_per_flush
    from alac.runtime.planning.roofline import epoch_roofline
    from alac.train.trainer import Trainer

    train, valid = synthetic_train_valid(args.rows, args.valid_rows, "cuda")
    results, floors = [], {}
    if args.tiles or args.hot:
        sweeps = [("fm", *(tile_settings if args.tiles else hot_settings)(int(k)))
                  for k in (args.tiles or args.hot).split(",")]
    else:
        sweeps = [(name, *settings(name)) for name in args.models.split(",")]
    for model_name, k, configurations in sweeps:
        lr = args.fm_lr if k else args.lr
        layouts = {}       # the cost model's H per chunk size, from a layout of that chunk size
        for semantics, plan, hot in configurations:
            if hot in ("model", "uncapped") and plan.chunk_size not in layouts:
                layouts[plan.chunk_size] = build_layout(train, LayoutOptions(chunk_size=plan.chunk_size), "cuda")
            if hot == "model":
                chosen = plan_for(layouts[plan.chunk_size], lower(_model(k)), semantics, 1024, plan,
                                  use_hot_segment=True).plan
                plan = dataclasses.replace(plan, hot_size=chosen.hot_size)
            elif hot == "uncapped":
                layout = layouts[plan.chunk_size]
                plan = dataclasses.replace(plan, hot_size=hot_size_from_costs(
                    layout.frequency, layout.n_rows, measure_access_costs(), rows_per_flush(plan)))
            elif hot is not None:
                plan = dataclasses.replace(plan, hot_size=hot)
            trainer = Trainer(_model(k), lr=lr, plan=plan, backend="triton", device="cuda", seed=0)
            layout, labels = trainer.prepare(train)
            times = [_seconds(lambda: trainer.executor.train_epoch(layout, labels, e, lr)) for e in range(args.epochs)]
            loss = trainer.evaluate(valid)["logloss"]
            floor = None
            if args.tiles or args.hot:
                # the floor of this plan's accesses (its H, its programs' hot sums): the same for every tile
                # of a chunk size
                key = (k, plan.chunk_size, plan.hot_size, trainer.executor.backend.async_programs)
                if key not in floors:
                    floors[key] = epoch_roofline(trainer.executor.ir, layout, *key[2:])[1]
                floor = floors[key]
            slots = slots_per_step(plan, layout, k)
            programs = async_programs(plan, layout) if semantics == "async" else plan.chunks_per_batch
            row = {"model": model_name, "k": k, "floor_ms": floor, "semantics": semantics, "hot_choice": hot,
                   "hot_sums_mb": programs * plan.hot_size * (k + 1) * 4 / 1e6 if semantics == "async" else None,
                   "automatic_tile": plan.slots_per_step is None and plan.num_warps is None,
                   "chunk_size": plan.chunk_size,
                   "slots": slots, "warps": warps_for_tile(plan, slots, k),
                   "programs": programs,
                   "hot_size": plan.hot_size, "flush_every": plan.flush_every if semantics == "async" else None,
                   "ms_per_epoch": 1000 * statistics.median(times[1:]), "val_logloss": loss,
                   "epochs_trained": args.epochs}
            results.append(row)
            print(row, flush=True)
            _write(args, results)


def _write(args, results):
    from alac.runtime.planning.planner import l2_cache_bytes

    env = environment()
    payload = {"device": env["device"], "environment": env, "arguments": vars(args), "results": results}
    payload["l2_bytes"] = l2_cache_bytes("cuda")
    write(_result_name(args), payload, sweep_markdown(payload), args.out)
    print(sweep_markdown(payload))


def _result_name(args):
    return "flow_tiles" if args.tiles else "flow_hot" if args.hot else "flow_sweep"


def sweep_markdown(payload):
    """results/flow_sweep.md or flow_tiles.md: every setting, a row each."""
    env, args, results = payload["environment"], payload["arguments"], payload["results"]
    return "\n".join([
        f"Plan sweep, {args['rows']:,} × 39 synthetic rows, {env['device']}, triton {env['triton']}, {env['date']}: "
        f"median ms per epoch of epochs 2-{args['epochs']} (the first compiles), validation logloss after "
        f"{args['epochs']} epochs (LR lr {args['lr']}, FM lr {args['fm_lr']}, k = 16 where no k is given); x its "
        "floor: against flat kernels of the same accesses (alac.runtime.planning.roofline).", "",
        table(["model", "k", "semantics", "C", "S", "warps", "programs", "H", "hot sums MB", "flush every",
               "ms / epoch", "x its floor", "val logloss"],
              [[r["model"], r.get("k") or "-", r["semantics"], r["chunk_size"], r["slots"], r["warps"], r["programs"],
                r["hot_size"], f"{r['hot_sums_mb']:.1f}" if r.get("hot_sums_mb") is not None else "-",
                r["flush_every"] or "-", f"{r['ms_per_epoch']:.2f}",
                f"{r['ms_per_epoch'] / r['floor_ms']:.2f}" if r.get("floor_ms") else "-",
                f"{r['val_logloss']:.4f}"] for r in results])])


if __name__ == "__main__":
    main()
