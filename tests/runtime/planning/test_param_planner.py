"""The placement planner: every row on the GPU when the rows fit the budget, else a HybridHash cache
whose forecast (hit ratio, rows moved) matches closed forms and what the cache itself counts; and a
Trainer over its budget training through the cache as one table does."""

import dataclasses
import math

import pytest
import torch

from alac.data.synthetic import criteo_like, kaggle_like
from alac.errors import OptionError
from alac.plan import Plan
from alac.runtime.execution.executor import LabelMap
from alac.runtime.movement.layout import LayoutOptions, build_layout
from alac.runtime.planning.param_planner import (
    BOOKKEEPING_NS_PER_EDGE,
    RERANK_SECONDS,
    SEGMENT_SECONDS,
    cache_shape_for,
    choose_placement,
    forecast_cache,
)
from alac.runtime.rows.cached_executor import CachedExecutor
from alac.runtime.rows.hybrid_hash import CacheShape, working_plan
from alac.train.trainer import Trainer
from tests.runtime.rows.test_hybrid_hash import _cache
from tests.zoo_models import ZOO


def test_the_forecast_of_a_toy_table_is_its_closed_form():
    frequency = torch.tensor([1.0, 10.0, 5.0, 2.0])
    shape = CacheShape(capacity=2, staging=100, refresh=16)
    forecast = forecast_cache(frequency, shape, batches=8, row_bytes=8, costs=None)
    assert forecast.hit_ratio == pytest.approx(15 / 18)
    # the staging half reaches past a quarter of the re-rank period: segments of 16 / 4 batches
    assert forecast.segments == pytest.approx(2)
    assert forecast.rows_moved == pytest.approx(sum(2 * (1 - math.exp(-f / 2)) for f in (2.0, 1.0)))
    assert forecast.epoch_seconds is None
    # each re-rank (8 / 16 per epoch) stalls the kernels; with every multiprocessor training they
    # leave the bookkeeping (and row traffic) after them
    bookkeeping = 18 * BOOKKEEPING_NS_PER_EDGE * 1e-9 + 2 * SEGMENT_SECONDS
    assert forecast.bookkeeping_seconds == pytest.approx(bookkeeping) and forecast.reranks == 0.5
    assert forecast.with_bookkeeping(2.0, 1e-3).bookkeeping_seconds == pytest.approx(18 * 2e-9 + 2 * 1e-3)
    serial = dataclasses.replace(forecast, kernel_seconds=1.0)
    assert not serial.overlapped and serial.epoch_seconds == pytest.approx(1.0 + bookkeeping + 0.5 * RERANK_SECONDS)
    # kernels leaving multiprocessors to the side stream overlap it: the longer of the two, when cheaper
    overlapped = dataclasses.replace(forecast, kernel_seconds=1.0, side_kernel_seconds=1.0 + bookkeeping / 2)
    assert overlapped.overlapped
    assert overlapped.epoch_seconds == pytest.approx(1.0 + bookkeeping / 2 + 0.5 * RERANK_SECONDS)
    slow = dataclasses.replace(forecast, kernel_seconds=1.0, side_kernel_seconds=1.0 + 2 * bookkeeping)
    assert not slow.overlapped and slow.epoch_seconds == serial.epoch_seconds
    short = dataclasses.replace(forecast, kernel_seconds=1e-9, side_kernel_seconds=2e-9)
    assert short.overlapped and short.epoch_seconds == pytest.approx(bookkeeping + 0.5 * RERANK_SECONDS)
    # row traffic timed on the cache's moves; when overlapped, a re-rank also waits for a segment's traffic
    moved = overlapped.with_row_moves(1e-3)
    traffic = forecast.rows_moved * 1e-3
    assert moved.traffic_seconds == pytest.approx(traffic) and moved.overlapped
    assert moved.epoch_seconds == pytest.approx(1.0 + bookkeeping / 2 + 0.5 * (RERANK_SECONDS + traffic / 2))


