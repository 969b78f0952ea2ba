"""The Triton kernels of alac.runtime.cache_remap (which has their torch twin); a module of its own so
that the CPU path does not need Triton. One program per chunk of the segment, walking its edges
(chunk_start[c] .. + chunk_size x chunk_width[c], padding -1) in blocks."""

import triton
import triton.language as tl


@triton.jit
def mark_touched_kernel(chunks_ptr, chunk_start_ptr, chunk_width_ptr, edge_feature_ptr, seen_ptr,
                        C: tl.constexpr, BLOCK: tl.constexpr):
    chunk = tl.load(chunks_ptr + tl.program_id(0))
    start = tl.load(chunk_start_ptr + chunk)
    size = tl.load(chunk_width_ptr + chunk).to(tl.int64) * C
    lanes = tl.arange(0, BLOCK)
    for offset in range(0, size, BLOCK):
        inside = offset + lanes < size
        feature = tl.load(edge_feature_ptr + start + offset + lanes, mask=inside, other=-1)
        # every writer stores the same 1 (no atomics), and only where it is not there yet: stores of
        # the hot rows' bytes from every program serialised (3 ms a segment at 512 MB on H100)
        marked = tl.load(seen_ptr + feature, mask=feature >= 0, other=1)
        tl.store(seen_ptr + feature, tl.full([BLOCK], 1, tl.uint8), mask=marked == 0)


# per_batch and capacity are not specialized on their values: one compiled kernel for every cache
@triton.jit(do_not_specialize=["per_batch", "capacity"])
def remap_kernel(chunks_ptr, chunk_start_ptr, chunk_width_ptr, edge_feature_ptr, slot_of_ptr, out_feature_ptr,
                 hits_ptr, edges_ptr, per_batch, capacity, C: tl.constexpr, BLOCK: tl.constexpr):
    program = tl.program_id(0)
    chunk = tl.load(chunks_ptr + program)
    start = tl.load(chunk_start_ptr + chunk)
    size = tl.load(chunk_width_ptr + chunk).to(tl.int64) * C
    lanes = tl.arange(0, BLOCK)
    hits = tl.zeros([BLOCK], tl.int32)
    edges = tl.zeros([BLOCK], tl.int32)
    for offset in range(0, size, BLOCK):
        inside = offset + lanes < size
        feature = tl.load(edge_feature_ptr + start + offset + lanes, mask=inside, other=-1)
        real = feature >= 0
        slot = tl.load(slot_of_ptr + feature, mask=real, other=-1)
        tl.store(out_feature_ptr + start + offset + lanes, slot, mask=inside)
        hits += (real & (slot < capacity)).to(tl.int32)
        edges += real.to(tl.int32)
    batch = program // per_batch
    tl.atomic_add(hits_ptr + batch, tl.sum(hits, axis=0))
    tl.atomic_add(edges_ptr + batch, tl.sum(edges, axis=0))
