import numpy as np
import pytest
import torch

from alac.data.arrays import from_csr_arrays
from alac.plan import Plan
from alac.runtime.execution.schedule import (
    LearningRateSchedule,
    async_programs,
    batch_scales,
    resident_programs,
    slots_per_step,
    warps_for_tile,
)
from alac.runtime.movement.layout import LayoutOptions, build_layout
from alac.runtime.planning.planner import (
    AccessCosts,
    autotune,
    hot_size_for_data,
    hot_size_from_costs,
    replicas_for,
    rows_per_flush,
)


def _layout(chunk_size=4):
    # feature 0 in every row, feature 1 in every other row, features 2..41 once each
    rows = []
    for r in range(40):
        rows.append([0] + ([1] if r % 2 == 0 else []) + [2 + r])
    indptr = np.concatenate([[0], np.cumsum([len(r) for r in rows])])
    dataset = from_csr_arrays(indptr, np.concatenate(rows), None, np.zeros(40), 42)
    return build_layout(dataset, LayoutOptions(chunk_size=chunk_size), device="cpu")


def test_hot_size_follows_the_threshold():
    layout = _layout(chunk_size=4)
    # occurrences per chunk of 4 rows: feature 0 -> 4, feature 1 -> 2, the rest -> 0.1
    frequency, rows = layout.frequency, layout.n_rows
    assert hot_size_from_costs(frequency, rows, AccessCosts("gpu", 1.0, 1.0, 1.0), 4) == 2     # th = 2
    assert hot_size_from_costs(frequency, rows, AccessCosts("gpu", 1.0, 0.5, 1.0), 4) == 1     # th = 4
    assert hot_size_from_costs(frequency, rows, AccessCosts("gpu", 0.01, 1.0, 1.0), 4) == 42   # th = 0.02
    # an async program flushing every 8 chunks of 4 rows sees 8x the occurrences per flush
    assert rows_per_flush(Plan(chunk_size=4, batch_size=4, semantics="async", flush_every=8)) == 32
    # sync applies the replicas' sums once per batch
    assert rows_per_flush(Plan(chunk_size=4, batch_size=16)) == 16
    assert hot_size_from_costs(frequency, rows, AccessCosts("gpu", 1.0, 0.5, 1.0), 32) == 2    # 0.8 < th = 4
    assert hot_size_for_data(None, Plan(semantics="async"), device="cpu") == 0


def test_replicas_spread_the_hottest_feature_over_a_batch():
    layout = _layout(chunk_size=4)
    plan = Plan(chunk_size=4, batch_size=16)
    # feature 0 is in every chunk of the batch's 4 chunks; the dense pass over R * H stays below
    # the batch's edges (16 rows x 2.5 nnz = 40)
    hottest, mean_nnz = float(layout.frequency[0]) / layout.n_rows, layout.stats.mean_nnz
    assert replicas_for(hottest, mean_nnz, plan, hot_size=2) == 4
    assert replicas_for(hottest, mean_nnz, plan, hot_size=20) == 2
    assert replicas_for(hottest, mean_nnz, plan, hot_size=0) == 1


def test_batch_scales_count_the_real_rows():
    layout = _layout(chunk_size=8)  # 40 rows: 5 full chunks
    order = torch.arange(layout.n_chunks)
    np.testing.assert_allclose(batch_scales(layout, order, 2).numpy(), [1 / 16, 1 / 16, 1 / 8])
    partial = _layout(chunk_size=16)  # 40 rows in 3 chunks of 16: the last chunk holds 8
    order = torch.tensor([2, 0, 1])
    np.testing.assert_allclose(batch_scales(partial, order, 2).numpy(), [1 / 24, 1 / 16])


