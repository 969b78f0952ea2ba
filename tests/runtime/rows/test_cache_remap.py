"""The cache's bookkeeping kernels (alac.runtime.rows.cache_remap_kernel, under Triton's interpreter here)
against their torch twin and against a per-edge loop: the rows a segment touches (counted, and those
to stage with where each is), its edges' slots and the hot store's hits per batch, and rows moved
between tables."""

import pytest
import torch

from alac.data.synthetic import criteo_like
from alac.runtime.movement.layout import LayoutOptions, build_layout
from alac.runtime.rows.cache_remap import mark_touched, move_rows, remap, segment_rows
from tests.runtime.movement.test_streams import DEVICE


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


@pytest.mark.parametrize("use_triton", [False, True])
def test_a_segments_rows_are_counted_once_and_those_the_hot_store_lacks_are_staged(segment, use_triton):
    layout, chunks, slot_of = segment
    slot_of = torch.where(torch.arange(slot_of.numel(), device=DEVICE) % 5 == 0, -1, slot_of)
    capacity, own = 60, slice(70, 5000)
    counts = torch.full((layout.n_features,), 2, dtype=torch.int32, device=DEVICE)
    marks = torch.zeros((layout.n_features >> 5) + 1, dtype=torch.int32, device=DEVICE)
    rows, where = segment_rows(layout, chunks, slot_of, counts, capacity, own, marks, use_triton=use_triton)
    rows, order = torch.sort(rows)
    where = where[order]
    touched = sorted({row for _, row, _ in _edges_by_loop(layout, chunks.cpu())})
    slots = slot_of.cpu()
    staged = [row for row in touched if not 0 <= int(slots[row]) < capacity]
    expected_where = [-1 if int(slots[row]) < 0 or int(slots[row]) in range(70, 5000) else int(slots[row])
                      for row in staged]
    assert rows.tolist() == staged and where.tolist() == expected_where
    assert {int(slots[r]) for r in staged} & set(range(60, 70)) and -1 in expected_where
    expected_counts = torch.full((layout.n_features,), 2, dtype=torch.int32)
    expected_counts[touched] = 3
    assert torch.equal(counts.cpu(), expected_counts) and not marks.any()


@pytest.mark.parametrize("use_triton", [False, True])
def test_a_segment_with_more_rows_to_stage_than_the_limit_changes_no_count(segment, use_triton):
    layout, chunks, slot_of = segment
    counts = torch.zeros(layout.n_features, dtype=torch.int32, device=DEVICE)
    marks = torch.zeros((layout.n_features >> 5) + 1, dtype=torch.int32, device=DEVICE)
    assert segment_rows(layout, chunks, slot_of, counts, 0, slice(0, 5), marks, use_triton=use_triton) is None
    assert not counts.any() and not marks.any()


@pytest.mark.parametrize("use_triton", [False, True])
@pytest.mark.parametrize("width", [1, 5])
def test_rows_move_between_a_listed_and_a_consecutive_table(use_triton, width):
    generator = torch.Generator().manual_seed(width)
    shape = (50,) if width == 1 else (50, width)
    listed, consecutive = torch.randn(shape, generator=generator), torch.randn((30, *shape[1:]), generator=generator)
    rows = torch.tensor([3, -1, 7, 20, -1, 49])
    into_listed, out_of_listed = listed.clone().to(DEVICE), consecutive.clone().to(DEVICE)
    move_rows(into_listed, consecutive.to(DEVICE), rows.to(DEVICE), 10, to_listed=True, use_triton=use_triton)
    move_rows(listed.to(DEVICE), out_of_listed, rows.to(DEVICE), 20, to_listed=False, use_triton=use_triton)
    expected_listed, expected_consecutive = listed.clone(), consecutive.clone()
    for place, row in enumerate(rows.tolist()):
        if row >= 0:
            expected_listed[row] = consecutive[10 + place]
            expected_consecutive[20 + place] = listed[row]
    assert torch.equal(into_listed.cpu(), expected_listed) and torch.equal(out_of_listed.cpu(), expected_consecutive)
