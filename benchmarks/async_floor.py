"""What the async epochs' random accesses cost on their own: flat Triton kernels that make exactly
the per-edge accesses an async epoch makes (each edge once, in storage order, at full occupancy,
without the model's math or any chain of dependent loads), beside the generated kernels' epochs
of the same data, in one process.

    PYTHONPATH=. python benchmarks/async_floor.py [--rows 4000000] [--k 16] [--out DIR]

Per edge, an async epoch gathers the edge's params and adds its change to them atomically; with a
hot segment, hot edges (re-indexed id < H) add into their program's own sums instead (flushed
later; the flushes are left out here, 3 % of the LR epoch in async_breakdown). The flat kernels
(alac.runtime.planning.roofline.edge_traffic)
make those accesses alone and in the kernel's combinations, for LR's w (one float per feature) and
FM's v (K floats per feature, the generated kernel's 16-byte vector loads and atomics), and, to
show why the updates are atomic, plain stores of the read-modify-written value (lock-free Hogwild
style), and the accesses of an epoch over feature segments (cuWide's 2D partition, SEGMENT_AXIS).
Their time is a floor for any kernel that makes the same accesses to global memory. With
--counters, Nsight Compute's counters (benchmarks/nsight.py: L2 hits and load, DRAM load, warp
stalls) of the generated LR epoch, with and without its hot segment, and of LR's flat kernels, each
launch profiled in a child process run under ncu. Writes results/async_floor.json and .md.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from alac.runtime.device.timing import gpu_milliseconds
from alac.runtime.planning.roofline import (
    ATOMIC_ALL,
    ATOMIC_COLD,
    ATOMIC_HOT,
    ATOMIC_SPLIT,
    NO_UPDATE,
    STORE_COLD,
    run_traffic,
)
from benchmarks.report import environment, table, write

# launches timed per traffic kind (median), after one warm-up
REPEATS = 7


@dataclasses.dataclass(frozen=True)
class Traffic:
    name: str
    factor: int      # K floats per feature: 1 for LR's w, k for FM's v
    gather: bool
    update: int


TRAFFIC = (
    Traffic("w gathered", 1, True, NO_UPDATE),
    Traffic("w: atomic addition at every edge", 1, False, ATOMIC_ALL),
    Traffic("w: atomic addition at cold edges", 1, False, ATOMIC_COLD),
    Traffic("w: hot edges' atomic addition into per-program sums", 1, False, ATOMIC_HOT),
    Traffic("w: both (the kernel's split)", 1, False, ATOMIC_SPLIT),
    Traffic("w gathered, and the kernel's split of atomic additions", 1, True, ATOMIC_SPLIT),
    # hot edges' additions left out: what sums of no cost at all (on chip or anywhere) would leave
    Traffic("w gathered, and cold edges' atomic additions only (hot sums free)", 1, True, ATOMIC_COLD),
    Traffic("w gathered, and cold edges stored (no atomics; Hogwild)", 1, True, STORE_COLD),
    Traffic("v gathered", 16, True, NO_UPDATE),
    Traffic("v: the kernel's split of atomic additions", 16, False, ATOMIC_SPLIT),
    Traffic("v gathered, and the kernel's split of atomic additions", 16, True, ATOMIC_SPLIT),
)


def measure_traffic(train, plan, model, factor, hot_size):
    """The TRAFFIC rows of a model (LR: w, factor 1; FM: v, factor k) on the plan's layout of train,
    with as many copies of the hot sums as the plan's async programs."""
    import torch

    from alac.runtime.execution.schedule import async_programs
    from alac.runtime.movement.layout import LayoutOptions, build_layout

    layout = build_layout(train, LayoutOptions(chunk_size=plan.chunk_size, hot_size=hot_size), train.device)
    copies = async_programs(plan, layout)
    params = torch.zeros(layout.n_features * factor, device="cuda")
    hot_sums = torch.zeros(copies * hot_size * factor, device="cuda")
    rows = []
    for traffic in TRAFFIC:
        if (traffic.factor == 1) != (model == "lr"):
            continue
        traffic = dataclasses.replace(traffic, factor=factor)
        milliseconds, _ = gpu_milliseconds(
            lambda: run_traffic(layout.edge_feature, params, hot_sums, hot_size, copies, traffic.factor,
                                traffic.gather, traffic.update), REPEATS)
        rows.append({"model": model, "traffic": traffic.name, "factor": factor, "hot_size": hot_size, "copies": copies,
                     "ms": milliseconds, "gaccesses_per_s": layout.edge_feature.numel() / milliseconds / 1e6})
        print(f"{milliseconds:8.3f} ms  {model}: {traffic.name}", flush=True)
    return rows


