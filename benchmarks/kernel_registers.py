"""Registers and spills of the generated async FM kernel per edge tile, from ptxas, on any machine.

    PYTHONPATH=. python benchmarks/kernel_registers.py [--k 16 32 64] [--arch sm_90a]

Compiles the async kernel of FM k (hot segment on) for each tile of benchmarks/flow_sweep.py --tiles
to PTX with Triton and assembles it with the ptxas Triton ships (`ptxas -v`): registers a thread and
bytes spilled to local memory. No GPU is needed, so tile choices can be screened before GPU time is
spent; the registers also bound how many programs a multiprocessor holds (alac.runtime.schedule).
"""

from __future__ import annotations

import argparse
import inspect
import re
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import triton
from triton.backends.compiler import GPUTarget

from benchmarks.flow_sweep import tile_settings
from benchmarks.report import table

# the widest row of the synthetic set: a tile of at least this many slots holds a whole row (ONE_TILE)
ROW_WIDTH = 39


def ptxas():
    """The newest ptxas Triton ships (Triton 3.9 ships ptxas-blackwell beside an older ptxas)."""
    folder = Path(triton.__path__[0]) / "backends" / "nvidia" / "bin"
    found = [folder / name for name in ("ptxas-blackwell", "ptxas") if (folder / name).is_file()]
    if not found:
        raise SystemExit(f"no ptxas in {folder}: this Triton has no NVIDIA backend")
    return found[0]


def registers(kernel, constexprs, warps, arch):
    """(registers a thread, bytes of spill stores) of the kernel compiled with these constexprs."""
    parameters = list(inspect.signature(kernel.fn).parameters.items())
    # the generated kernels annotate pointers and floats ("*fp32", "fp32"); plain ints are the rest
    signature = {name: "constexpr" if name in constexprs else
                 (p.annotation.strip("'\"") if isinstance(p.annotation, str) and p.annotation else "i32")
                 for name, p in parameters}
    names = [name for name, _ in parameters]
    source = triton.compiler.ASTSource(fn=kernel, signature=signature,
                                       constexprs={(names.index(k),): v for k, v in constexprs.items()})
    capability = int(re.sub(r"\D", "", arch))
    compiled = triton.compile(source, target=GPUTarget("cuda", capability, 32), options={"num_warps": warps})
    with tempfile.NamedTemporaryFile("w", suffix=".ptx") as ptx:
        ptx.write(compiled.asm["ptx"])
        ptx.flush()
        report = subprocess.run([str(ptxas()), f"-arch={arch}", "-v", ptx.name, "-o", "/dev/null"],
                                capture_output=True, text=True)
    text = report.stdout + report.stderr
    used = re.search(r"Used (\d+) registers", text)
    spilled = re.search(r"(\d+) bytes spill stores", text)
    if used is None:
        raise SystemExit(f"ptxas said: {text.strip()[-400:]}")
    return int(used.group(1)), int(spilled.group(1)) if spilled else 0


def main():
    from alac.codegen.kernels import generate_kernels
    from alac.codegen.module_cache import load_module
    from alac.ir.pipeline import lower
    from alac.models import zoo_model
    from alac.plan import Plan

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--k", type=int, nargs="+", default=[16, 32, 64])
    parser.add_argument("--arch", default="sm_90a")
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
                          "WIDE_IDS": False}
            used, spilled = registers(kernel, constexprs, warps, args.arch)
            rows.append([k, chunk_size, slots, warps, used, spilled])
            print(rows[-1], flush=True)
    print(f"Async FM kernel, triton {triton.__version__}, ptxas -v for {args.arch}:\n")
    print(table(["k", "C", "S", "warps", "registers", "spill stores (bytes)"], rows))


if __name__ == "__main__":
    main()
