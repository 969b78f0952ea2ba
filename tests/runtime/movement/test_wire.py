"""The narrow wire form of edge ids: 16 bits, 32-bit escapes found per tile; decoded by the Triton
kernel (interpreted on the CPU, compiled on a GPU) and by torch to the ids it was made of."""

import numpy as np
import pytest
import torch

from alac.data.dataset import SparseDataset
from alac.errors import OptionError
from alac.runtime.movement import wire
from alac.runtime.movement.blocks import (
    INT32_IDS,
    NARROW_IDS,
    decoded,
    device_bytes,
    packed,
    plan_blocks,
    unpack,
    wire_arrays,
)
from alac.runtime.movement.layout import LayoutOptions, build_layout

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def _ids(n, seed=0):
    """Ids of every kind: padding, small, the last 16-bit ones, the first escaped ones, the widest."""
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, 2 * wire.ID16_LIMIT, (n,), generator=generator, dtype=torch.int32)
    ids[torch.randint(0, n, (n // 10,), generator=generator)] = -1
    special = torch.tensor([-1, 0, wire.ID16_LIMIT - 1, wire.ID16_LIMIT, wire.ESCAPE, 2**31 - 1], dtype=torch.int32)
    ids[:special.numel()] = special
    return ids


@pytest.mark.parametrize("n", [1, 6, wire.ESCAPE_TILE - 1, wire.ESCAPE_TILE, 3 * wire.ESCAPE_TILE + 17])
@pytest.mark.parametrize("use_triton", [False, True])
def test_decoding_gives_back_the_encoded_ids(n, use_triton):
    ids = _ids(max(n, 6))[:n]
    id16, escape_start, escape_id = wire.encode(ids)
    assert id16.dtype == torch.int16 and escape_id.numel() == wire.escape_count(ids) == int((ids >= 65534).sum())
    assert escape_start.numel() == wire.tiles(n)
    device = DEVICE if use_triton else "cpu"
    got = wire.decode(id16.to(device), escape_start.to(device), escape_id.to(device), use_triton=use_triton)
    assert got.dtype == torch.int32 and torch.equal(got.cpu(), ids)


def test_the_narrow_form_is_chosen_where_it_moves_fewer_bytes():
    # 2 bytes an edge plus 4 an escaped one against 4: it pays while under half the edges escape
    few = torch.zeros(wire.ID16_LIMIT + 10, dtype=torch.int64)
    few[:wire.ID16_LIMIT] = 3
    few[wire.ID16_LIMIT:] = 1
    assert wire.narrow_pays(few, int(few.sum()))
    many = torch.ones(3 * wire.ID16_LIMIT, dtype=torch.int64)
    assert not wire.narrow_pays(many, int(many.sum()))
    assert wire_arrays("auto", few, int(few.sum())) == NARROW_IDS
    assert wire_arrays("auto", many, int(many.sum())) == INT32_IDS
    assert wire_arrays("int32", few, int(few.sum())) == INT32_IDS
    assert wire_arrays("narrow", many, int(many.sum())) == NARROW_IDS
    assert wire_arrays("field_ranks", many, int(many.sum())) == NARROW_IDS
    with pytest.raises(OptionError, match="'auto', 'int32', 'narrow' or 'field_ranks'"):
        wire_arrays("int16", few, 1)


def _slot_field_edges(ranks, n_chunks, generator):
    """Edges of n_chunks chunks of [W, C] slot-major slots, slot s an id of field s (some -1: padding)."""
    W, C = ranks.width, ranks.chunk_size
    field = torch.arange(W).repeat_interleave(C).repeat(n_chunks)
    starts, sizes = ranks.field_start[:-1].long(), (ranks.field_start[1:] - ranks.field_start[:-1]).long()
    # each field's ids drawn with a heavy head and its whole tail: ranks past the 16-bit range escape
    position = (torch.rand(field.numel(), generator=generator) ** 4 * sizes[field]).long()
    ids = ranks.ids[starts[field] + position]
    ids[torch.rand(field.numel(), generator=generator) < 0.05] = -1
    return ids


@pytest.mark.parametrize("use_triton", [False, True])
def test_ids_as_ranks_within_their_field_decode_to_the_ids(use_triton):
    """A slot's words are ranks within its field: fewer escape, and both decodes give the ids back."""
    generator = torch.Generator().manual_seed(3)
    W, C = 3, 8
    # field 1 has more features than 16 bits count; the features' fields are interleaved in id order
    field_of = torch.cat([torch.zeros(500), torch.ones(wire.ID16_LIMIT + 3000), torch.full((700,), 2)]).int()
    field_of = field_of[torch.randperm(field_of.numel(), generator=generator)]
    ranks = wire.FieldRanks.of_fields(field_of, W, C)
    assert torch.equal(field_of[ranks.ids.long()], field_of.sort(stable=True).values)
    for field in range(W):
        ids = ranks.ids[ranks.field_start[field]:ranks.field_start[field + 1]].long()
        # a field's features in id order, their ranks counting from 0
        assert torch.all(ids[1:] > ids[:-1]) and torch.equal(ranks.rank[ids], torch.arange(ids.numel()).int())
    ids = _slot_field_edges(ranks, 60, generator).int()
    id16, escape_start, escape_id = wire.encode(ids, ranks)
    escaped = (ranks.rank[ids.clamp_min(0).long()] >= wire.ID16_LIMIT) & (ids >= 0)
    assert escape_id.numel() == wire.escape_count(ids, ranks) == int(escaped.sum()) > 0
    assert wire.escape_count(ids, ranks) < wire.escape_count(ids)
    device = DEVICE if use_triton else "cpu"
    got = wire.decode(id16.to(device), escape_start.to(device), escape_id.to(device), ranks.to(device),
                      use_triton=use_triton)
    assert torch.equal(got.cpu(), ids)


def test_blocks_of_a_layout_with_escaped_ids_decode_to_its_slices():
    """70,000 features seen (ids past the 16-bit range after the re-index) in rows of unequal length:
    every block packed in the narrow form is smaller than in int32 and decodes to the layout's ids."""
    generator = np.random.default_rng(1)
    lengths = generator.integers(1, 9, 16_000)
    indptr = torch.from_numpy(np.concatenate([[0], np.cumsum(lengths)]))
    indices = torch.from_numpy(generator.permutation(np.resize(np.arange(70_000), int(lengths.sum())))).int()
    data = SparseDataset(indptr=indptr, indices=indices, values=None,
                         labels=torch.from_numpy(generator.integers(0, 2, 16_000)).float(), n_features=70_000)
    layout = build_layout(data, LayoutOptions(chunk_size=32), device="cpu")
    narrow = plan_blocks(layout, 4, 200_000, NARROW_IDS)
    assert len(narrow) > 3 and sum(block.escapes for block in narrow) == int((layout.edge_feature >= 65534).sum()) > 0
    for block in narrow:
        assert device_bytes(block, 32, NARROW_IDS) <= 200_000
        arrays = decoded(unpack(packed(layout, block, NARROW_IDS), block, 32, NARROW_IDS))
        assert torch.equal(arrays["edge_feature"], layout.edge_feature[block.first_edge:block.end_edge])
        assert packed(layout, block, NARROW_IDS).numel() < packed(layout, block, INT32_IDS).numel()
