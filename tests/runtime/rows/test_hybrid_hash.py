"""HybridHash: mixed batches on a GPU cache (hot store and staging) in front of a host table give the
parameters of one all-GPU table training the same batches, while the cache serves most accesses."""

import pytest
import torch

from alac.data.synthetic import criteo_like, kaggle_like
from alac.errors import OptionError
from alac.plan import Plan
from alac.runtime.execution.executor import Executor, LabelMap
from alac.runtime.movement.layout import LayoutOptions, build_layout
from alac.runtime.rows.hybrid_hash import SIDE_MULTIPROCESSORS, CacheShape, HybridHash, working_plan
from tests.runtime.movement.test_streams import DEVICE, KERNELS
from tests.zoo_models import ZOO


def _cache(model, plan, device, backend, shape, host=True):
    # the host table only holds rows and predicts: a sync plan (host params run sync plans only)
    placed = Plan(chunk_size=plan.chunk_size, batch_size=plan.batch_size,
                  placement=tuple((name, "host") for name in ("w", "v") if host and (model == "fm" or name == "w")))

    def executor(p):
        return Executor(ZOO[model](), p, backend=backend, device=device, seed=1, optimizer="adagrad")

    return HybridHash(executor(placed), executor(plan), shape), executor(plan)


@pytest.mark.parametrize(("model", "backend", "semantics", "hot_size"),
                         [("lr", "reference", "sync", 0), ("fm", "reference", "sync", 0),
                          ("fm", "reference", "async", 0), ("fm", KERNELS, "sync", 0), ("lr", KERNELS, "sync", 6)])