# cuWide's 2D partition (§4.2): a program streams one feature segment's edges, whose weights fit on
# chip; each edge then reads its weight in feature order but adds to its row's partial prediction and
# gathers the row's gradient back at random rows (two passes). The flat kernels of those accesses:
SEGMENT_AXIS = (
    ("segment axis: w gathered in feature order", "feature", True, NO_UPDATE),
    ("segment axis: the row's partial prediction, atomic addition at every edge", "row", False, ATOMIC_ALL),
    ("segment axis: the row's gradient gathered at every edge", "row", True, NO_UPDATE),
)


def measure_segment_axis(train):
    """The SEGMENT_AXIS rows (LR) on train's edges sorted by feature, and their sum: the floor of an
    epoch over feature segments, against the async kernel's own accesses' floor."""
    import torch

    order = torch.argsort(train.indices, stable=True)
    by = {"feature": train.indices[order].int(),
          "row": torch.repeat_interleave(torch.arange(train.n_rows, device=train.device, dtype=torch.int32),
                                         train.row_lengths())[order]}
    del order
    targets = {"feature": torch.zeros(train.n_features, device=train.device),
               "row": torch.zeros(train.n_rows, device=train.device)}
    unused = torch.zeros(1, device=train.device)
    rows = []
    for name, index, gather, update in SEGMENT_AXIS:
        milliseconds, _ = gpu_milliseconds(
            lambda: run_traffic(by[index], targets[index], unused, 0, 1, 1, gather, update), REPEATS)
        rows.append({"model": "lr", "traffic": name, "factor": 1, "ms": milliseconds,
                     "gaccesses_per_s": by[index].numel() / milliseconds / 1e6})
        print(f"{milliseconds:8.3f} ms  lr: {name}", flush=True)
    total = sum(r["ms"] for r in rows)
    rows.append({"model": "lr", "traffic": "segment axis: the three together", "factor": 1, "ms": total,
                 "gaccesses_per_s": train.nnz / total / 1e6})
    return rows


def counter_child(rows, cases_path):
    """Under ncu: one profiled epoch of the generated async LR kernel with the planner's hot segment and
    one without, then one profiled launch of each LR flat kernel; the cases' names, in launch order,
    into cases_path."""
    import json

    import torch

    from alac.models import zoo_model
    from alac.plan import Plan
    from alac.runtime.execution.schedule import async_programs
    from alac.runtime.movement.layout import LayoutOptions, build_layout
    from alac.runtime.planning.planner import hot_size_for_data
    from alac.train.trainer import Trainer
    from benchmarks.flow import synthetic_train_valid
    from benchmarks.nsight import profiled

    train, _ = synthetic_train_valid(rows, 500_000, "cuda", 0)
    base = Plan(semantics="async", batch_size=1024, chunk_size=32)
    hot_size = hot_size_for_data(train, base)
    cases = []
    for name, hot in ((f"generated async LR, H = {hot_size:,}", hot_size), ("generated async LR, no hot segment", 0)):
        trainer = Trainer(zoo_model("lr"), lr=2.0, plan=dataclasses.replace(base, hot_size=hot), backend="triton",
                          device="cuda")
        layout, labels = trainer.prepare(train)
        trainer.executor.train_epoch(layout, labels, 0, 2.0)  # compiles and warms the caches
        profiled(lambda: trainer.executor.train_epoch(layout, labels, 1, 2.0))
        cases.append(name)
    layout = build_layout(train, LayoutOptions(chunk_size=base.chunk_size, hot_size=hot_size), train.device)
    copies = async_programs(base, layout)
    params = torch.zeros(layout.n_features, device="cuda")
    hot_sums = torch.zeros(copies * hot_size, device="cuda")
    for traffic in (t for t in TRAFFIC if t.factor == 1):
        def launch(traffic=traffic):
            run_traffic(layout.edge_feature, params, hot_sums, hot_size, copies, 1, traffic.gather, traffic.update)
        launch()
        profiled(launch)
        cases.append(f"flat: {traffic.name}")
    Path(cases_path).write_text(json.dumps(cases))