def test_rows_fit_the_budget_stay_on_the_device_and_a_batch_must_fit_the_cache():
    placement = choose_placement(1000, 40, 40_000, torch.ones(1000), 10, 100)
    assert placement.mode == "device" and placement.shape is None
    placement = choose_placement(1000, 40, 39_960, torch.ones(1000), 10, 100)
    assert placement.mode == "hybrid_hash" and placement.shape.rows == 999 and placement.shape.staging == 249
    assert any("hybrid_hash" in line for line in placement.lines())
    # a staging half holds a batch's rows at least
    assert cache_shape_for(8040, 40, 100) == CacheShape(capacity=1, staging=200)
    with pytest.raises(OptionError, match="two batches"):
        cache_shape_for(8000, 40, 100)
    # the kernels' per-row buffers share the budget: rows that fit alone no longer do, the cache is
    # sized by both, and the host table and row traffic by the row alone
    placement = choose_placement(1000, 40, 40_000, torch.ones(1000), 10, 100, kernel_row_bytes=40)
    assert placement.mode == "hybrid_hash" and placement.shape.rows == 500 and placement.table_bytes == 40_000
    assert any("40 of the kernels' buffers" in line for line in placement.lines())


def test_the_kernels_per_row_buffers_are_a_sync_plans_gradient_sums():
    """A sync plan whose optimizer is not additive sums each row's gradient and flags touched rows (one
    float per value of every param, one int per row); additive sync edge updates and async plans keep
    none per row."""
    pytest.importorskip("triton")
    from alac.codegen import allocated_row_bytes, generate_kernels
    from alac.ir.pipeline import lower
    from alac.models import zoo_model

    for k in (4, 64):
        ir = lower(zoo_model("fm", k=k), "adagrad")
        assert allocated_row_bytes(generate_kernels(ir, Plan()).manifest, k) == 4 + 4 + 4 * k
        assert allocated_row_bytes(generate_kernels(ir, Plan(semantics="async")).manifest, k) == 0
    assert allocated_row_bytes(generate_kernels(lower(zoo_model("fm", k=4), "sgd"), Plan()).manifest, 4) == 0


