import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from alac.data.arrays import from_csr_arrays
from alac.data.libsvm import write_libsvm
from alac.runtime.movement import layout as layout_module
from alac.runtime.movement.layout import BigraphLayout, LayoutOptions, build_layout, load_layout


@st.composite
def csr_datasets(draw):
    n_rows = draw(st.integers(1, 60))
    n_features = draw(st.integers(1, 40))
    # mostly short rows, some empty, now and then a very long one
    lengths = draw(st.lists(st.one_of(st.integers(0, 4), st.just(0), st.integers(50, 300)),
                            min_size=n_rows, max_size=n_rows))
    nnz = sum(lengths)
    seed = draw(st.integers(0, 2**32 - 1))
    generator = np.random.default_rng(seed)
    # few distinct ids per long row, so duplicate ids within a row are common
    ids = generator.integers(0, n_features, nnz)
    values = None if draw(st.booleans()) else generator.standard_normal(nnz).astype(np.float32)
    dataset = from_csr_arrays(np.concatenate([[0], np.cumsum(lengths)]), ids, values,
                              generator.choice([0.0, 1.0], n_rows), n_features)
    if draw(st.booleans()):
        dataset.fields = torch.from_numpy(generator.integers(0, 3, nnz).astype(np.int32))
        dataset.n_fields = 3
    options = LayoutOptions(chunk_size=draw(st.sampled_from([1, 3, 4, 16])),
                            hot_size=draw(st.integers(0, n_features)),
                            bin_window_chunks=draw(st.sampled_from([1, 2, 64])))
    return dataset, options


def _check_layout(dataset, options, layout):
    C = options.chunk_size
    # the layout rebuilds the original matrix exactly
    assert layout.to_csr().same_as(dataset)
    # the re-index is a permutation, by non-increasing frequency, ties in original id order
    n2o = layout.new_to_old.cpu().long()
    assert torch.equal(torch.sort(n2o).values, torch.arange(dataset.n_features))
    assert torch.equal(layout.old_to_new.cpu().long()[n2o], torch.arange(dataset.n_features))
    frequency = torch.bincount(dataset.indices.long(), minlength=dataset.n_features)
    assert torch.equal(layout.frequency.cpu(), frequency[n2o])
    ties = layout.frequency[1:].cpu() == layout.frequency[:-1].cpu()
    assert (layout.frequency[1:].cpu() <= layout.frequency[:-1].cpu()).all()
    assert (n2o[1:][ties] > n2o[:-1][ties]).all()
    # every chunk holds C rows and is as wide as its longest row
    assert layout.row_of_slot.numel() == layout.n_chunks * C
    widths = layout.row_nnz.cpu().view(-1, C).amax(1)
    assert torch.equal(layout.chunk_width.cpu(), widths.int())
    # padding slots: feature -1 and value 0
    edges = layout.edge_feature.cpu()
    assert edges.numel() == int(layout.chunk_start[-1])
    assert int((edges >= 0).sum()) == dataset.nnz
    if layout.edge_value is not None:
        assert (layout.edge_value.cpu()[edges < 0] == 0).all()
    # hot/cold counts per chunk against a direct count
    for chunk in range(layout.n_chunks):
        segment = edges[int(layout.chunk_start[chunk]):int(layout.chunk_start[chunk + 1])]
        hot = int(((segment >= 0) & (segment < options.hot_size)).sum())
        assert int(layout.hot_edges[chunk]) == hot
        assert int(layout.cold_edges[chunk]) == int((segment >= options.hot_size).sum())
    padding = (edges.numel() - dataset.nnz) / max(1, dataset.nnz)
    assert layout.stats.padding_overhead == pytest.approx(padding)


@settings(max_examples=150, deadline=None)
@given(csr_datasets())
def test_layout_rebuilds_the_matrix(case):
    dataset, options = case
    _check_layout(dataset, options, build_layout(dataset, options, device="cpu"))


@pytest.mark.parametrize("chunk_size", [1, 4, 7])
def test_fixed_width_keeps_row_order(chunk_size):
    generator = np.random.default_rng(0)
    n_rows, width = 23, 5
    dataset = from_csr_arrays(np.arange(n_rows + 1) * width, generator.integers(0, 50, n_rows * width),
                              None, generator.random(n_rows), 50)
    layout = build_layout(dataset, LayoutOptions(chunk_size=chunk_size, hot_size=10), device="cpu")
    assert layout.fixed_width == width
    assert torch.equal(layout.row_of_slot[:n_rows], torch.arange(n_rows))
    assert (layout.row_of_slot[n_rows:] == -1).all()
    assert torch.equal(layout.chunk_start, torch.arange(layout.n_chunks + 1) * chunk_size * width)
    _check_layout(dataset, layout.options, layout)