def measure_counters(rows, folder):
    """counter_child under ncu: {case: nsight.summary of its launch}, or {"unavailable": why}."""
    import json

    from benchmarks.nsight import NsightUnavailable, run_under_ncu, summary

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    cases_path, log_path = folder / "async_counters_cases.json", folder / "async_counters.csv"
    try:
        launches = run_under_ncu([sys.executable, str(Path(__file__).resolve()), "--rows", str(rows),
                                  "--counters-child", str(cases_path)], "_async$|edge_traffic", log_path)
    except NsightUnavailable as error:
        print(f"no counters: {error}", flush=True)
        return {"unavailable": str(error)}
    cases = json.loads(cases_path.read_text())
    if len(cases) != len(launches):
        return {"unavailable": f"{len(launches)} launches profiled for {len(cases)} cases"}
    return {case: summary(launch) for case, launch in zip(cases, launches)}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=4_000_000)
    parser.add_argument("--k", type=int, default=16, help="FM factors (the v rows' width)")
    parser.add_argument("--epochs", type=int, default=5,
                        help="epochs of each generated kernel (median after the first)")
    parser.add_argument("--counters", action="store_true", help="also Nsight Compute's counters of LR's kernels")
    parser.add_argument("--counters-child", metavar="CASES_JSON", help=argparse.SUPPRESS)
    parser.add_argument("--out", default=os.environ.get("OUT"))
    args = parser.parse_args()
    if args.counters_child:
        return counter_child(args.rows, args.counters_child)

    import torch

    from alac.plan import Plan
    from alac.runtime.planning.planner import hot_size_for_data
    from benchmarks.flow import alac_arm, synthetic_train_valid

    train, valid = synthetic_train_valid(args.rows, 500_000, "cuda", 0)
    base = Plan(semantics="async", batch_size=1024, chunk_size=32)
    rows = []
    kernels = {}
    for model, k, lr in (("lr", 0, 2.0), ("fm", args.k, 0.5)):
        plan = dataclasses.replace(base, hot_size=hot_size_for_data(train, base, factor_size=k))
        history = alac_arm(train, valid, args.epochs, lr, k, 0, plan)
        kernels[model] = {"hot_size": plan.hot_size, "programs": history.programs,
                          "ms_per_epoch": 1000 * statistics.median(s for s, _ in history[1:]),
                          "val_logloss": history[-1][1]}
        print(model, kernels[model], flush=True)
    for model, factor in (("lr", 1), ("fm", args.k)):
        rows += measure_traffic(train, base, model, factor, kernels[model]["hot_size"])
        torch.cuda.empty_cache()
    rows += measure_segment_axis(train)
    del train, valid
    torch.cuda.empty_cache()
    counters = measure_counters(args.rows, args.out or tempfile.gettempdir()) if args.counters else None
    env = environment()
    lines = [f"Flat per-edge traffic against the generated async kernels, {args.rows:,} × 39 synthetic rows "
             f"(C = {base.chunk_size}); {env['device']}, triton {env['triton']}, torch {env['torch']}, "
             f"{env['date']}.", ""]
    lines.append(table(["kernel", "H", "ms / epoch", "val logloss"],
                       [[f"generated async {m.upper()}" + (f" (k = {args.k})" if m == "fm" else ""), v["hot_size"],
                         f"{v['ms_per_epoch']:.2f}", f"{v['val_logloss']:.4f}"] for m, v in kernels.items()]))
    lines += ["", table(["flat traffic, every edge once", "ms", "G edges / s", "generated kernel's epoch / this"],
                        [[f"{r['model'].upper()}: {r['traffic']}", f"{r['ms']:.3f}", f"{r['gaccesses_per_s']:.0f}",
                          f"{kernels[r['model']]['ms_per_epoch'] / r['ms']:.2f}×"] for r in rows])]
    markdown = "\n".join(lines)
    write("async_floor", {"device": env["device"], "environment": env, "arguments": vars(args),
                          "kernels": kernels, "traffic": rows, "counters": counters}, markdown, args.out)
    print(markdown)


if __name__ == "__main__":
    main()