def test_learning_rate_schedules():
    np.testing.assert_allclose(LearningRateSchedule().rates(0.5, 3, 10, 2, "cpu").numpy(), [0.5, 0.5])
    np.testing.assert_allclose(LearningRateSchedule("epoch_decay", 0.5).rates(1.0, 2, 0, 1, "cpu").numpy(), [0.25])
    inverse = LearningRateSchedule("inverse", decay=0.1, power=0.5).rates(1.0, 0, 10, 2, "cpu").numpy()
    np.testing.assert_allclose(inverse, [1 / 2 ** 0.5, 1 / 2.1 ** 0.5], rtol=1e-6)
    with pytest.raises(ValueError):
        LearningRateSchedule("cosine")


@pytest.mark.parametrize("registers, warps, shared, per_multiprocessor", [
    (255, 4, 16384, 2),     # the default async LR kernel on H100 with Triton 3.6 (ncu: 2 blocks, 8 warps)
    (78, 8, 16384, 3),      # registers: 65,536 // (78 * 256)
    (32, 4, 16384, 13),     # shared memory: 233,472 // (16,384 + 1,024 reserved) (threads allow 16)
    (32, 4, 1024, 16),      # threads: 2,048 // 128
    (255, 16, 0, 1),        # one program always fits (a launch that fits at all runs)
])
def test_resident_programs_follow_the_occupancy_limits(monkeypatch, registers, warps, shared, per_multiprocessor):
    from types import SimpleNamespace

    h100 = SimpleNamespace(multi_processor_count=132, warp_size=32, max_threads_per_multi_processor=2048,
                           shared_memory_per_multiprocessor=233_472)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device: h100)
    compiled = SimpleNamespace(n_regs=registers, metadata=SimpleNamespace(num_warps=warps, shared=shared))
    assert resident_programs(compiled, "cuda") == 132 * per_multiprocessor


@pytest.mark.parametrize("semantics, chunk_size, slots, factor_size, warps", [
    ("async", 32, 64, 0, 4),     # async LR on Criteo-shaped rows: [64, 32], 16 values per thread of 4 warps
    ("async", 32, 8, 16, 8),     # async FM k = 16: [8, 32, 16], 16 per thread of 8 warps
    ("async", 32, 4, 32, 4),     # async FM k = 32: [4, 32, 32], a thread per edge's 32 factors
    ("async", 32, 2, 64, 2),     # async FM k = 64: [2, 32, 64], 64 per thread of 2 warps
    ("async", 32, 1, 128, 2),    # k = 128: still 64 per thread (measured up to 64)
    ("sync", 8, 16, 32, 8),      # sync FM k = 32: [16, 8, 32], 16 per thread of 8 warps
    ("sync", 16, 64, 0, 4),      # sync LR: 8 per thread of 4 warps (never fewer than 4)
    ("sync", 32, 128, 64, 8),    # a larger tile still gets 8 warps at most
])
def test_warps_for_tile(semantics, chunk_size, slots, factor_size, warps):
    plan = Plan(semantics=semantics, chunk_size=chunk_size, batch_size=1024)
    assert warps_for_tile(plan, slots, factor_size) == warps
    assert warps_for_tile(Plan(chunk_size=chunk_size, batch_size=1024, num_warps=2), slots, factor_size) == 2


def test_schedule_sizes():
    layout = _layout(chunk_size=8)
    assert async_programs(Plan(chunk_size=8, batch_size=8, semantics="async", max_in_flight=16), layout) == 2
    assert async_programs(Plan(chunk_size=8, batch_size=8, semantics="async", programs=99), layout) == layout.n_chunks
    assert slots_per_step(Plan(chunk_size=8, batch_size=8), layout, 0) == 4       # ELL widths up to 3
    assert slots_per_step(Plan(chunk_size=8, batch_size=8, slots_per_step=2), layout, 0) == 2
    assert slots_per_step(Plan(chunk_size=8, batch_size=8), layout, 1000) == 1    # the tile budget


def test_autotune_picks_the_fastest_and_caches(tmp_path, monkeypatch):
    plans = [Plan(chunk_size=c, batch_size=256) for c in (32, 64, 128)]
    speed = {32: 3.0, 64: 1.0, 128: 2.0}
    best, timings = autotune(plans, lambda plan: speed[plan.chunk_size], cache_key="case")
    assert best.chunk_size == 64 and len(timings) == 3
    again, _ = autotune(plans, lambda plan: pytest.fail("not cached"), cache_key="case")
    assert again == best


