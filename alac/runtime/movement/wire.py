"""The narrow wire form of a streamed block's edge ids: 16 bits per edge, 32 for the rare rest.

After the re-index by frequency most edges carry small ids (the synthetic Criteo-shaped set: 91 % of
edges below 65,534), so a block moves an edge's id as one 16-bit word, id + 1 (0 for a padding edge),
and an id of 65,534 or more as the escape word 0xFFFF plus the id in a list of 32-bit escapes in edge
order. The list is found per tile of ESCAPE_TILE edges: escape_start[t] counts the escapes of the
tiles before t, so a tile decodes on its own (a prefix sum of its escape flags). Blocks are decoded
once on the device, after their copy, into the int32 `edge_feature` every kernel reads: every kernel
family keeps reading one layout, and the decode is one pass over the block's ids in device memory.
"""

from __future__ import annotations

import torch

from alac.codegen import triton_installed

# ids below this travel in 16 bits; id + 1 is at most 0xFFFE, 0xFFFF is the escape word
ID16_LIMIT = 0xFFFE
ESCAPE = 0xFFFF
# edges per tile of the escape index: 4 bytes per 4,096 edges (0.1 % of the wire)
ESCAPE_TILE = 4096


def tiles(edges):
    return -(-edges // ESCAPE_TILE)


def escape_count(edge_feature):
    """Edges whose id needs the escape (real edges with id >= ID16_LIMIT)."""
    return int((edge_feature >= ID16_LIMIT).sum())


def narrow_pays(frequency, nnz):
    """Whether the 16-bit form moves fewer bytes than int32 ids for features of this frequency
    (re-indexed order): 2 bytes per edge plus 4 per escaped one against 4."""
    escaped = int(frequency[ID16_LIMIT:].sum()) if frequency.numel() > ID16_LIMIT else 0
    return nnz > 0 and 2 * nnz + 4 * escaped < 4 * nnz


def encode(edge_feature):
    """(id16 as int16 bits, escape_start int32 [tiles], escape_id int32 [escapes]) of int32 ids
    (-1: padding)."""
    ids = edge_feature.long()
    escaped = ids >= ID16_LIMIT
    words = torch.where(escaped, ESCAPE, ids + 1)
    id16 = torch.where(words >= 1 << 15, words - (1 << 16), words).to(torch.int16)
    per_tile = torch.nn.functional.pad(escaped, (0, tiles(ids.numel()) * ESCAPE_TILE - ids.numel()))
    per_tile = per_tile.view(-1, ESCAPE_TILE).sum(dim=1)
    escape_start = (torch.cumsum(per_tile, 0) - per_tile).int()
    return id16, escape_start, edge_feature[escaped].int()


def decode(id16, escape_start, escape_id, use_triton=None):
    """The int32 ids (-1: padding) of an encoded block, on the block's device: one Triton launch on
    a GPU (use_triton=True forces it, e.g. under TRITON_INTERPRET=1), torch's masked scatter otherwise."""
    out = torch.empty(id16.numel(), dtype=torch.int32, device=id16.device)
    if use_triton is None:
        use_triton = id16.device.type == "cuda" and triton_installed()
    if id16.numel() and use_triton:
        from alac.runtime.movement.wire_kernel import decode_kernel

        decode_kernel[(tiles(id16.numel()),)](id16, escape_start, escape_id, out, id16.numel(), TILE=ESCAPE_TILE)
        return out
    words = id16.int() & 0xFFFF
    torch.sub(words, 1, out=out)
    return out.masked_scatter_(words == ESCAPE, escape_id)
