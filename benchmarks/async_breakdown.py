"""Where the async LR epoch goes: the generated kernel against copies of it with one part removed
(timing only: the removed parts make the math wrong), beside PyTorch floors for the same traffic.

    PYTHONPATH=. python benchmarks/async_breakdown.py [--rows 4000000] [--out DIR]

Variants of the async kernel without a hot segment (C = 32): the kernel as generated; without the
gather of w; without the atomic updates of w; without both; with plain stores in place of the
atomic updates. Then the default plan's kernel (with the planner's hot segment). Floors: reading
the edge ids once, PyTorch's gather of w at every edge, and PyTorch's index_add_ of one value per
edge (one atomic per edge). Writes results/async_breakdown.json and .md.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import sys
from pathlib import Path


sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.report import environment, table, write  # noqa: E402

ATOMIC_UPDATE = 'tl.atomic_add(w_ptr + feature, delta_p, mask=present, sem="relaxed")'
GATHER = "w = tl.load(w_ptr + feature, mask=present, other=0.0)"
VARIANTS = {
    "as generated": [],
    "without the gather of w": [(GATHER, "w = x * 0.0")],
    "without the atomic updates of w": [(ATOMIC_UPDATE, "pass")],
    "without both": [(GATHER, "w = x * 0.0"), (ATOMIC_UPDATE, "pass")],
    "plain stores instead of atomic updates": [(ATOMIC_UPDATE, "tl.store(w_ptr + feature, delta_p, mask=present)")],
}


def _milliseconds(function, repeats=3):
    import torch

    function()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        function()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def _bound_kernel(trainer, layout, labels, source=None):
    """The trainer's async kernel (or a patched copy of its source) with its bound arguments."""
    from alac.codegen.module_cache import load_module

    trainer.executor.initialize(layout)
    trainer.executor.train_epoch(layout, labels, 0, trainer.lr)
    backend = trainer.executor.backend
    kernel, arguments, constants, _, _ = backend._bound[0]
    if source is not None:
        generated = dataclasses.replace(backend.generated, source=source)
        kernel = getattr(load_module(generated), generated.train[0].name)
    return kernel, arguments, constants, backend


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=4_000_000)
    parser.add_argument("--out", default=os.environ.get("OUT"))
    args = parser.parse_args()

    import torch

    from alac.data.synthetic import criteo_like
    from alac.plan import Plan
    from alac.runtime.planner import hot_size_for_data
    from alac.runtime.schedule import async_programs
    from alac.train import Trainer
    from alac.zoo import build_model, load_model_file

    data = criteo_like(args.rows, device="cuda")
    plan = Plan(semantics="async", batch_size=1024, chunk_size=32)
    rows = []
    trainer = Trainer(build_model(load_model_file("lr")), lr=2.0, plan=plan, backend="triton", device="cuda")
    layout, labels = trainer.prepare(data)
    programs = async_programs(plan, layout)
    _, _, _, backend = _bound_kernel(trainer, layout, labels)
    for name, patches in VARIANTS.items():
        source = backend.generated.source
        for old, new in patches:
            source = source.replace(old, new)
        kernel, arguments, constants, _ = _bound_kernel(trainer, layout, labels, source)
        compiled = kernel[(programs,)](*arguments, **constants)
        rows.append({"kernel": name, "hot_size": 0, "ms": _milliseconds(lambda: kernel[(programs,)](*arguments, **constants)),
                     "registers": getattr(compiled, "n_regs", None), "spills": getattr(compiled, "n_spills", None)})
        print(rows[-1], flush=True)
    hot_plan = dataclasses.replace(plan, hot_size=hot_size_for_data(data, plan))
    hot_trainer = Trainer(build_model(load_model_file("lr")), lr=2.0, plan=hot_plan, backend="triton", device="cuda")
    hot_layout, hot_labels = hot_trainer.prepare(data)
    kernel, arguments, constants, _ = _bound_kernel(hot_trainer, hot_layout, hot_labels)
    compiled = kernel[(programs,)](*arguments, **constants)
    rows.append({"kernel": "default plan: hot segment, flushed every 8 chunks", "hot_size": hot_plan.hot_size,
                 "ms": _milliseconds(lambda: kernel[(programs,)](*arguments, **constants)),
                 "registers": getattr(compiled, "n_regs", None), "spills": getattr(compiled, "n_spills", None)})
    print(rows[-1], flush=True)
    edges = layout.edge_feature
    features = edges[edges >= 0].long()
    weights = torch.zeros(layout.n_features, device="cuda")
    ones = torch.ones(features.numel(), device="cuda")
    floors = {"read the edge ids once (sum)": _milliseconds(lambda: edges.sum()),
              "PyTorch gather of w at every edge": _milliseconds(lambda: weights[features]),
              "PyTorch index_add_ of one value per edge": _milliseconds(lambda: weights.index_add_(0, features, ones))}
    env = environment()
    markdown = "\n".join([
        f"Async LR epoch, {args.rows:,} × 39 synthetic rows ({features.numel():,} edges), C = 32, {programs} programs, "
        f"4 warps; {env['device']}, triton {env['triton']}, {env['date']}; median of 3 launches.", "",
        table(["kernel", "H", "ms", "registers", "spills"],
              [[r["kernel"], r["hot_size"], f"{r['ms']:.2f}", r["registers"], r["spills"]] for r in rows]), "",
        table(["floor", "ms"], [[name, f"{ms:.2f}"] for name, ms in floors.items()])])
    write("async_breakdown", {"device": env["device"], "environment": env, "arguments": vars(args),
                              "kernels": rows, "floors_ms": floors}, markdown, args.out)
    print(markdown)


if __name__ == "__main__":
    main()