def test_hot_segment_defaults_on_for_binary_data_and_in_sync_for_scalar_params_only():
    from alac.runtime.planning.planner import hot_segment_by_default

    assert hot_segment_by_default("async", binary=True)
    assert not hot_segment_by_default("async", binary=False)
    assert hot_segment_by_default("sync", binary=True)
    assert not hot_segment_by_default("sync", binary=True, resident=True)
    assert hot_segment_by_default("async", binary=True, resident=True)
    assert not hot_segment_by_default("sync", binary=False)
    assert not hot_segment_by_default("sync", binary=True, factor_size=8)


def test_the_default_sync_hot_segment_of_a_data_set_matches_the_planners(monkeypatch):
    """Before any layout, a sync plan without resident chunks (or an optimizer they do not run) gets
    the H and R that plan_for gives for the data's layout (the batch as flush period); FM's gets none,
    and neither does one with resident chunks."""
    import alac.runtime.planning.planner as planner
    from alac.data.synthetic import criteo_like
    from alac.ir.pipeline import lower
    from alac.models import zoo_model

    monkeypatch.setattr(planner, "measure_access_costs", lambda device: AccessCosts("gpu", 0.008, 0.018, 2700.0))
    data = criteo_like(4000, seed=0, device="cpu")
    base = Plan(chunk_size=16, batch_size=1024, resident_tiles=False)
    layout = build_layout(data, LayoutOptions(chunk_size=16), device="cpu")
    chosen = planner.plan_for(layout, lower(zoo_model("lr")), "sync", 1024, base, device="cuda")
    plan = planner.hot_segment_for_data(data, base, device="cuda")
    assert plan.hot_size == chosen.plan.hot_size > 0
    assert plan.replicas == chosen.plan.replicas > 1
    resident = Plan(chunk_size=16, batch_size=1024)
    assert planner.plan_for(layout, lower(zoo_model("lr")), "sync", 1024, resident, device="cuda").plan.hot_size == 0
    assert planner.hot_segment_for_data(data, resident, device="cuda").hot_size == 0
    adagrad = planner.plan_for(layout, lower(zoo_model("lr"), "adagrad"), "sync", 1024, resident, device="cuda")
    assert adagrad.plan.hot_size == planner.hot_segment_for_data(data, resident, "cuda", additive=False).hot_size > 0
    assert planner.hot_segment_for_data(data, base, device="cuda", factor_size=16).hot_size == 0
    assert planner.hot_segment_for_data(data, base, device="cpu").hot_size == 0


@pytest.mark.parametrize("factor_size, on", [(0, True), (16, True), (64, True), (128, False)])
def test_the_async_hot_segment_is_off_for_wide_factors(factor_size, on):
    from alac.runtime.planning.planner import hot_segment_by_default

    assert hot_segment_by_default("async", binary=True, factor_size=factor_size) == on


@pytest.mark.parametrize("programs, row_floats, l2", [(528, 17, 60 << 20), (528, 65, 50 << 20), (125, 1, 1 << 20)])
def test_the_hot_sums_cap_is_the_most_features_whose_sums_fit_the_l2_share(programs, row_floats, l2):
    from alac.runtime.planning.planner import HOT_SUMS_L2_SHARE, hot_sums_cap

    cap = hot_sums_cap(programs, row_floats, l2)
    assert 4 * programs * cap * row_floats <= HOT_SUMS_L2_SHARE * l2 < 4 * programs * (cap + 1) * row_floats


