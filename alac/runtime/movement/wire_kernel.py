"""The narrow wire form's decode kernel (alac.runtime.movement.wire has the format and its torch twin); a
module of its own so that the CPU path does not need Triton."""

import triton
import triton.language as tl


@triton.jit
def decode_kernel(id16_ptr, escape_start_ptr, escape_id_ptr, ids_ptr, field_start_ptr, out_ptr, n_edges, chunk_edges,
                  chunk_size, TILE: tl.constexpr, RANKS: tl.constexpr):
    """A tile of words decoded; RANKS: a word counts the id's rank in the field of its slot (ids_ptr:
    the features in (field, id) order, field_start_ptr: where each field's begin)."""
    offsets = tl.program_id(0).to(tl.int64) * TILE + tl.arange(0, TILE)
    inside = offsets < n_edges
    word = tl.load(id16_ptr + offsets, mask=inside, other=0).to(tl.int32) & 0xFFFF
    escaped = inside & (word == 0xFFFF)
    flags = escaped.to(tl.int32)
    # the escape list's position of each escaped edge: the tile's start plus the escapes before it
    rank = tl.load(escape_start_ptr + tl.program_id(0)) + tl.cumsum(flags, axis=0) - flags
    wide = tl.load(escape_id_ptr + rank, mask=escaped, other=0)
    narrow = word - 1
    if RANKS:
        ranked = inside & ~escaped & (word > 0)
        # blocks are whole chunks of [W, C] slot-major edges: slot s holds field s
        field = (offsets % chunk_edges) // chunk_size
        start = tl.load(field_start_ptr + field, mask=ranked, other=0)
        narrow = tl.load(ids_ptr + start + narrow, mask=ranked, other=-1)
    tl.store(out_ptr + offsets, tl.where(escaped, wide, narrow), mask=inside)
