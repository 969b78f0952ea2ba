"""FAE as the Trainer's placement of rows over the GPU budget: the planner's choice between FAE and a
HybridHash cache by their forecast row traffic (closed forms), and a Trainer training FAE's pure
batches, its hot inputs those FAE's classifier finds."""

import pytest
import torch

from alac.data.synthetic import criteo_like
from alac.errors import OptionError
from alac.plan import Plan
from alac.runtime.planning.param_planner import FAE_NS_PER_EDGE, FAE_SWAPS, MappedCosts, choose_placement, hot_inputs
from alac.runtime.rows.fae import START_RATE
from alac.runtime.rows.fae_executor import FaeExecutor
from alac.runtime.rows.profiler import classify_inputs
from alac.train.trainer import Trainer
from tests.zoo_models import ZOO

COSTS = MappedCosts("test", gather_gb_per_s=10.0, scatter_gb_per_s=5.0)


def test_fae_is_chosen_when_its_row_traffic_and_pure_batches_cost_less_than_the_caches():
    frequency = torch.ones(1000)
    # every input hot: FAE moves only its swaps' hot rows; the cache moves every row it misses
    placement = choose_placement(1000, 40, 20_000, frequency, 10, 100, COSTS, inputs=lambda hot: (1.0, 0.0))
    assert placement.mode == "fae" and placement.fae.hot_rows == 500
    seconds = FAE_SWAPS * 500 * 40 / 1e9 * (1 / 10 + 1 / 5)
    assert placement.fae.traffic_seconds == pytest.approx(seconds)
    assert any(line.startswith("mode = fae") for line in placement.lines())
    # most inputs cold: every cold edge reads and writes its row in host memory
    placement = choose_placement(1000, 40, 20_000, frequency, 10, 100, COSTS, inputs=lambda hot: (0.1, 1e6))
    assert placement.mode == "hybrid_hash" and placement.fae.cold_edges == 1e6
    assert any(line.startswith("mode = hybrid_hash") for line in placement.lines())
    # FAE's pure batches cost FAE_NS_PER_EDGE an edge: with every input hot over 1e9 edges, the cache
    many = choose_placement(1000, 40, 20_000, torch.full((1000,), 1e6), 10, 100, COSTS, inputs=lambda hot: (1.0, 0.0))
    assert many.fae.overhead_seconds == pytest.approx(1e9 * FAE_NS_PER_EDGE * 1e-9) and many.mode == "hybrid_hash"
    # without measured throughputs the cache, unless the plan asks for FAE
    assert choose_placement(1000, 40, 20_000, frequency, 10, 100, None, lambda hot: (1.0, 0.0)).mode == "hybrid_hash"
    assert choose_placement(1000, 40, 20_000, frequency, 10, 100, None, lambda hot: (0.1, 1e6), "fae").mode == "fae"
    with pytest.raises(OptionError, match="param_mode is auto, hybrid_hash or fae"):
        Plan(param_mode="fast")


def test_hot_inputs_are_the_rows_whose_features_are_all_among_the_most_accessed():
    data = criteo_like(500, n_fields=4, seed=1, device="cpu")
    order = torch.randperm(data.n_features, generator=torch.Generator().manual_seed(0))
    old_to_new = torch.empty_like(order)
    old_to_new[order] = torch.arange(data.n_features)
    # a random tenth of the rows cold: a row of four features is hot about 0.9^4 of the time
    bound = int(0.9 * data.n_features)
    share, cold_edges = hot_inputs(data, old_to_new.int(), bound)
    hot_rows, cold_rows = classify_inputs(data, old_to_new < bound)
    assert share == pytest.approx(hot_rows.numel() / 500) and 0 < share < 1
    assert cold_edges == pytest.approx(float(data.row_lengths()[cold_rows].sum()))
    assert hot_inputs(data, old_to_new.int(), bound, block=7) == (share, cold_edges)     # in blocks of entries