def test_the_forecast_matches_what_the_cache_counts_on_zipf_ids():
    """Rows loaded per epoch and the hit ratio after the warm-up: the forecast against a cache run."""
    data = kaggle_like(6000, zipf=1.2, seed=3, device="cpu")
    layout = build_layout(data, LayoutOptions(chunk_size=16), "cpu")
    labels = LabelMap.fit("binary", data.labels).model_labels(layout.labels)
    plan = Plan(chunk_size=16, batch_size=64)
    shape = CacheShape(capacity=3000, staging=3000, warmup=0, refresh=20)
    cache, _ = _cache("lr", plan, "cpu", "reference", shape, host=False)
    cache.initialize(layout, 1.0)
    cache.refresh = lambda: None          # the store is ranked once, from the exact counts below
    cache.counts.copy_(layout.frequency.int())
    type(cache).refresh(cache)
    cache.train_epoch(layout, labels, 0, 0.1)
    batches = -(-layout.n_chunks // plan.chunks_per_batch)
    forecast = forecast_cache(layout.frequency, shape, batches, 8, None)
    loaded = cache.statistics.rows_in - shape.capacity
    assert loaded == pytest.approx(forecast.rows_moved, rel=0.25)
    hit = sum(cache.statistics.hit_ratio) / len(cache.statistics.hit_ratio)
    assert hit == pytest.approx(forecast.hit_ratio, abs=0.02)


def test_a_trainer_over_its_gpu_budget_trains_through_a_cache_as_one_table_does():
    data = criteo_like(3000, n_fields=5, seed=4, device="cpu")
    train, valid = data.take(torch.arange(2500)), data.take(torch.arange(2500, 3000))

    def trainer(budget):
        plan = Plan(chunk_size=8, batch_size=32, memory_budget=budget)
        return Trainer(ZOO["fm"](), lr=0.3, epochs=2, plan=plan, backend="reference", device="cpu", seed=1,
                       optimizer="adagrad")

    # the layout (about 90 KB) fits; the 36,760 rows of 28 bytes do not fit what it leaves
    cached, plain = trainer(250_000), trainer(None)
    cached.fit(train, valid)
    plain.fit(train, valid)
    assert isinstance(cached.executor, CachedExecutor) and cached.placement.mode == "hybrid_hash"
    assert plain.placement.mode == "device"
    assert cached.placement.forecast.kernel_seconds > 0
    assert 0 < sum(cached.executor.statistics.hit_ratio) / len(cached.executor.statistics.hit_ratio) < 1
    for mine, theirs in zip(cached.history, plain.history):
        assert mine["train_loss"] == pytest.approx(theirs["train_loss"], rel=1e-5)
        assert mine["valid_logloss"] == pytest.approx(theirs["valid_logloss"], rel=1e-5)
    (params, globals_), (expected, expected_globals) = cached.parameters(), plain.parameters()
    for name, values in expected.items():
        torch.testing.assert_close(torch.from_numpy(params[name]), torch.from_numpy(values), rtol=1e-5, atol=1e-7)
    assert globals_ == pytest.approx(expected_globals, rel=1e-5)
    torch.testing.assert_close(cached.predict(valid), plain.predict(valid), rtol=1e-5, atol=1e-7)


def test_a_cached_model_too_large_to_snapshot_keeps_its_last_parameters_when_it_diverges(monkeypatch, capsys):
    import alac.train.trainer
    from alac.train.trainer import TrainingDiverged

    monkeypatch.setattr(alac.train.trainer, "available_bytes", lambda device: 1000)
    data = criteo_like(3000, n_fields=5, seed=4, device="cpu")
    plan = Plan(chunk_size=8, batch_size=32, memory_budget=250_000)
    trainer = Trainer(ZOO["fm"](), lr=1e6, epochs=3, plan=plan, backend="reference", device="cpu", seed=1,
                      optimizer="sgd")
    with pytest.raises(TrainingDiverged, match="too large to snapshot in host memory: its last parameters are kept"):
        trainer.fit(data)
    assert "too large to snapshot" in capsys.readouterr().err
    assert isinstance(trainer.executor, CachedExecutor) and trainer.executor.state is not None


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_a_checkpoint_of_a_model_over_its_gpu_budget_predicts_from_host_memory(tmp_path):
    from alac.train import checkpoint

    data = criteo_like(3000, n_fields=5, seed=4, device="cpu")
    plan = Plan(chunk_size=8, batch_size=32, memory_budget=250_000, param_mode="hybrid_hash")
    trainer = Trainer(ZOO["fm"](), lr=0.3, epochs=1, plan=plan, seed=1, optimizer="adagrad")
    trainer.fit(data)
    assert isinstance(trainer.executor, CachedExecutor)
    checkpoint.save(trainer, tmp_path / "model.alac", {"model": "fm", "arguments": {}})
    loaded = checkpoint.load(tmp_path / "model.alac", ZOO["fm"]())
    assert sorted(loaded.executor.plan.host_params) == ["v", "w"]
    assert all(not v.is_cuda for v in loaded.executor.state.params.values())
    torch.testing.assert_close(loaded.predict(data), trainer.predict(data), rtol=1e-5, atol=1e-6)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_a_sync_cache_times_its_kernels_both_ways_and_trains_on_the_cheaper():
    data = criteo_like(3000, n_fields=5, seed=4, device="cpu")
    plan = Plan(chunk_size=8, batch_size=32, memory_budget=250_000, semantics="sync", param_mode="hybrid_hash")
    trainer = Trainer(ZOO["fm"](), lr=0.3, epochs=1, plan=plan, seed=1, optimizer="adagrad")
    trainer.fit(data)
    forecast, working = trainer.placement.forecast, trainer.executor.working
    assert forecast.kernel_seconds > 0 and forecast.side_kernel_seconds > 0
    # the bookkeeping's per-edge cost timed on the cache replaced the constant's
    assert forecast.bookkeeping_seconds != pytest.approx(
        forecast.edges * BOOKKEEPING_NS_PER_EDGE * 1e-9 + forecast.segments * SEGMENT_SECONDS)
    side = working_plan(plan, working.device).programs
    assert working.plan.programs == (side if forecast.overlapped else None)
    assert forecast.epoch_seconds == min(forecast.serial_seconds, forecast.overlapped_seconds)
