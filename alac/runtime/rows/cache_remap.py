"""A HybridHash segment's bookkeeping (alac.runtime.rows.hybrid_hash): the rows its edges touch (counted,
and those the hot store lacks with where each is now), and its edges re-pointed at cache slots with
the hot store's hits per batch. On a CUDA device each is one
Triton launch over the segment's chunks (alac.runtime.rows.cache_remap_kernel: a pass over the edges
instead of torch's gathers and scatters with int64 edge lists, which took a large share of a cached
epoch in benchmarks/placement.py); elsewhere torch does the same, and is the kernels' twin in tests."""

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
    from alac.runtime.rows.cache_remap_kernel import mark_touched_kernel

    mark_touched_kernel[(chunks.numel(),)](chunks, layout.chunk_start, layout.chunk_width, layout.edge_feature,
                                           seen, C=layout.chunk_size, BLOCK=REMAP_BLOCK)


def remap(layout, chunks, slot_of, out_feature, capacity, per_batch, counters=None, use_triton=None):
    """out_feature[e] = slot_of[row of e] for the edges e of the chunks (padding stays -1). Returns
    int32 (hits, edges) per batch of per_batch chunks: its edges whose slot is below capacity (the
    hot store served them) and all its edges, added into counters (a zeroed pair) where given."""
    batches = -(-chunks.numel() // per_batch)
    if counters is None:
        counters = (torch.zeros(batches, dtype=torch.int32, device=slot_of.device),
                    torch.zeros(batches, dtype=torch.int32, device=slot_of.device))
    hits, edges = counters
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
    from alac.runtime.rows.cache_remap_kernel import remap_kernel

    remap_kernel[(chunks.numel(),)](chunks, layout.chunk_start, layout.chunk_width, layout.edge_feature, slot_of,
                                    out_feature, hits, edges, per_batch, capacity, C=layout.chunk_size,
                                    BLOCK=REMAP_BLOCK)
    return hits, edges


def segment_rows(layout, chunks, slot_of, counts, capacity, own, marks, delta=1, use_triton=None):
    """The rows the chunks' edges touch, each once: every one's count raised by delta, and of them
    the rows the hot store (slots below capacity) lacks (in no fixed order on a GPU: sorting them cost
    more than their loads gained), with where each is now: a slot at or past capacity, or -1 (in the
    host table, or in the slots of range `own`, which are loaded anew). marks: int32 words of one bit
    per row, all zero (left zero). Returns (rows, where), or None, counts unchanged, when the rows to
    stage outnumber own.stop - own.start."""
    limit = own.stop - own.start
    if not _use_triton(slot_of.device, use_triton):
        _, features, _ = layout.edges_of(chunks)
        touched = torch.unique(features)
        where = slot_of[touched].long()
        staged = (where < 0) | (where >= capacity)
        if int(staged.sum()) > limit:
            return None
        counts[touched] += delta
        where = where[staged]
        return touched[staged], torch.where((where >= own.start) & (where < own.stop), -1, where)
    from alac.runtime.rows.cache_remap_kernel import segment_rows_kernel

    def launch(delta, limit):
        found = torch.zeros(1, dtype=torch.int32, device=slot_of.device)
        rows = torch.empty(limit, dtype=torch.int32, device=slot_of.device)
        where = torch.empty_like(rows)
        if chunks.numel():
            segment_rows_kernel[(chunks.numel(),)](chunks, layout.chunk_start, layout.chunk_width,
                                                   layout.edge_feature, marks, counts, slot_of, rows, where, found,
                                                   capacity, own.start, own.stop, limit, delta,
                                                   C=layout.chunk_size, BLOCK=REMAP_BLOCK)
            marks.zero_()
        return rows, where, found

    rows, where, found = launch(delta, limit)
    found = int(found)       # the one host round trip of a segment's bookkeeping
    if found > limit:
        launch(-delta, 0)
        return None
    return rows[:found].long(), where[:found].long()


# move_rows runs as MOVE_PROGRAMS programs looping over blocks of MOVE_BLOCK values (rows times their
# padded width), as many programs as the multiprocessors a sync kernel leaves to the side stream
# (hybrid_hash.SIDE_MULTIPROCESSORS): a move started before a segment's persistent kernel must not sit
# on a multiprocessor one of its programs needs, or every grid barrier waits for the move. 4 programs beat
# 8 on the large FM of benchmarks/placement.py --only-big, and blocks of 4096 values beat 1024 at 64 MB.
MOVE_PROGRAMS = 4
MOVE_BLOCK = 4096


def move_rows(listed, consecutive, rows, start, to_listed, use_triton=None, programs=MOVE_PROGRAMS):
    """Rows between two tables of the same width: listed[rows[i]] and consecutive[start + i] for each i
    with rows[i] >= 0, copied into the listed rows (to_listed) or out of them. One launch of whole rows
    on a GPU (a staging half's write-back to the host table over its mapping, a carry between the
    halves), where torch's indexing moved one value per thread and needed the skipped rows filtered out;
    at most `programs` programs (a move beside a persistent kernel leaves it its multiprocessors)."""
    if not rows.numel():
        return
    if not _use_triton(rows.device, use_triton):
        places = torch.nonzero(rows >= 0).squeeze(1)
        if to_listed:
            listed[rows[places]] = consecutive[start + places]
        else:
            consecutive[start + places] = listed[rows[places]]
        return
    from alac.runtime.rows.cache_remap_kernel import move_rows_kernel

    width = listed[0].numel()
    block_w = 1 << max(width - 1, 0).bit_length()
    per_program = max(1, MOVE_BLOCK // block_w)
    programs = min(-(-rows.numel() // per_program), programs)
    move_rows_kernel[(programs,)](listed, consecutive, rows, rows.numel(), start, WIDTH=width, BLOCK_W=block_w,
                                  ROWS=per_program, TO_LISTED=to_listed)
