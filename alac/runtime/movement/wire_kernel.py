"""The narrow wire form's decode kernel (alac.runtime.movement.wire has the format and its torch twin); a
module of its own so that the CPU path does not need Triton."""

import triton
import triton.language as tl


@triton.jit
def decode_kernel(id16_ptr, escape_start_ptr, escape_id_ptr, out_ptr, n_edges, TILE: tl.constexpr):
    offsets = tl.program_id(0).to(tl.int64) * TILE + tl.arange(0, TILE)
    inside = offsets < n_edges
    word = tl.load(id16_ptr + offsets, mask=inside, other=0).to(tl.int32) & 0xFFFF
    escaped = inside & (word == 0xFFFF)
    flags = escaped.to(tl.int32)
    # the escape list's position of each escaped edge: the tile's start plus the escapes before it
    rank = tl.load(escape_start_ptr + tl.program_id(0)) + tl.cumsum(flags, axis=0) - flags
    wide = tl.load(escape_id_ptr + rank, mask=escaped, other=0)
    tl.store(out_ptr + offsets, tl.where(escaped, wide, word - 1), mask=inside)
