"""The floor of an SCD epoch's accesses on this GPU: flat kernels that make only them, every entry's
gather of the float64 shared vector and every entry's atomic addition to it, with none of the epoch's
dependent steps between them; and the same additions at ids drawn uniformly (the memory system's
rate for additions that do not collide). benchmarks/scd.py's criteo part sets its epochs against
them and against the bytes they read."""

import torch
import triton
import triton.language as tl

BLOCK = 1024


@triton.jit
def _gather(index_ptr, shared_ptr, out_ptr, n, BLOCK: tl.constexpr):
    at = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    inside = at < n
    index = tl.load(index_ptr + at, mask=inside, other=0)
    value = tl.load(shared_ptr + index, mask=inside, other=0.0, cache_modifier=".cg")
    tl.store(out_ptr + tl.program_id(0), tl.sum(value, axis=0))


@triton.jit
def _add(index_ptr, shared_ptr, n, BLOCK: tl.constexpr):
    at = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    inside = at < n
    index = tl.load(index_ptr + at, mask=inside, other=0)
    tl.atomic_add(shared_ptr + index, tl.where(inside, 1e-12, 0.0), mask=inside, sem="relaxed")


def flat_floors(index, n_shared):
    """{gather_ms, add_ms, uniform_add_ms, hottest_share}: the flat kernels over these int32 ids of a
    float64 vector of n_shared, timed by triton.testing.do_bench (a GPU's; the ids stay where they are)."""
    n = index.numel()
    grid = (triton.cdiv(n, BLOCK),)
    shared = torch.zeros(n_shared, dtype=torch.float64, device=index.device)
    out = torch.empty(grid[0], dtype=torch.float64, device=index.device)
    hottest = int(torch.bincount(index[: 1 << 26].long(), minlength=n_shared).max()) / min(n, 1 << 26)
    floors = {"gather_ms": triton.testing.do_bench(lambda: _gather[grid](index, shared, out, n, BLOCK=BLOCK)),
              "add_ms": triton.testing.do_bench(lambda: _add[grid](index, shared, n, BLOCK=BLOCK)),
              "hottest_share": hottest}
    uniform = torch.randint(0, n_shared, (n,), dtype=torch.int32, device=index.device)
    floors["uniform_add_ms"] = triton.testing.do_bench(lambda: _add[grid](uniform, shared, n, BLOCK=BLOCK))
    return floors