def test_rows_are_binned_by_length_within_windows():
    lengths = np.array([1, 5, 2, 5, 1, 3, 3, 1])
    dataset = from_csr_arrays(np.concatenate([[0], np.cumsum(lengths)]), np.zeros(lengths.sum(), int),
                              None, np.zeros(8), 1)
    layout = build_layout(dataset, LayoutOptions(chunk_size=2, bin_window_chunks=2), device="cpu")
    # windows of 4 rows, longest first, ties in row order
    assert layout.row_of_slot.tolist() == [1, 3, 2, 0, 5, 6, 4, 7]
    assert layout.chunk_width.tolist() == [5, 2, 3, 1]


def test_with_hot_size_matches_a_rebuild():
    generator = np.random.default_rng(1)
    lengths = generator.integers(0, 9, 100)
    dataset = from_csr_arrays(np.concatenate([[0], np.cumsum(lengths)]), generator.zipf(1.5, lengths.sum()) % 60,
                              None, np.zeros(100), 60)
    layout = build_layout(dataset, LayoutOptions(chunk_size=8), device="cpu")
    rebuilt = build_layout(dataset, LayoutOptions(chunk_size=8, hot_size=5), device="cpu")
    moved = layout.with_hot_size(5)
    assert torch.equal(moved.hot_edges, rebuilt.hot_edges) and torch.equal(moved.cold_edges, rebuilt.cold_edges)
    assert moved.stats.hot_edge_share == pytest.approx(rebuilt.stats.hot_edge_share)
    assert moved.stats.hot_edge_share > 0


def test_statistics_of_a_known_matrix():
    # feature 0 in every row, features 1..9 once each: 10 rows, 20 accesses
    indices = np.array([v for r in range(10) for v in (0, r)])[1:]
    indptr = np.concatenate([[0], np.cumsum([1] + [2] * 9)])
    dataset = from_csr_arrays(indptr, indices, None, np.zeros(10), 10)
    stats = build_layout(dataset, LayoutOptions(chunk_size=4), device="cpu").stats
    assert (stats.rows, stats.nnz, stats.max_nnz, stats.features_seen) == (10, 19, 2, 10)
    assert stats.mean_nnz == pytest.approx(1.9)
    # top 10 % of 10 seen features is 1 feature: feature 0 with 10 of 19 accesses
    assert dict(stats.top_share)[0.1] == pytest.approx(10 / 19)


def test_chunk_order_is_a_seeded_permutation_per_epoch():
    dataset = from_csr_arrays(np.arange(101), np.zeros(100, int), None, np.zeros(100), 1)
    layout = build_layout(dataset, LayoutOptions(chunk_size=4), device="cpu")
    orders = [layout.chunk_order(epoch, seed=5) for epoch in range(3)]
    for order in orders:
        assert torch.equal(order.sort().values, torch.arange(25))
    assert not torch.equal(orders[0], orders[1])
    assert torch.equal(layout.chunk_order(1, seed=5), orders[1])


def test_numpy_dict_round_trip():
    dataset = from_csr_arrays(np.array([0, 2, 3]), np.array([1, 0, 1]), np.array([1.0, 2.0, 3.0]),
                              np.array([1.0, 0.0]), 2)
    layout = build_layout(dataset, LayoutOptions(chunk_size=2, hot_size=1), device="cpu")
    again = BigraphLayout.from_numpy_dict(*layout.to_numpy_dict())
    assert again.stats == layout.stats and again.to_csr().same_as(dataset)


def test_disk_cache_hits_and_invalidation(tmp_path, monkeypatch):
    generator = np.random.default_rng(3)
    lengths = generator.integers(0, 6, 50)
    dataset = from_csr_arrays(np.concatenate([[0], np.cumsum(lengths)]), generator.integers(0, 20, lengths.sum()),
                              None, generator.choice([-1.0, 1.0], 50), 20)
    path = tmp_path / "data.svm"
    write_libsvm(dataset, path)
    first_data, first = load_layout(path, options=LayoutOptions(chunk_size=8), device="cpu")
    from alac.data import formats
    calls = []
    real_load = formats._load_uncached
    monkeypatch.setattr(formats, "_load_uncached", lambda *a: calls.append(a) or real_load(*a))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(layout_module, "build_layout", lambda *a, **k: pytest.fail("layout rebuilt"))
        again_data, again = load_layout(path, options=LayoutOptions(chunk_size=8, hot_size=3), device="cpu")
    assert calls == [] and again_data.same_as(first_data) and again.to_csr().same_as(first.to_csr())
    assert again.hot_size == 3 and int(again.hot_edges.sum()) > 0
    # other loader options or other content: a new parse
    load_layout(path, options=LayoutOptions(chunk_size=8), device="cpu", n_features=25)
    assert len(calls) == 1
    path.write_text(path.read_text() + "1 3:1\n")
    changed, _ = load_layout(path, options=LayoutOptions(chunk_size=8), device="cpu")
    assert len(calls) == 2 and changed.n_rows == 51