def test_a_trainer_over_its_gpu_budget_trains_faes_pure_batches(tmp_path):
    data = criteo_like(3000, n_fields=5, seed=4, device="cpu")
    train, valid = data.take(torch.arange(2500)), data.take(torch.arange(2500, 3000))

    def trainer(budget, mode="auto"):
        plan = Plan(chunk_size=8, batch_size=32, memory_budget=budget, param_mode=mode)
        return Trainer(ZOO["fm"](), lr=0.3, epochs=3, plan=plan, backend="reference", device="cpu", seed=1,
                       optimizer="adagrad")

    # the layout (about 90 KB) fits; 2,140 of the 3,574 rows the data touch fit what it leaves: half
    # the inputs are hot
    fae, plain = trainer(150_000, "fae"), trainer(None)
    fae.fit(train, valid)
    plain.fit(train, valid)
    executor = fae.executor
    assert isinstance(executor, FaeExecutor) and fae.placement.mode == "fae"
    hot_rows = fae.placement.fae.hot_rows
    assert 0 < hot_rows < train.n_features
    # the hot inputs: FAE's classifier over the layout's hot_rows most frequent features
    layout = fae.train_layout
    hot = torch.zeros(train.n_features, dtype=torch.bool)
    hot[layout.new_to_old[:hot_rows].long()] = True
    hot_rows_of_data, _ = classify_inputs(train, hot)
    assert executor.split.hot_input_share == pytest.approx(hot_rows_of_data.numel() / train.n_rows)
    assert fae.history[-1]["hot_input_share"] == executor.split.hot_input_share
    # the same rows in another order: as good a model, not the same one
    assert 0.3 < executor.split.hot_input_share < 0.7
    for mine, theirs in zip(fae.history, plain.history):
        assert mine["train_loss"] == pytest.approx(theirs["train_loss"], abs=0.005)
        assert mine["train_loss"] != theirs["train_loss"]
    assert fae.history[0]["valid_logloss"] == pytest.approx(plain.history[0]["valid_logloss"], abs=0.005)
    # the schedule steered by the validation loss after every swap: it rose (the model overfits these
    # rows after an epoch), so the rate halved from R(50); without validation rows it stays
    assert fae.history[-1]["fae_rate"] < START_RATE
    unsteered = trainer(150_000, "fae")
    unsteered.fit(train, epochs=1)
    assert unsteered.history[-1]["fae_rate"] == START_RATE
    assert executor.batches_done == 3 * (-(-executor.split.hot.n_chunks // 4) - (-executor.split.cold.n_chunks // 4))
    # a restored state reaches both tables: the predictions it made come back
    snapshot, before = executor.state.clone(), fae.predict(valid)
    fae.fit(train, valid, epochs=1)
    assert not torch.allclose(fae.predict(valid), before)
    executor.state = snapshot
    torch.testing.assert_close(fae.predict(valid), before)
    fae.fit(train, valid, epochs=1)       # and trains on from it
    # a checkpoint holds every row, current: it predicts as the trainer does
    from alac.train import checkpoint

    checkpoint.save(fae, tmp_path / "model.alac", {"model": "fm", "arguments": {}})
    loaded = checkpoint.load(tmp_path / "model.alac", ZOO["fm"](), backend="reference", device="cpu")
    torch.testing.assert_close(loaded.predict(valid), fae.predict(valid), rtol=1e-5, atol=1e-6)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_on_a_gpu_faes_cold_batches_read_the_rows_in_host_memory():
    data = criteo_like(3000, n_fields=5, seed=4, device="cpu")
    train, valid = data.take(torch.arange(2500)), data.take(torch.arange(2500, 3000))
    plan = Plan(chunk_size=8, batch_size=32, memory_budget=150_000, param_mode="fae")
    trainer = Trainer(ZOO["fm"](), lr=0.3, epochs=2, plan=plan, seed=1, optimizer="adagrad")
    trainer.fit(train, valid)
    executor = trainer.executor
    assert isinstance(executor, FaeExecutor) and 0.3 < executor.split.hot_input_share < 0.7
    assert all(not values.is_cuda for values in executor.whole.state.params.values())
    assert all(values.is_cuda for values in executor.working.state.params.values())
    assert trainer.history[0]["valid_logloss"] < 0.65
    assert trainer.predict(valid).shape == (500,)
