"""Registers and spills of the generated async FM kernel per edge tile, from ptxas, on any machine.

    PYTHONPATH=. python benchmarks/kernel_registers.py [--k 16 32 64] [--arch sm_90a]

Compiles the async kernel of FM k (hot segment on) for each tile of benchmarks/flow_sweep.py --tiles
with alac.codegen.registers (Triton's PTX, the ptxas Triton ships): registers a thread and bytes spilled
to local memory. No GPU is needed, so tile choices can be screened before GPU time is
spent; the registers also bound how many programs a multiprocessor holds (alac.runtime.execution.schedule).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import triton

from alac.codegen.registers import DEFAULT_ARCH, kernel_registers
from benchmarks.flow_sweep import tile_settings
from benchmarks.report import table

# the widest row of the synthetic set: a tile of at least this many slots holds a whole row (ONE_TILE)
ROW_WIDTH = 39


def main():
    from alac.codegen.kernels import generate_kernels
    from alac.codegen.module_cache import load_module
    from alac.ir.pipeline import lower
    from alac.models import zoo_model
    from alac.plan import Plan

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--k", type=int, nargs="+", default=[16, 32, 64])
    parser.add_argument("--arch", default=DEFAULT_ARCH)
    parser.add_argument("--tile", type=int, nargs=3, action="append", metavar=("C", "S", "WARPS"),
                        help="only these tiles (repeatable); default flow_sweep.py --tiles's")
    args = parser.parse_args()
    rows = []
    for k in args.k:
        generated = generate_kernels(lower(zoo_model("fm", k=k)), Plan(semantics="async", hot_size=1))
        kernel = getattr(load_module(generated), generated.train[0].name)
        tiles = args.tile or [(p.chunk_size, p.slots_per_step, p.num_warps) for _, p, _ in tile_settings(k)[1][1:]]
        for chunk_size, slots, warps in tiles:
            constexprs = {"HAS_VALUES": False, "C": chunk_size, "S": slots, "ONE_TILE": slots >= ROW_WIDTH,
                          "WIDE_IDS": False, "RESIDENT": False}
            found = kernel_registers(kernel, constexprs, warps, args.arch)
            rows.append([k, chunk_size, slots, warps, found.registers, found.spill_bytes])
            print(rows[-1], flush=True)
    print(f"Async FM kernel, triton {triton.__version__}, ptxas -v for {args.arch}:\n")
    print(table(["k", "C", "S", "warps", "registers", "spill stores (bytes)"], rows))


if __name__ == "__main__":
    main()
