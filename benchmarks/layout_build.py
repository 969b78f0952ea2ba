"""Layout build time for the synthetic Criteo-shaped set on the CPU and on the GPU, side by side.

    PYTHONPATH=. python benchmarks/layout_build.py [--rows 4000000] [--out DIR]

Also times the generator on both devices and checks that both devices give the same data set and
the same layout arrays.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.report import environment, table, write


def _timed(function, device):
    """(wall seconds, result): the CPU and the GPU build timed alike, by the host clock (the GPU's
    kernel-only timer, alac.runtime.device.timing, would leave the CPU side out)."""
    if device == "cuda":
        torch.cuda.synchronize()
    started = time.perf_counter()
    result = function()
    if device == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - started, result


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=4_000_000)
    parser.add_argument("--chunk-size", type=int, default=128)
    parser.add_argument("--hot-size", type=int, default=10_000)
    parser.add_argument("--out", default=os.environ.get("OUT"))
    args = parser.parse_args()

    from alac.data.synthetic import criteo_like
    from alac.runtime.movement.layout import LayoutOptions, build_layout

    options = LayoutOptions(chunk_size=args.chunk_size, hot_size=args.hot_size)
    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    results, layouts, datasets = {}, {}, {}
    for device in devices:
        if device == "cuda":  # warm-up: CUDA context and kernels, off the clock
            build_layout(criteo_like(10_000, device=device), options, device=device)
        generate_s, data = _timed(lambda: criteo_like(args.rows, device=device), device)
        build_s, layout = _timed(lambda: build_layout(data, options, device=device), device)  # noqa: F821
        again_s, _ = _timed(lambda: build_layout(data, options, device=device), device)  # noqa: F821
        results[device] = {"generate_s": generate_s, "build_s": build_s, "build_again_s": again_s}
        datasets[device], layouts[device] = data.to("cpu"), layout.to("cpu")
        del data, layout
    comparison = {}
    if "cuda" in datasets:
        cpu, gpu = datasets["cpu"], datasets["cuda"]
        comparison = {
            "ids_equal": bool(torch.equal(cpu.indices, gpu.indices)),
            "label_mismatches": int((cpu.labels != gpu.labels).sum()),
        }
        if comparison["ids_equal"] and comparison["label_mismatches"] == 0:
            a, b = layouts["cpu"].to_numpy_dict()[0], layouts["cuda"].to_numpy_dict()[0]
            comparison["layout_arrays_equal"] = all((a[k] == b[k]).all() for k in a if k in b)
    stats = layouts[devices[-1]].stats
    env = environment()
    rows = [[device, f"{r['generate_s']:.2f}", f"{r['build_s']:.2f}", f"{r['build_again_s']:.2f}"]
            for device, r in results.items()]
    markdown = "\n".join([
        f"Synthetic Criteo-shaped set, {args.rows:,} rows × 39 fields ({stats.nnz:,} non-zeros, "
        f"{stats.n_features:,} features), C = {args.chunk_size}, H = {args.hot_size:,}; "
        f"{env['device']}, {env['cpu_count']} CPU cores, torch {env['torch']}, {env['date']}.", "",
        table(["device", "generate (s)", "layout build (s)", "layout build again (s)"], rows), "",
        f"CPU vs GPU: {comparison}" if comparison else ""])
    write("layout_build", {"environment": env, "rows": args.rows, "options": vars(options),
                           "results": results, "comparison": comparison,
                           "stats": {k: v for k, v in vars(stats).items()}}, markdown, args.out)
    print(markdown)


if __name__ == "__main__":
    main()
