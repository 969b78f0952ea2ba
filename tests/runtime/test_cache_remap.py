"""The cache's bookkeeping kernels (alac.runtime.cache_remap_kernel, under Triton's interpreter here)
against their torch twin and against a per-edge loop: the rows a segment touches, its edges'
slots and the hot store's hits per batch."""

import pytest
import torch

from alac.data.synthetic import criteo_like
from alac.runtime.cache_remap import mark_touched, remap
from alac.runtime.layout import LayoutOptions, build_layout
from tests.runtime.test_streams import DEVICE


@pytest.fixture(scope="module")
def segment():
    data = criteo_like(700, n_fields=6, seed=3, device="cpu")
    layout = build_layout(data, LayoutOptions(chunk_size=8), DEVICE)
    # a shuffled run of chunks, as a segment of an epoch order is
    chunks = torch.randperm(layout.n_chunks, generator=torch.Generator().manual_seed(5))[:40]
    slot_of = torch.randint(0, 90, (layout.n_features,), generator=torch.Generator().manual_seed(6),
                            dtype=torch.int32)
    return layout, chunks.to(DEVICE), slot_of.to(DEVICE)


def _edges_by_loop(layout, chunks):
    """(edge position, row, chunk's place in the segment) of every real edge, one chunk at a time."""
    layout, out = layout.to("cpu"), []
    for place, chunk in enumerate(chunks.tolist()):
        start, size = int(layout.chunk_start[chunk]), int(layout.chunk_width[chunk]) * layout.chunk_size
        for position in range(start, start + size):
            if int(layout.edge_feature[position]) >= 0:
                out.append((position, int(layout.edge_feature[position]), place))
    return out


@pytest.mark.parametrize("use_triton", [False, True])
def test_the_rows_a_segment_touches_are_marked(segment, use_triton):
    layout, chunks, _ = segment
    seen = torch.zeros(layout.n_features, dtype=torch.uint8, device=DEVICE)
    mark_touched(layout, chunks, seen, use_triton=use_triton)
    expected = torch.zeros_like(seen, device="cpu")
    for _, row, _ in _edges_by_loop(layout, chunks.cpu()):
        expected[row] = 1
    assert torch.equal(seen.cpu(), expected) and 0 < int(seen.sum()) < layout.n_features


@pytest.mark.parametrize("use_triton", [False, True])
def test_edges_point_at_slots_and_each_batch_counts_its_hits(segment, use_triton):
    layout, chunks, slot_of = segment
    per_batch, capacity = 4, 60
    out = torch.full_like(layout.edge_feature, -1)
    hits, edges = remap(layout, chunks, slot_of, out, capacity, per_batch, use_triton=use_triton)
    expected_out = torch.full_like(out, -1).cpu()
    expected_hits, expected_edges = torch.zeros(10, dtype=torch.int32), torch.zeros(10, dtype=torch.int32)
    slot_of_cpu = slot_of.cpu()
    for position, row, place in _edges_by_loop(layout, chunks.cpu()):
        expected_out[position] = int(slot_of_cpu[row])
        expected_edges[place // per_batch] += 1
        expected_hits[place // per_batch] += int(slot_of_cpu[row] < capacity)
    assert torch.equal(out.cpu(), expected_out)
    assert hits.tolist() == expected_hits.tolist() and edges.tolist() == expected_edges.tolist()
    assert 0 < int(hits.sum()) < int(edges.sum())
