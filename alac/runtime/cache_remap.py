"""A HybridHash segment's bookkeeping (alac.runtime.hybrid_hash): the rows its edges touch, and its
edges re-pointed at cache slots with the hot store's hits per batch. On a CUDA device each is one
Triton launch over the segment's chunks (alac.runtime.cache_remap_kernel: a pass over the edges
instead of torch's gathers and scatters with int64 edge lists, ~150 ms of a 0.35 s epoch at 512 MB
on H100, benchmarks/placement.py); elsewhere torch does the same, and is the kernels' twin in tests."""

from __future__ import annotations

import torch

from alac.codegen import triton_installed

# edges per step of a program (one program per chunk: a chunk holds chunk_size x width edges)
REMAP_BLOCK = 1024


def _use_triton(device, use_triton):
    return torch.device(device).type == "cuda" and triton_installed() if use_triton is None else use_triton


def mark_touched(layout, chunks, seen, use_triton=None):
    """seen[row] = 1 for every row read by an edge of the chunks (seen: uint8, one per row)."""
    if not chunks.numel():
        return
    if not _use_triton(seen.device, use_triton):
        _, features, _ = layout.edges_of(chunks)
        seen[features] = 1
        return
    from alac.runtime.cache_remap_kernel import mark_touched_kernel

    mark_touched_kernel[(chunks.numel(),)](chunks, layout.chunk_start, layout.chunk_width, layout.edge_feature,
                                           seen, C=layout.chunk_size, BLOCK=REMAP_BLOCK)


def remap(layout, chunks, slot_of, out_feature, capacity, per_batch, use_triton=None):
    """out_feature[e] = slot_of[row of e] for the edges e of the chunks (padding stays -1). Returns
    int32 (hits, edges) per batch of per_batch chunks: its edges whose slot is below capacity (the
    hot store served them) and all its edges."""
    batches = -(-chunks.numel() // per_batch)
    hits = torch.zeros(batches, dtype=torch.int32, device=slot_of.device)
    edges = torch.zeros_like(hits)
    if not chunks.numel():
        return hits, edges
    if not _use_triton(slot_of.device, use_triton):
        positions, features, rows = layout.edges_of(chunks)
        slots = slot_of[features]
        out_feature[positions] = slots
        batch = torch.div(rows, per_batch * layout.chunk_size, rounding_mode="floor")
        hits += torch.bincount(batch, weights=(slots < capacity).double(), minlength=batches).int()
        edges += torch.bincount(batch, minlength=batches).int()
        return hits, edges
    from alac.runtime.cache_remap_kernel import remap_kernel

    remap_kernel[(chunks.numel(),)](chunks, layout.chunk_start, layout.chunk_width, layout.edge_feature, slot_of,
                                    out_feature, hits, edges, per_batch, capacity, C=layout.chunk_size,
                                    BLOCK=REMAP_BLOCK)
    return hits, edges
