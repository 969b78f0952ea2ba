"""Where the async LR epoch goes: the generated kernel against copies of it with parts removed
(timing only: the removed parts make the math wrong), beside PyTorch floors for the same traffic.

    PYTHONPATH=. python benchmarks/async_breakdown.py [--rows 4000000] [--out DIR]

Two kernels, C = 32: without a hot segment, and the default plan's (the planner's hot segment,
flushed every 8 chunks). Each as generated and without parts of it (`CUTS`): the gather of w at
every edge; the atomic additions at every edge (into w, and with a hot segment also into the
program's hot sums); both; the periodic flushes (each program flushes once, at its end); all of
these; plain stores in place of the atomic additions (no hot segment only). Floors: reading the
edge ids once, PyTorch's gather of w at every edge, and PyTorch's index_add_ of one value per edge
(one atomic per edge). Writes results/async_breakdown.json and .md.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.report import cuda_milliseconds, environment, table, write  # noqa: E402

GATHER = "w = tl.load(w_ptr + feature, mask=present, other=0.0)"
# the atomic additions made at every edge: into w without a hot segment; with one, of cold edges
# into w and of hot edges into the program's own hot sums
EDGE_ATOMICS = (
    'tl.atomic_add(w_ptr + feature, delta_p, mask=present, sem="relaxed")',
    'tl.atomic_add(w_ptr + feature, delta_p, mask=cold, sem="relaxed")',
    'tl.atomic_add(hot_grad_w_ptr + (hot_base + feature), grad_w, mask=hot, sem="relaxed")',
)
# launches timed per kernel and floor (median), after one warm-up
REPEATS = 3
FLUSH_TEST = "if ((step + 1) % flush_every == 0) | (step + 1 == my_chunks):"
CUTS = {
    "gather": [(GATHER, "w = x * 0.0")],
    "atomics": [(update, "pass") for update in EDGE_ATOMICS],
    "stores": [(EDGE_ATOMICS[0], "tl.store(w_ptr + feature, delta_p, mask=present)")],
    "flushes": [(FLUSH_TEST, "if step + 1 == my_chunks:")],
}
# variants of both kernels, then those of the kernel without hot segment and of the default plan's
COMMON_VARIANTS = {
    "as generated": (),
    "without the gather of w": ("gather",),
    "without the atomic additions at edges": ("atomics",),
    "without both": ("gather", "atomics"),
}
VARIANTS = {**COMMON_VARIANTS, "plain stores instead of atomic additions": ("stores",)}
HOT_VARIANTS = {**COMMON_VARIANTS, "flushed once, at each program's end": ("flushes",),
                "without gather, edge atomics and flushes": ("gather", "atomics", "flushes")}

def cut(source, names):
    """The kernel source with the named CUTS applied; a cut that matches nothing is an error (the
    generator changed under this benchmark), never a silent no-op."""
    for name in names:
        matched = [old for old, _ in CUTS[name] if old in source]
        if not matched:
            raise ValueError(f"cut {name!r} matches nothing in the generated kernel: update async_breakdown.CUTS")
        for old, new in CUTS[name]:
            source = source.replace(old, new)
    return source


def bound_kernel(trainer, layout, labels, cuts=()):
    """The trainer's async kernel, with the named CUTS applied to a copy of its source, and the
    arguments the trainer binds to it (after one epoch of the kernel as generated)."""
    from alac.codegen.module_cache import load_module

    trainer.executor.initialize(layout)
    trainer.executor.train_epoch(layout, labels, 0, trainer.lr)
    backend = trainer.executor.backend
    kernel, arguments, constants, _, _ = backend._bound[0]
    if cuts:
        generated = dataclasses.replace(backend.generated, source=cut(backend.generated.source, cuts))
        kernel = getattr(load_module(generated, interpret=backend.interpret), generated.train[0].name)
    return kernel, arguments, constants


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=4_000_000)
    parser.add_argument("--out", default=os.environ.get("OUT"))
    args = parser.parse_args()

    import torch

    from alac.data.synthetic import criteo_like
    from alac.models import zoo_model
    from alac.plan import Plan
    from alac.runtime.planner import hot_size_for_data
    from alac.runtime.schedule import async_programs
    from alac.train import Trainer

    data = criteo_like(args.rows, device="cuda")
    plan = Plan(semantics="async", batch_size=1024, chunk_size=32)
    hot_plan = dataclasses.replace(plan, hot_size=hot_size_for_data(data, plan))
    rows = []
    for kernel_plan, variants in ((plan, VARIANTS), (hot_plan, HOT_VARIANTS)):
        trainer = Trainer(zoo_model("lr"), lr=2.0, plan=kernel_plan, backend="triton", device="cuda")
        layout, labels = trainer.prepare(data)
        programs = async_programs(kernel_plan, layout)
        for name, cuts in variants.items():
            kernel, arguments, constants = bound_kernel(trainer, layout, labels, cuts)
            compiled = kernel[(programs,)](*arguments, **constants)
            rows.append({"kernel": name, "hot_size": kernel_plan.hot_size,
                         "ms": cuda_milliseconds(lambda: kernel[(programs,)](*arguments, **constants), REPEATS),
                         "registers": getattr(compiled, "n_regs", None), "spills": getattr(compiled, "n_spills", None)})
            print(rows[-1], flush=True)
    edges = layout.edge_feature
    features = edges[edges >= 0].long()
    weights = torch.zeros(layout.n_features, device="cuda")
    ones = torch.ones(features.numel(), device="cuda")
    floors = {"read the edge ids once (sum)": cuda_milliseconds(lambda: edges.sum(), REPEATS),
              "PyTorch gather of w at every edge": cuda_milliseconds(lambda: weights[features], REPEATS),
              "PyTorch index_add_ of one value per edge": cuda_milliseconds(lambda: weights.index_add_(0, features, ones), REPEATS)}
    env = environment()
    markdown = "\n".join([
        f"Async LR epoch, {args.rows:,} × 39 synthetic rows ({features.numel():,} edges), C = 32, {programs} programs, "
        f"{constants['num_warps']} warps; {env['device']}, triton {env['triton']}, {env['date']}; median of 3 launches.", "",
        table(["kernel", "H", "ms", "registers", "spills"],
              [[r["kernel"], r["hot_size"], f"{r['ms']:.2f}", r["registers"], r["spills"]] for r in rows]), "",
        table(["floor", "ms"], [[name, f"{ms:.2f}"] for name, ms in floors.items()])])
    write("async_breakdown", {"device": env["device"], "environment": env, "arguments": vars(args),
                              "kernels": rows, "floors_ms": floors}, markdown, args.out)
    print(markdown)


if __name__ == "__main__":
    main()
