"""The narrow wire form of a streamed block's edge ids: 16 bits per edge, 32 for the rare rest.

After the re-index by frequency most edges carry small ids (the synthetic Criteo-shaped set: 91 % of
edges below 65,534), so a block moves an edge's id as one 16-bit word, id + 1 (0 for a padding edge),
and an id of 65,534 or more as the escape word 0xFFFF plus the id in a list of 32-bit escapes in edge
order. The list is found per tile of ESCAPE_TILE edges: escape_start[t] counts the escapes of the
tiles before t, so a tile decodes on its own (a prefix sum of its escape flags). Blocks are decoded
once on the device, after their copy, into the int32 `edge_feature` every kernel reads: every kernel
family keeps reading one layout, and the decode is one pass over the block's ids in device memory.

Where every row holds one id of each of its W fields, field s in slot s (Criteo-shaped one-hot rows),
a word can be the id's rank within its field instead (`FieldRanks`): a field's ids are few, so ranks
are small and alike, and far fewer escape (the synthetic set: 0.9 % of edges instead of 9 %); zstd
makes such blocks about 1.5 times smaller again (benchmarks/block_codecs.py). An edge's slot follows
from its position in a block of whole chunks of W x C edges, and its id is one gather from the field's
ids in rank order.
"""

from __future__ import annotations

import dataclasses

import torch

from alac.codegen import triton_installed

# ids below this travel in 16 bits; id + 1 is at most 0xFFFE, 0xFFFF is the escape word
ID16_LIMIT = 0xFFFE
ESCAPE = 0xFFFF
# edges per tile of the escape index: 4 bytes per 4,096 edges (0.1 % of the wire)
ESCAPE_TILE = 4096


def tiles(edges):
    return -(-edges // ESCAPE_TILE)


def escape_count(edge_feature, ranks=None):
    """Edges whose id (or rank, with FieldRanks) needs the escape: ID16_LIMIT or more."""
    return int((words_of(edge_feature, ranks) >= ID16_LIMIT).sum())


def narrow_pays(frequency, nnz):
    """Whether the 16-bit form moves fewer bytes than int32 ids for features of this frequency
    (re-indexed order): 2 bytes per edge plus 4 per escaped one against 4."""
    escaped = int(frequency[ID16_LIMIT:].sum()) if frequency.numel() > ID16_LIMIT else 0
    return nnz > 0 and 2 * nnz + 4 * escaped < 4 * nnz


@dataclasses.dataclass(frozen=True)
class FieldRanks:
    """Words as ids' ranks within their field, for blocks of whole chunks of `chunk_size` rows whose
    slot s holds field s of `width`: `ids` the features in (field, id) order, `field_start` [width + 1]
    where each field's begin there, `rank` each feature's place among its field's."""

    ids: torch.Tensor
    field_start: torch.Tensor
    rank: torch.Tensor
    width: int
    chunk_size: int

    @classmethod
    def of_fields(cls, field_of, width, chunk_size):
        """The ranks of features whose fields are field_of (one in [0, width) per feature id)."""
        field_of = field_of.long().cpu()
        ids = torch.argsort(field_of, stable=True)
        field_start = torch.zeros(width + 1, dtype=torch.int64)
        torch.cumsum(torch.bincount(field_of, minlength=width), 0, out=field_start[1:])
        rank = torch.empty_like(ids)
        rank[ids] = torch.arange(ids.numel()) - field_start[field_of[ids]]
        return cls(ids.int(), field_start.int(), rank.int(), width, chunk_size)

    def to(self, device):
        """The decode's tables on device (rank, which only encoding reads, stays where it is)."""
        return dataclasses.replace(self, ids=self.ids.to(device), field_start=self.field_start.to(device))

    def slot_of(self, n_edges, device):
        """The slot (and so the field) of each edge of a block."""
        edge = torch.arange(n_edges, device=device)
        return (edge % (self.width * self.chunk_size)) // self.chunk_size


def words_of(edge_feature, ranks=None):
    """What an id's word counts (int64): the id, or its rank within its field; -1 for padding."""
    ids = edge_feature.long()
    if ranks is None:
        return ids
    return torch.where(ids >= 0, ranks.rank.to(ids.device)[ids.clamp_min(0)].long(), -1)


def encode(edge_feature, ranks=None):
    """(id16 as int16 bits, escape_start int32 [tiles], escape_id int32 [escapes]) of int32 ids
    (-1: padding); with ranks (FieldRanks) a word counts the id's rank in its field, an escape holds
    the id."""
    ids = words_of(edge_feature, ranks)
    escaped = ids >= ID16_LIMIT
    words = torch.where(escaped, ESCAPE, ids + 1)
    id16 = torch.where(words >= 1 << 15, words - (1 << 16), words).to(torch.int16)
    per_tile = torch.nn.functional.pad(escaped, (0, tiles(ids.numel()) * ESCAPE_TILE - ids.numel()))
    per_tile = per_tile.view(-1, ESCAPE_TILE).sum(dim=1)
    escape_start = (torch.cumsum(per_tile, 0) - per_tile).int()
    return id16, escape_start, edge_feature[escaped].int()


def decode(id16, escape_start, escape_id, ranks=None, use_triton=None):
    """The int32 ids (-1: padding) of an encoded block, on the block's device (ranks: FieldRanks there,
    where the words are ranks): one Triton launch on a GPU (use_triton=True forces it, e.g. under
    TRITON_INTERPRET=1), torch's masked scatter otherwise."""
    out = torch.empty(id16.numel(), dtype=torch.int32, device=id16.device)
    if use_triton is None:
        use_triton = id16.device.type == "cuda" and triton_installed()
    if id16.numel() and use_triton:
        from alac.runtime.movement.wire_kernel import decode_kernel

        ids, field_start = (ranks.ids, ranks.field_start) if ranks is not None else (out, out)
        chunk_edges, chunk_size = (ranks.width * ranks.chunk_size, ranks.chunk_size) if ranks is not None else (1, 1)
        decode_kernel[(tiles(id16.numel()),)](id16, escape_start, escape_id, ids, field_start, out, id16.numel(),
                                              chunk_edges, chunk_size, TILE=ESCAPE_TILE, RANKS=ranks is not None)
        return out
    words = id16.int() & 0xFFFF
    if ranks is None:
        torch.sub(words, 1, out=out)
    else:
        slot = ranks.slot_of(id16.numel(), id16.device)
        narrow = (words > 0) & (words != ESCAPE)
        at = torch.where(narrow, ranks.field_start[slot].long() + words - 1, 0)
        out.copy_(torch.where(narrow, ranks.ids[at], -1))
    return out.masked_scatter_(words == ESCAPE, escape_id)
