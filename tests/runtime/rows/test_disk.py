"""Rows on disk: a model over both the GPU and the host memory budget trains from memory-mapped files
behind the HybridHash cache exactly as one table in memory does (the same batches, the same
parameters), its files live only while the store does, and a checkpoint of it predicts as it does."""

import os
import subprocess
import sys

import numpy as np
import pytest
import torch

from alac.data.synthetic import criteo_like
from alac.plan import Plan
from alac.runtime.planning.param_planner import choose_placement
from alac.runtime.rows.disk import FOLDER_NAME, DiskRows, rows_folder
from alac.train.trainer import Trainer
from tests.zoo_models import ZOO

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def _data():
    data = criteo_like(3000, n_fields=5, seed=4, device="cpu")
    return data.take(torch.arange(2500)), data.take(torch.arange(2500, 3000))


def _trainer(device, tmp_path, host_budget=None, gpu_budget=250_000, epochs=2):
    plan = Plan(chunk_size=8, batch_size=32, memory_budget=gpu_budget, host_memory_budget=host_budget,
                rows_folder=str(tmp_path), param_mode="hybrid_hash")
    backend = "reference" if device == "cpu" else "triton"
    return Trainer(ZOO["fm"](), lr=0.3, epochs=epochs, plan=plan, backend=backend, device=device, seed=1,
                   optimizer="adagrad")


def test_rows_over_the_host_budget_are_placed_on_disk():
    placement = choose_placement(1000, 40, 20_000, torch.ones(1000), 10, 100, host_budget_bytes=39_999)
    assert placement.mode == "disk" and placement.shape is not None
    assert "host memory budget" in placement.lines()[0]
    assert choose_placement(1000, 40, 20_000, torch.ones(1000), 10, 100, host_budget_bytes=40_000).mode == \
        "hybrid_hash"
    # rows that fit the GPU stay there whatever the host budget
    assert choose_placement(1000, 40, 40_000, torch.ones(1000), 10, 100, host_budget_bytes=1).mode == "device"


@pytest.mark.parametrize("device", DEVICES)
def test_a_model_on_disk_trains_as_the_same_cache_over_host_memory_does(device, tmp_path):
    train, valid = _data()
    on_disk, in_memory = _trainer(device, tmp_path, host_budget=100_000), _trainer(device, tmp_path)
    on_disk.fit(train, valid)
    in_memory.fit(train, valid)
    assert isinstance(on_disk.executor, DiskRows) and on_disk.placement.mode == "disk"
    assert in_memory.placement.mode == "hybrid_hash"
    files = list(on_disk.executor.whole.folder.glob("*.npy"))
    assert sorted(f.name for f in files) == ["v.npy", "v_accumulator.npy", "w.npy", "w_accumulator.npy"]
    assert isinstance(np.load(files[0], mmap_mode="r"), np.memmap)
    # the same batches through the same cache: the same parameters (bit for bit on the CPU)
    exact = dict(rtol=0, atol=0) if device == "cpu" else dict(rtol=1e-5, atol=1e-6)
    for mine, theirs in zip(on_disk.history, in_memory.history):
        assert mine["train_loss"] == pytest.approx(theirs["train_loss"], **({"rel": 1e-5} if device != "cpu" else {}))
        assert mine["hit_ratio"] == theirs["hit_ratio"]
    (params, globals_), (expected, expected_globals) = on_disk.parameters(), in_memory.parameters()
    for name, values in expected.items():
        torch.testing.assert_close(torch.from_numpy(params[name]), torch.from_numpy(values), **exact)
    assert globals_ == pytest.approx(expected_globals, rel=1e-6)
    torch.testing.assert_close(on_disk.predict(valid), in_memory.predict(valid), rtol=1e-5, atol=1e-6)
    assert on_disk.executor.statistics.rows_in == in_memory.executor.statistics.rows_in


def test_a_checkpoint_of_a_model_on_disk_predicts_as_it_does(tmp_path):
    from alac.train import checkpoint

    train, valid = _data()
    trainer = _trainer("cpu", tmp_path / "rows", host_budget=100_000, epochs=1)
    trainer.fit(train)
    checkpoint.save(trainer, tmp_path / "model.alac", {"model": "fm", "arguments": {}})
    loaded = checkpoint.load(tmp_path / "model.alac", ZOO["fm"](), backend="reference", device="cpu")
    torch.testing.assert_close(loaded.predict(valid), trainer.predict(valid), rtol=1e-6, atol=1e-7)
    # a restored state goes into new files; the cache starts empty and trains on
    trainer.executor.state = loaded.executor.state
    torch.testing.assert_close(trainer.predict(valid), loaded.predict(valid), rtol=1e-6, atol=1e-7)
    trainer.fit(train, epochs=1)
    assert trainer.epoch == 2


@pytest.mark.parametrize("host_budget,kind", [(None, "hybrid_hash"), (100_000, "disk")])
def test_a_resumed_checkpoint_trains_on_in_the_store_its_plan_places_it_in(tmp_path, host_budget, kind):
    """One epoch, a checkpoint, a restore and one more epoch: the rows go back behind the cache (or onto
    disk), not into one table, and end as two epochs straight through end (the same batches)."""
    from alac.train import checkpoint

    train, valid = _data()
    straight = _trainer("cpu", tmp_path / "a", host_budget=host_budget)
    straight.fit(train)
    first = _trainer("cpu", tmp_path / "b", host_budget=host_budget, epochs=1)
    first.fit(train)
    checkpoint.save(first, tmp_path / "model.alac", {"model": "fm", "arguments": {}})
    resumed = checkpoint.load(tmp_path / "model.alac", ZOO["fm"](), backend="reference", device="cpu")
    assert resumed.executor.kind == "device"        # predicting needs no store
    resumed.fit(train, epochs=1)
    assert resumed.executor.kind == kind and resumed.placement.mode == kind and resumed.epoch == 2
    assert resumed.history[-1]["train_loss"] == straight.history[-1]["train_loss"]
    (params, _), (expected, _) = resumed.parameters(), straight.parameters()
    for name, values in expected.items():
        torch.testing.assert_close(torch.from_numpy(params[name]), torch.from_numpy(values), rtol=0, atol=0)


def test_the_files_live_while_the_store_does_and_a_dead_runs_are_removed(tmp_path):
    train, _ = _data()
    trainer = _trainer("cpu", tmp_path, host_budget=100_000, epochs=1)
    trainer.fit(train)
    folder = trainer.executor.whole.folder
    assert folder.parent == tmp_path and folder.is_dir()
    del trainer
    import gc

    gc.collect()
    assert not folder.exists()
    # a folder left by a process that died (kill -9) is removed by the next store's
    code = (f"import os, sys; sys.path.insert(0, {os.getcwd()!r}); from alac.runtime.rows.disk import rows_folder; "
            f"print(rows_folder({str(tmp_path)!r})); os._exit(0)")
    left = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert os.path.isdir(left)
    mine = rows_folder(tmp_path)
    assert not os.path.exists(left) and mine.is_dir() and mine.name.startswith(f".{FOLDER_NAME}.")
