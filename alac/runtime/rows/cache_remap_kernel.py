"""The Triton kernels of alac.runtime.rows.cache_remap (which has their torch twin); a module of its own so
that the CPU path does not need Triton. One program per chunk of the segment, walking its edges
(chunk_start[c] .. + chunk_size x chunk_width[c], padding -1) in blocks."""

import triton
import triton.language as tl


@triton.jit
def _chunk_edges(chunks_ptr, chunk_start_ptr, chunk_width_ptr, C: tl.constexpr):
    """This program's chunk of the segment: its first edge and its edge slots."""
    chunk = tl.load(chunks_ptr + tl.program_id(0))
    return tl.load(chunk_start_ptr + chunk), tl.load(chunk_width_ptr + chunk).to(tl.int64) * C


@triton.jit
def _edge_block(edge_feature_ptr, start, offset, size, BLOCK: tl.constexpr):
    """(inside the chunk, feature id or -1) of the BLOCK edge slots from offset on."""
    inside = offset + tl.arange(0, BLOCK) < size
    return inside, tl.load(edge_feature_ptr + start + offset + tl.arange(0, BLOCK), mask=inside, other=-1)


@triton.jit
def mark_touched_kernel(chunks_ptr, chunk_start_ptr, chunk_width_ptr, edge_feature_ptr, seen_ptr,
                        C: tl.constexpr, BLOCK: tl.constexpr):
    start, size = _chunk_edges(chunks_ptr, chunk_start_ptr, chunk_width_ptr, C)
    for offset in range(0, size, BLOCK):
        _, feature = _edge_block(edge_feature_ptr, start, offset, size, BLOCK)
        # every writer stores the same 1 (no atomics), and only where it is not there yet: stores of
        # the hot rows' bytes from every program serialised (benchmarks/placement.py)
        marked = tl.load(seen_ptr + feature, mask=feature >= 0, other=1)
        tl.store(seen_ptr + feature, tl.full([BLOCK], 1, tl.uint8), mask=marked == 0)


# per_batch and capacity are not specialized on their values: one compiled kernel for every cache
@triton.jit(do_not_specialize=["per_batch", "capacity"])
def remap_kernel(chunks_ptr, chunk_start_ptr, chunk_width_ptr, edge_feature_ptr, slot_of_ptr, out_feature_ptr,
                 hits_ptr, edges_ptr, per_batch, capacity, C: tl.constexpr, BLOCK: tl.constexpr):
    start, size = _chunk_edges(chunks_ptr, chunk_start_ptr, chunk_width_ptr, C)
    hits = tl.zeros([BLOCK], tl.int32)
    edges = tl.zeros([BLOCK], tl.int32)
    for offset in range(0, size, BLOCK):
        inside, feature = _edge_block(edge_feature_ptr, start, offset, size, BLOCK)
        real = feature >= 0
        slot = tl.load(slot_of_ptr + feature, mask=real, other=-1)
        tl.store(out_feature_ptr + start + offset + tl.arange(0, BLOCK), slot, mask=inside)
        hits += (real & (slot < capacity)).to(tl.int32)
        edges += real.to(tl.int32)
    batch = tl.program_id(0) // per_batch
    tl.atomic_add(hits_ptr + batch, tl.sum(hits, axis=0))
    tl.atomic_add(edges_ptr + batch, tl.sum(edges, axis=0))


# capacity, own_first, own_end, limit and delta are not specialized on their values: one compiled
# kernel for every cache and segment
@triton.jit(do_not_specialize=["capacity", "own_first", "own_end", "limit", "delta"])
def segment_rows_kernel(chunks_ptr, chunk_start_ptr, chunk_width_ptr, edge_feature_ptr, marks_ptr, counts_ptr,
                        slot_of_ptr, staged_ptr, where_ptr, found_ptr, capacity, own_first, own_end, limit, delta,
                        C: tl.constexpr, BLOCK: tl.constexpr):
    # one program per chunk: on the bookkeeping stream, whose result the host waits for, one program
    # per multiprocessor looping over chunks ran twice as long (benchmarks/placement.py)
    start, size = _chunk_edges(chunks_ptr, chunk_start_ptr, chunk_width_ptr, C)
    for offset in range(0, size, BLOCK):
        _, feature = _edge_block(edge_feature_ptr, start, offset, size, BLOCK)
        real = feature >= 0
        # one bit per row: the edge that sets it is the row's first in the segment (every row once);
        # read before the atomic, so that the hot rows' words are not atomics of every program
        # (serialised, they took a large share of a cached epoch: benchmarks/placement.py)
        bit = tl.where(real, 1 << (feature & 31), 0)
        unmarked = real & ((tl.load(marks_ptr + (feature >> 5), mask=real, other=0) & bit) == 0)
        old = tl.atomic_or(marks_ptr + (feature >> 5), bit, mask=unmarked, sem="relaxed")
        first = unmarked & ((old & bit) == 0)
        count = tl.load(counts_ptr + feature, mask=first, other=0)
        tl.store(counts_ptr + feature, count + delta, mask=first)
        where = tl.load(slot_of_ptr + feature, mask=first, other=0)
        staged = first & ((where < 0) | (where >= capacity))
        # the block's staged rows take consecutive places after those found so far
        taken = staged.to(tl.int32)
        base = tl.atomic_add(found_ptr, tl.sum(taken, axis=0), sem="relaxed")
        place = base + tl.cumsum(taken, axis=0) - 1
        keep = staged & (place < limit)
        tl.store(staged_ptr + place, feature, mask=keep)
        own = (where >= own_first) & (where < own_end)
        tl.store(where_ptr + place, tl.where(own, -1, where), mask=keep)


@triton.jit(do_not_specialize=["n", "start"])
def move_rows_kernel(listed_ptr, consecutive_ptr, rows_ptr, n, start, WIDTH: tl.constexpr, BLOCK_W: tl.constexpr,
                     ROWS: tl.constexpr, TO_LISTED: tl.constexpr):
    lanes = tl.arange(0, BLOCK_W)
    for first in range(tl.program_id(0) * ROWS, n, tl.num_programs(0) * ROWS):
        place = first + tl.arange(0, ROWS)
        row = tl.load(rows_ptr + place, mask=place < n, other=-1).to(tl.int64)
        moved = (row >= 0)[:, None] & (lanes[None, :] < WIDTH)
        listed = listed_ptr + row[:, None] * WIDTH + lanes[None, :]
        consecutive = consecutive_ptr + (start + place).to(tl.int64)[:, None] * WIDTH + lanes[None, :]
        if TO_LISTED:
            tl.store(listed, tl.load(consecutive, mask=moved), mask=moved)
        else:
            tl.store(consecutive, tl.load(listed, mask=moved), mask=moved)