def test_plan_for_caps_the_async_hot_sums_to_the_l2_and_leaves_wider_factors_off(monkeypatch):
    """With H100-like access costs and a 4 MB L2 the async plans keep the cost model's H where the
    programs' sums fit the L2's share and are capped where they do not (the data set's default, before
    any layout, the same); sync plans are not capped; past k = 64 the planner says why it is off."""
    import alac.runtime.planning.planner as planner
    from alac.data.synthetic import criteo_like
    from alac.ir.pipeline import lower
    from alac.models import zoo_model, zoo_module
    from alac.runtime.movement.layout import LayoutOptions, build_layout

    monkeypatch.setattr(planner, "measure_access_costs", lambda device: AccessCosts("gpu", 0.008, 0.018, 2700.0))
    monkeypatch.setattr(planner, "l2_cache_bytes", lambda device: 4 << 20)
    data = criteo_like(4000, seed=0, device="cpu")
    layout = build_layout(data, LayoutOptions(chunk_size=32), device="cpu")
    fm = zoo_module("fm")
    programs = async_programs(Plan(semantics="async", chunk_size=32), layout)
    assert programs == 125
    base = Plan(semantics="async", batch_size=1024, chunk_size=32)
    uncapped = hot_size_from_costs(layout.frequency, layout.n_rows, AccessCosts("gpu", 0.008, 0.018, 2700.0),
                                   rows_per_flush(base))
    for model, k in ((zoo_model("lr"), 0), (fm.FactorizationMachine(k=16), 16), (fm.FactorizationMachine(k=64), 64)):
        ir = lower(model)
        cap = planner.hot_sums_cap(programs, 1 + k, 4 << 20)
        chosen = planner.plan_for(layout, ir, "async", 1024, base, device="cuda")
        assert chosen.plan.hot_size == min(uncapped, cap) > 0
        why = {decision: reason for decision, _, reason in chosen.reasons}["hot_size"]
        assert (f"capped at {cap:,} of the cost model's {uncapped:,}" in why) == (cap < uncapped)
        assert planner.hot_segment_for_data(data, base, "cuda", factor_size=k).hot_size == chosen.plan.hot_size
    assert planner.hot_sums_cap(programs, 17, 4 << 20) < uncapped < planner.hot_sums_cap(programs, 1, 4 << 20)
    sync = Plan(batch_size=1024, chunk_size=32, resident_tiles=False)
    assert planner.plan_for(layout, lower(zoo_model("lr")), "sync", 1024, sync,
                            device="cuda").plan.hot_size == uncapped_sync(layout, sync)
    wide = planner.plan_for(layout, lower(fm.FactorizationMachine(k=128)), "async", 1024, device="cuda")
    assert wide.plan.hot_size == 0
    assert "k = 128 > 64" in {decision: reason for decision, _, reason in wide.reasons}["hot_size"]


def uncapped_sync(layout, plan):
    return hot_size_from_costs(layout.frequency, layout.n_rows, AccessCosts("gpu", 0.008, 0.018, 2700.0),
                               rows_per_flush(plan))


@pytest.mark.gpu
def test_a_block_store_gets_the_hot_segment_of_its_data(tmp_path):
    """The store's meta holds the whole data's frequencies: the same H and replicas as the data set
    (none for a sync plan with resident chunks)."""
    from alac.data.synthetic import criteo_like
    from alac.runtime.movement.block_store import synthetic_pieces, write_block_store
    from alac.runtime.movement.layout import LayoutOptions
    from alac.runtime.planning.planner import hot_segment_for_data

    store = write_block_store(tmp_path / "store", synthetic_pieces(20_000, 7_000, n_fields=8, seed=2, device="cuda"),
                              LayoutOptions(chunk_size=32), 2, 200_000, device="cuda")
    data = criteo_like(20_000, n_fields=8, seed=2, device="cuda")
    for plan in (Plan(semantics="async", chunk_size=32, batch_size=64),
                 Plan(semantics="sync", chunk_size=32, batch_size=64, resident_tiles=False)):
        from_store = hot_segment_for_data(store, plan, "cuda")
        assert from_store == hot_segment_for_data(data, plan, "cuda") and from_store.hot_size > 0
    assert hot_segment_for_data(store, Plan(chunk_size=32, batch_size=64), "cuda").hot_size == 0
    store.close()
