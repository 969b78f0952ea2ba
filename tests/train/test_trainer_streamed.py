"""The Trainer over data larger than its GPU memory budget: streamed blocks from host memory or from
a block store on disk, trained like the resident layout in the same chunk order."""

import argparse

import pytest
import torch

from alac.cli.train import memory_size
from alac.data.synthetic import criteo_like
from alac.models import zoo_model
from alac.plan import Plan
from alac.runtime.execution.executor import Executor, LabelMap
from alac.runtime.movement.block_store import synthetic_pieces, write_block_store
from alac.runtime.movement.layout import LayoutOptions, build_layout
from alac.runtime.movement.streams import StreamedLayout
from alac.runtime.planning.planner import layout_bytes
from alac.train.trainer import Trainer

PLAN = Plan(chunk_size=16, batch_size=256, memory_budget=60_000)


def test_a_layout_over_the_budget_is_streamed_and_trains_as_the_resident_one_in_its_order():
    data = criteo_like(3000, n_fields=6, seed=1, device="cpu")
    assert layout_bytes(data, PLAN.chunk_size) > PLAN.memory_budget
    trainer = Trainer(zoo_model("lr"), lr=1.0, epochs=3, plan=PLAN, backend="reference", device="cpu")
    seen = []
    trainer.block_progress = lambda *progress: seen.append(progress)
    history = trainer.fit(data)
    streamed = trainer.train_layout
    assert isinstance(streamed, StreamedLayout) and len(streamed.blocks) > 3
    blocks = len(streamed.blocks)
    assert [s[:3] for s in seen] == [(epoch, queued, blocks) for epoch in (1, 2, 3) for queued in range(1, blocks + 1)]
    assert history[-1]["train_loss"] < history[0]["train_loss"]
    # the last epoch's per-block losses, in its block order (on a CPU each reaches the host at once):
    # their row-weighted mean is the epoch's loss
    block_losses = trainer.executor.block_losses
    assert [index for index, _ in block_losses] == streamed.block_order(2, 0)
    assert [s[3] for s in seen[-blocks:]] == block_losses
    weighted = sum(loss * streamed.blocks[index].rows for index, loss in block_losses) / data.n_rows
    assert weighted == pytest.approx(history[-1]["train_loss"], rel=1e-5)
    # the same epochs, resident, in the streamed order, by the executor alone
    layout = build_layout(data, LayoutOptions(chunk_size=16), "cpu")
    labels = LabelMap.fit("binary", data.labels).model_labels(layout.labels)
    resident = Executor(zoo_model("lr"), PLAN, backend="reference", device="cpu")
    losses = [resident.train_epoch(layout, labels, epoch, 1.0, streamed.epoch_order(epoch, 0)) for epoch in range(3)]
    assert [r["train_loss"] for r in history] == pytest.approx(losses, rel=1e-5)
    for name, values in resident.state.params.items():
        assert torch.allclose(trainer.executor.state.params[name], values, atol=1e-6), name
    # evaluation and prediction take ordinary data sets in the trained feature space
    assert trainer.evaluate(data)["logloss"] == pytest.approx(history[-1]["train_loss"], abs=0.05)


def test_a_block_store_trains_without_a_data_set_in_memory(tmp_path):
    store = write_block_store(tmp_path / "store", synthetic_pieces(3000, 1000, n_fields=6, seed=1, device="cpu"),
                              LayoutOptions(chunk_size=16), PLAN.chunks_per_batch, 20_000, device="cpu")
    trainer = Trainer(zoo_model("lr"), lr=1.0, epochs=3, plan=Plan(chunk_size=16, batch_size=256),
                      backend="reference", device="cpu")
    history = trainer.fit(store, valid=criteo_like(500, n_fields=6, seed=1, device="cpu", first_row=3000))
    assert history[-1]["valid_logloss"] < history[0]["valid_logloss"]
    assert torch.equal(trainer.feature_order, store.meta.new_to_old)
    store.close()


@pytest.mark.parametrize("text, size", [("8GB", 8 * 10**9), ("8GiB", 8 * 2**30), ("1.5g", int(1.5 * 2**30)),
                                        ("512MB", 512 * 10**6), ("1000", 1000)])
def test_memory_sizes(text, size):
    assert memory_size(text) == size


@pytest.mark.parametrize("text", ["8XB", "GB", "-1GB", "0"])
def test_bad_memory_sizes_are_clear_errors(text):
    with pytest.raises(argparse.ArgumentTypeError, match="memory size|at least 1 byte"):
        memory_size(text)


def test_a_streamed_layout_keeps_the_models_feature_order():
    """A model with a feature order (a resumed checkpoint's, the data-parallel ranks' common one) lays a
    streamed set out in it, not in the set's own frequency order: its parameter rows are in that order."""
    data = criteo_like(3000, n_fields=6, seed=1, device="cpu")
    order = torch.randperm(data.n_features, generator=torch.Generator().manual_seed(0)).int()
    trainer = Trainer(zoo_model("lr"), lr=1.0, epochs=1, plan=PLAN, backend="reference", device="cpu")
    trainer.feature_order = order
    trainer.fit(data)
    assert isinstance(trainer.train_layout, StreamedLayout)
    assert torch.equal(trainer.train_layout.host.new_to_old.cpu(), order)
