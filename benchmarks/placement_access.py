"""Rows in pinned host memory against rows on the device: gather and atomic-add throughput of Triton
kernels through mapped (UVA) pointers, the figures the placement cost model needs.

    PYTHONPATH=. python benchmarks/placement_access.py [--rows 16000000] [--accesses 16000000] [--out DIR]

Per placement (device, host), row width (1 float: a scalar param; 16 floats: FM k = 16) and access
pattern (random ids, uniform over the table; sequential ids), a kernel reads rows at the ids (gather)
or adds 1 to them (atomic_add), as the generated kernels do. Reported: milliseconds (median of 5),
G accesses per second and GB/s of row data, the host / device ratio, and the pinned host -> device
copy bandwidth for scale. Writes results/placement_access.json and .md.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import torch
import triton
import triton.language as tl

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from alac.runtime.device.timing import gpu_milliseconds
from benchmarks.report import environment, table, write

# ids per program: 1,024 keeps a few thousand programs in flight on 16M accesses
BLOCK = 1024


@triton.jit
def gather_rows(table_ptr, ids_ptr, out_ptr, n, K: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    valid = offsets < n
    ids = tl.load(ids_ptr + offsets, mask=valid, other=0).to(tl.int64)
    lanes = tl.arange(0, BLOCK_K)
    mask = valid[:, None] & (lanes < K)[None, :]
    rows = tl.load(table_ptr + ids[:, None] * K + lanes[None, :], mask=mask, other=0.0)
    # one value per access leaves the kernel, so the gather cannot be dropped
    tl.store(out_ptr + offsets, tl.sum(rows, axis=1), mask=valid)


@triton.jit
def add_to_rows(table_ptr, ids_ptr, n, K: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    valid = offsets < n
    ids = tl.load(ids_ptr + offsets, mask=valid, other=0).to(tl.int64)
    lanes = tl.arange(0, BLOCK_K)
    mask = valid[:, None] & (lanes < K)[None, :]
    tl.atomic_add(table_ptr + ids[:, None] * K + lanes[None, :], tl.full([BLOCK, BLOCK_K], 1.0, tl.float32),
                  mask=mask, sem="relaxed")


def measure(table, ids, op, k):
    n = ids.numel()
    out = torch.empty(n, device="cuda")
    grid = (triton.cdiv(n, BLOCK),)
    block_k = triton.next_power_of_2(k)
    if op == "gather":
        def run():
            gather_rows[grid](table, ids, out, n, K=k, BLOCK_K=block_k, BLOCK=BLOCK)
    else:
        def run():
            add_to_rows[grid](table, ids, n, K=k, BLOCK_K=block_k, BLOCK=BLOCK)
    ms, _ = gpu_milliseconds(run, repeats=5, warmup=1)
    return ms


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=16_000_000)
    parser.add_argument("--accesses", type=int, default=16_000_000)
    parser.add_argument("--widths", default="1,16")
    parser.add_argument("--out", default=os.environ.get("OUT"))
    args = parser.parse_args()
    generator = torch.Generator(device="cuda").manual_seed(0)
    patterns = {
        "random": torch.randint(0, args.rows, (args.accesses,), device="cuda", generator=generator, dtype=torch.int32),
        "sequential": (torch.arange(args.accesses, device="cuda") % args.rows).to(torch.int32),
    }
    arms = []
    for k in map(int, args.widths.split(",")):
        tables = {"device": torch.zeros(args.rows * k, device="cuda"),
                  "host": torch.zeros(args.rows * k).pin_memory()}
        for pattern, ids in patterns.items():
            for op in ("gather", "atomic_add"):
                for placement, values in tables.items():
                    ms = measure(values, ids, op, k)
                    arms.append({"placement": placement, "op": op, "pattern": pattern, "row_floats": k,
                                 "accesses": args.accesses, "ms": ms, "g_accesses_per_s": args.accesses / ms / 1e6,
                                 "gb_per_s": args.accesses * k * 4 / ms / 1e6})
                    print(arms[-1], flush=True)
        if k == 1:
            # the additions landed: every id's count is the number of times it was drawn
            host = tables["host"].clone()
            expected = torch.zeros(args.rows, device="cuda")
            for ids in patterns.values():
                expected.index_add_(0, ids.long(), torch.ones(args.accesses, device="cuda"))
            runs = 1 + 5  # warm-up and timed calls of each atomic arm
            assert torch.equal(host.cuda(), runs * expected), "host atomic additions lost updates"
        del tables
    source = torch.empty(256 * 2**20 // 4).pin_memory()
    copy_ms, _ = gpu_milliseconds(lambda: source.to("cuda", non_blocking=True), repeats=5)
    copy_gb_per_s = source.numel() * 4 / copy_ms / 1e6
    ratios = {}
    for arm in arms:
        if arm["placement"] == "host":
            device = next(a for a in arms if a["placement"] == "device" and
                          all(a[key] == arm[key] for key in ("op", "pattern", "row_floats")))
            ratios[f"{arm['op']}_{arm['pattern']}_k{arm['row_floats']}"] = arm["ms"] / device["ms"]
    env = environment()
    rows = [[a["op"], a["pattern"], a["row_floats"], a["placement"], f"{a['ms']:.2f}", f"{a['g_accesses_per_s']:.3f}",
             f"{a['gb_per_s']:.1f}"] for a in arms]
    markdown = "\n".join([
        f"Row access by placement ({env['device']}, {env['date']}; `PYTHONPATH=. python "
        f"benchmarks/placement_access.py`): {args.accesses:,} accesses to a table of {args.rows:,} rows; pinned "
        f"host -> device copy {copy_gb_per_s:.1f} GB/s.", "",
        table(["op", "ids", "floats per row", "placement", "ms", "G accesses/s", "GB/s"], rows), "",
        "host / device time: " + ", ".join(f"{name} {ratio:.1f}x" for name, ratio in ratios.items())])
    print(markdown)
    write("placement_access", {"environment": env, "arguments": vars(args), "arms": arms,
                               "host_over_device": ratios, "copy_gb_per_s": copy_gb_per_s}, markdown, args.out)


if __name__ == "__main__":
    main()