def test_a_cached_table_trains_as_one_table_does_on_the_same_batches(model, backend, semantics, hot_size):
    """Params, AdaGrad state and globals after two epochs of a fixed batch order, with a hot store far
    smaller than the table, re-ranked during the run, and segments cut by a small staging area; and
    with the kernels' hot segment on the cache's slots."""
    device = DEVICE if backend == "triton" else "cpu"
    rows, epochs = (3000, 2) if backend != "interpret" else (600, 1)
    data = criteo_like(rows, n_fields=5, seed=4, device="cpu")
    layout = build_layout(data, LayoutOptions(chunk_size=8), device)
    labels = LabelMap.fit("binary", data.labels).model_labels(layout.labels)
    # the kernels in their deterministic mode: float atomics would add in a different order per run (a
    # hot segment has none: its sums add within a batch, where the order stays within the tolerance)
    plan = Plan(chunk_size=8, batch_size=32, semantics=semantics, hot_size=hot_size,
                deterministic=backend != "reference" and semantics == "sync" and not hot_size)
    shape = CacheShape(capacity=layout.n_features // 10, staging=600, warmup=5, refresh=7)
    cache, one = _cache(model, plan, device, backend, shape)
    cache.initialize(layout, 1.0)
    one.initialize(layout, 1.0)
    # timing the bookkeeping (the planner's calibration) leaves the cache as it was
    counts, slot_of = cache.counts.clone(), cache.slot_of.clone()
    assert cache.bookkeeping_seconds(layout, layout.chunk_order(0, 1)[:16]) > 0
    assert torch.equal(cache.counts, counts) and torch.equal(cache.slot_of, slot_of) and not cache._marks.any()
    # so does timing its row moves: rows loaded and written back unchanged (the parameters compared
    # below include the host table's), the traffic statistics untouched
    moved = (cache.statistics.rows_in, cache.statistics.rows_out)
    assert cache.row_move_seconds(layout, layout.chunk_order(0, 1)[:16]) > 0
    assert (cache.statistics.rows_in, cache.statistics.rows_out) == moved and torch.equal(cache.slot_of, slot_of)
    losses = []
    for epoch in range(epochs):
        losses.append((cache.train_epoch(layout, labels, epoch, 0.3), one.train_epoch(layout, labels, epoch, 0.3)))
    batches = epochs * -(-layout.n_chunks // plan.chunks_per_batch)
    # segments were cut (warm-up, re-ranks, staging) and the hot store served a share of the edges
    assert cache.statistics.segments > batches // 7 and len(cache.statistics.hit_ratio) == batches
    assert sum(cache.statistics.hit_ratio[-10:]) / 10 > 0.3
    # consecutive segments shared rows: those went from one staging half to the other on the device
    assert cache.statistics.rows_carried > 0
    state = cache.current_state()
    for part in ("params", "states", "globals"):
        for name, values in getattr(one.state, part).items():
            torch.testing.assert_close(getattr(state, part)[name].cpu(), values.cpu(), rtol=1e-5, atol=1e-7)
    for cached, whole in losses:
        assert cached == pytest.approx(whole, rel=1e-5)
    torch.testing.assert_close(cache.whole_executor().predict(layout).cpu(), one.predict(layout).cpu())


def test_the_hot_store_holds_the_rows_counted_most_and_serves_a_skewed_set():
    """After warm-up the hot store is the top rows by count; on Zipf ids a store of 2 % of the rows
    serves most accesses, and rows enter it only at re-ranks."""
    data = kaggle_like(4000, zipf=1.2, seed=1, device="cpu")
    layout = build_layout(data, LayoutOptions(chunk_size=16), "cpu")
    labels = LabelMap.fit("binary", data.labels).model_labels(layout.labels)
    plan = Plan(chunk_size=16, batch_size=64)
    capacity = 2000
    cache, _ = _cache("lr", plan, "cpu", "reference", CacheShape(capacity, staging=4000, warmup=8, refresh=1000),
                      host=False)
    cache.initialize(layout, 1.0)
    ranked_by = []
    rank = cache.refresh

    def refresh():
        ranked_by.append(cache.counts.clone())
        rank()

    cache.refresh = refresh
    cache.train_epoch(layout, labels, 0, 0.1)
    # one re-rank, at the end of the warm-up: the store holds the rows counted most by then
    assert len(ranked_by) == 1 and int(ranked_by[0].sum()) > 0
    counts = ranked_by[0]
    hot = cache.cached[cache.cached >= 0]
    assert hot.numel() == capacity
    assert int(counts[hot].min()) >= int(torch.topk(counts, capacity).values.min())
    ratios = cache.statistics.hit_ratio
    assert ratios[:8] == [0.0] * 8 and sum(ratios[8:]) / len(ratios[8:]) > 0.5
    assert cache.statistics.rows_in > 0 and cache.statistics.rows_in == cache.statistics.rows_out + capacity


def test_a_batch_that_misses_more_rows_than_the_staging_area_holds_is_refused():
    data = criteo_like(400, n_fields=5, seed=4, device="cpu")
    layout = build_layout(data, LayoutOptions(chunk_size=8), "cpu")
    labels = LabelMap.fit("binary", data.labels).model_labels(layout.labels)
    cache, _ = _cache("lr", Plan(chunk_size=8, batch_size=32), "cpu", "reference", CacheShape(0, staging=10),
                      host=False)
    cache.initialize(layout, 1.0)
    with pytest.raises(OptionError, match="staging rows"):
        cache.train_epoch(layout, labels, 0, 0.1)


def test_a_segments_rows_still_in_its_own_staging_half_are_loaded_anew():
    """On a GPU a segment's rows are found before the write-back of the segment two back (which used
    the same staging half) has run: a row still pointing into that half is a miss, loaded from the
    host table after the write-back; a row in the other half is carried; a hot row is not staged."""
    data = criteo_like(400, n_fields=5, seed=4, device="cpu")
    layout = build_layout(data, LayoutOptions(chunk_size=8), "cpu")
    shape = CacheShape(capacity=10, staging=200)
    cache, _ = _cache("lr", Plan(chunk_size=8, batch_size=32), "cpu", "reference", shape, host=False)
    cache.initialize(layout, 1.0)
    chunks = torch.tensor([0, 1])
    _, touched, _ = layout.edges_of(chunks)
    touched = torch.unique(touched)
    hot, stale, carried = touched[0], touched[1], touched[2]
    cache.slot_of[hot] = 3                      # in the hot store
    cache.slot_of[stale] = 10 + 100 + 7         # in half 1, the half this segment loads into
    cache.slot_of[carried] = 10 + 5             # in half 0, the previous segment's
    rows, where = cache._rows_of_segment(layout, chunks, half=1)
    assert hot not in rows and set(rows.tolist()) == set(touched.tolist()) - {int(hot)}
    by_row = dict(zip(rows.tolist(), where.tolist()))
    assert by_row[int(stale)] == -1 and by_row[int(carried)] == 15
    assert all(by_row[r] == -1 for r in by_row if r not in (int(stale), int(carried)))


def test_the_plans_hot_segment_keeps_its_slots_through_re_ranks():
    data = criteo_like(2000, n_fields=5, seed=4, device="cpu")
    layout = build_layout(data, LayoutOptions(chunk_size=8), "cpu")
    labels = LabelMap.fit("binary", data.labels).model_labels(layout.labels)
    cache, _ = _cache("lr", Plan(chunk_size=8, batch_size=32, hot_size=6), "cpu", "reference",
                      CacheShape(capacity=300, staging=600, warmup=2, refresh=3), host=False)
    cache.initialize(layout, 1.0)
    cache.train_epoch(layout, labels, 0, 0.1)
    assert cache.slot_of[:6].tolist() == list(range(6)) and cache.cached[:6].tolist() == list(range(6))
    with pytest.raises(OptionError, match="hot segment"):
        _cache("lr", Plan(chunk_size=8, batch_size=32, hot_size=6), "cpu", "reference", CacheShape(4, staging=10))


def test_the_caches_sync_kernels_leave_multiprocessors_to_its_side_stream():
    sync = Plan(chunk_size=8, batch_size=4096)
    assert working_plan(sync, "cpu") is sync
    if torch.cuda.is_available():
        processors = torch.cuda.get_device_properties(0).multi_processor_count
        assert working_plan(sync, "cuda").programs == processors - SIDE_MULTIPROCESSORS
        assert working_plan(sync, "cuda", side_multiprocessors=4).programs == processors - 4
        # async kernels and a plan's own programs are left alone
        for plan in (Plan(semantics="async"), Plan(programs=7)):
            assert working_plan(plan, "cuda") is plan