def test_corrupt_cache_entry_is_rebuilt(tmp_path):
    path = tmp_path / "data.svm"
    path.write_text("1 1:1 2:1\n-1 2:1\n")
    load_layout(path, device="cpu")
    import os
    cache = tmp_path / "alac-cache"
    for entry in cache.iterdir():
        for array in entry.glob("*.npy"):
            array.write_bytes(b"garbage")
    dataset, layout = load_layout(path, device="cpu")
    assert dataset.n_rows == 2 and layout.to_csr().same_as(dataset)
    assert not [p for p in os.listdir(cache) if p.endswith(".tmp")]
    from alac.cache import DiskCache
    from alac.data.dataset import SparseDataset
    loaded = [DiskCache(cache).load(entry.name, SparseDataset) for entry in cache.iterdir()
              if entry.name.startswith("dataset-")]
    assert len(loaded) == 1 and loaded[0].same_as(dataset)


def test_cached_arrays_changed_in_place_are_never_used(tmp_path, capsys):
    """Every cached label set to 1 (valid arrays, other values): the entry fails its checksum and is
    built again, so `alac data stats` reports the file's labels."""
    from alac.cli.commands import main

    path = tmp_path / "data.svm"
    path.write_text("1 1:1 2:1\n-1 2:1\n-1 3:1\n1 1:1\n")
    assert main(["data", "stats", str(path), "--device", "cpu"]) == 0
    assert "-1: 2 (50.00%), 1: 2 (50.00%)" in capsys.readouterr().out
    for labels in (tmp_path / "alac-cache").glob("*/labels.npy"):
        array = np.load(labels)
        np.save(labels, np.ones_like(array))
    assert main(["data", "stats", str(path), "--device", "cpu"]) == 0
    assert "-1: 2 (50.00%), 1: 2 (50.00%)" in capsys.readouterr().out


@pytest.mark.gpu
@settings(max_examples=30, deadline=None)
@given(csr_datasets())
def test_gpu_layout_equals_cpu_layout(case):
    dataset, options = case
    cpu = build_layout(dataset, options, device="cpu")
    gpu = build_layout(dataset, options, device="cuda")
    assert gpu.device.type == "cuda"
    a, b = cpu.to_numpy_dict()[0], gpu.to_numpy_dict()[0]
    assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("block", [1, 7, 64, 1 << 27])
def test_hot_and_cold_counts_per_chunk_in_blocks(block, monkeypatch):
    """Per-chunk counts of hot and cold real edges, with the prefix sums taken block by block."""
    monkeypatch.setattr(layout_module, "PREFIX_BLOCK", block)
    generator = torch.Generator().manual_seed(4)
    edge_feature = torch.randint(-1, 30, (500,), generator=generator)
    chunk_start = torch.cat([torch.tensor([0]), torch.sort(torch.randint(0, 501, (40,), generator=generator)).values,
                             torch.tensor([500])])
    hot, cold = layout_module._hot_cold_counts(edge_feature, chunk_start, 6)
    for i in range(chunk_start.numel() - 1):
        piece = edge_feature[chunk_start[i]:chunk_start[i + 1]]
        assert hot[i] == int(((piece >= 0) & (piece < 6)).sum())
        assert cold[i] == int((piece >= 6).sum())


def test_an_evaluation_layout_shares_the_training_layouts_maps_and_lays_out_the_same():
    from alac.data.synthetic import criteo_like

    data = criteo_like(600, n_fields=5, seed=3, device="cpu")
    train, valid = data.take(torch.arange(500)), data.take(torch.arange(500, 600))
    options = LayoutOptions(chunk_size=8)
    trained = build_layout(train, options, "cpu")
    shared = build_layout(valid, options, "cpu", maps_of=trained)
    copied = build_layout(valid, options, "cpu", feature_order=trained.new_to_old)
    assert shared.new_to_old.data_ptr() == trained.new_to_old.data_ptr()
    assert shared.old_to_new.data_ptr() == trained.old_to_new.data_ptr()
    for name in ("edge_feature", "frequency", "row_of_slot", "chunk_start", "labels"):
        assert torch.equal(getattr(shared, name), getattr(copied, name)), name


def test_fixed_width_edges_piece_by_piece_are_slot_major_chunks():
    rows, width, chunk = 7, 3, 2
    entries = torch.arange(rows * width, dtype=torch.int32)
    mapping = torch.arange(rows * width, dtype=torch.int32).flip(0)
    # by hand: rows padded to whole chunks, each chunk's [slot, entry] block stored entry-major
    padded = np.full((8, width), -1)
    padded[:rows] = mapping.numpy()[entries.numpy()].reshape(rows, width)
    expected = padded.reshape(4, chunk, width).transpose(0, 2, 1).reshape(-1)
    for piece_chunks in (1, 3, 64):
        got = layout_module._fixed_width_edges(entries, mapping, -1, rows, width, chunk, piece_chunks=piece_chunks)
        assert got.dtype == torch.int32
        np.testing.assert_array_equal(got.numpy(), expected)
