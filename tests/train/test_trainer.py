import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch

from alac import DataError
from alac.data.arrays import from_csr_arrays
from alac.data.synthetic import criteo_like
from alac.models import zoo_model, zoo_module
from alac.plan import Plan
from alac.train import checkpoint
from alac.train.checkpoint import CheckpointError
from alac.train.trainer import Trainer, TrainingDiverged

ROOT = Path(__file__).resolve().parents[2]


def _lr():
    return zoo_model("lr")


def _data(rows=3000, seed=0):
    return criteo_like(rows, seed=seed, device="cpu")


def _trainer(**options):
    # on the CPU on every machine: the tests compare states bit for bit, and the reference executor's
    # index_add_ sums in a different order every run on a GPU
    return Trainer(_lr(), lr=1.0, plan=Plan(chunk_size=16, batch_size=256), backend="reference", device="cpu",
                   **options)


def _states_equal(a, b):
    return all(torch.equal(a.params[k], b.params[k]) for k in a.params) and all(
        torch.equal(a.globals[k], b.globals[k]) for k in a.globals) and all(
        torch.equal(a.states[k], b.states[k]) for k in a.states)


@pytest.mark.parametrize("optimizer", ["sgd", "adagrad"])
def test_resume_from_a_checkpoint_continues_exactly(tmp_path, optimizer):
    data = _data()
    straight = _trainer(optimizer=optimizer)
    straight.fit(data, epochs=4)
    first = _trainer(optimizer=optimizer)
    first.fit(data, epochs=2)
    checkpoint.save(first, tmp_path / "model.alac", {"model": "lr", "arguments": {}})
    resumed = checkpoint.load(tmp_path / "model.alac", _lr(), backend="reference", device="cpu")
    assert resumed.epoch == 2
    resumed.fit(data, epochs=2)
    assert resumed.epoch == 4 and _states_equal(resumed.executor.state, straight.executor.state)


def test_a_killed_checkpoint_write_leaves_the_previous_one(tmp_path):
    """The child saves checkpoint A, then starts saving B and is killed in the middle of writing it."""
    script = tmp_path / "writer.py"
    script.write_text(textwrap.dedent(f"""
        import sys, time, torch
        sys.path.insert(0, {str(ROOT)!r})
        from alac.train import checkpoint
        from alac.data.synthetic import criteo_like
        from alac.plan import Plan
        from alac.train.trainer import Trainer
        from alac.models import zoo_model
        trainer = Trainer(zoo_model("lr"), lr=1.0, plan=Plan(chunk_size=16, batch_size=256),
                          backend="reference")
        data = criteo_like(2000, device="cpu")
        trainer.fit(data, epochs=1)
        checkpoint.save(trainer, {str(tmp_path / 'model.alac')!r}, {{"model": "lr", "arguments": {{}}}})
        trainer.fit(data, epochs=1)
        real_save = torch.save
        def slow_save(payload, handle):
            handle.write(b"PK\\x03\\x04 half a checkpoint")
            handle.flush()
            print("writing", flush=True)
            time.sleep(60)
        torch.save = slow_save
        checkpoint.save(trainer, {str(tmp_path / 'model.alac')!r}, {{"model": "lr", "arguments": {{}}}})
    """))
    child = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline().strip() == "writing"
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    trainer = checkpoint.load(tmp_path / "model.alac", _lr(), backend="reference")
    assert trainer.epoch == 1
    trainer.fit(_data(2000), epochs=1)
    assert trainer.epoch == 2 and all(torch.isfinite(v).all() for v in trainer.executor.state.params.values())


def test_bad_checkpoints_are_clear_errors(tmp_path):
    with pytest.raises(CheckpointError, match="no checkpoint there"):
        checkpoint.read(tmp_path / "nothing.alac")
    (tmp_path / "junk.alac").write_bytes(b"not a zip")
    with pytest.raises(CheckpointError, match="not a readable checkpoint"):
        checkpoint.read(tmp_path / "junk.alac")
    trainer = _trainer()
    trainer.fit(_data(500), epochs=1)
    checkpoint.save(trainer, tmp_path / "model.alac", {"model": "lr", "arguments": {}})
    payload = torch.load(tmp_path / "model.alac", weights_only=False)
    payload["version"] = 99
    torch.save(payload, tmp_path / "future.alac")
    with pytest.raises(CheckpointError, match="version 99 is not supported"):
        checkpoint.read(tmp_path / "future.alac")
    with pytest.raises(CheckpointError, match="compiles differently"):
        checkpoint.load(tmp_path / "model.alac", zoo_module("lsvm").MODEL(), backend="reference")


def test_patience_restores_the_best_epoch():
    train, valid = _data(2000, 0), _data(2000, 0).take(torch.arange(1000))
    trainer = _trainer(early_stopping="patience", patience=2)
    losses = iter([0.5, 0.4, 0.45, 0.46, 0.3])
    trainer.monitored = lambda record: next(losses)
    snapshots = []
    trainer.callbacks.append(lambda t, record: snapshots.append(t.executor.state.clone()))
    trainer.fit(train, valid, epochs=5)
    assert len(trainer.history) == 4 and trainer.stopped_because == "early stopping (patience)"
    # the best epoch's parameters come back with its counters: a resumed run continues from there
    assert trainer.best_epoch == trainer.epoch == 2 and _states_equal(trainer.executor.state, snapshots[1])
    assert trainer.executor.batches_done == 2 * -(-2000 // 256)


def test_cuwide_rule_stops_above_the_window_mean():
    trainer = _trainer(early_stopping="cuwide", window=3)
    assert not trainer._should_stop([1.0, 0.9, 0.8, 0.79], 3)
    assert trainer._should_stop([1.0, 0.9, 0.8, 0.95], 2)      # 0.95 > 0.9, the mean of the 3 before
    assert not trainer._should_stop([0.9, 0.8], 1)              # not enough epochs yet


def _count_queued_epochs(monkeypatch, trainer):
    """The epochs of each group the trainer queues at once (one loss read per group)."""
    import alac.train.trainer as train

    counts = []
    queue = train.runner.train_epochs

    def counting(store, layout, labels, first_epoch, count, lr, progress=None):
        if store is trainer.executor:
            counts.append(count)
        return queue(store, layout, labels, first_epoch, count, lr, progress)

    monkeypatch.setattr(train.runner, "train_epochs", counting)
    return counts


def test_fit_queues_epochs_and_trains_as_one_at_a_time(monkeypatch):
    """With nothing to evaluate between epochs, fit queues them (one loss read per group); the losses
    and parameters are those of epochs run one at a time (a callback forces that)."""
    import alac.train.trainer as train

    monkeypatch.setattr(train, "QUEUE_SECONDS", 1e9)
    data = _data(2000)
    queued, single = _trainer(), _trainer(callbacks=[lambda trainer, record: False])
    counts = _count_queued_epochs(monkeypatch, queued)
    queued.fit(data, epochs=7)
    single.fit(data, epochs=7)
    assert counts == [1, 6]
    assert [r["train_loss"] for r in queued.history] == [r["train_loss"] for r in single.history]
    assert [r["epoch"] for r in queued.history] == list(range(1, 8))
    for name, value in single.executor.state.params.items():
        assert torch.equal(queued.executor.state.params[name], value)


def test_fit_again_on_the_same_data_keeps_its_layout_and_trains_as_one_call():
    """Training continued by a second fit call on the same data set object reuses its layout (no
    second copy of the data on the device) and gives the states of one call of all the epochs; another
    data set object gets its own layout."""
    data = _data(2000)
    twice, once = _trainer(), _trainer()
    twice.fit(data, epochs=2)
    first_layout = twice.train_layout
    twice.fit(data, epochs=3)
    once.fit(data, epochs=5)
    assert twice.train_layout is first_layout
    assert [r["train_loss"] for r in twice.history] == [r["train_loss"] for r in once.history]
    assert _states_equal(twice.executor.state, once.executor.state)
    other = _data(2000, seed=1)
    twice.fit(other, epochs=1)
    assert twice.train_layout is not first_layout and twice.train_layout.n_rows == 2000


def test_a_divergence_inside_a_queued_group_restores_the_group_start(monkeypatch):
    """Two good epochs, then five queued at once at a learning rate that diverges: the parameters
    of epoch 2, where the group started, come back."""
    monkeypatch.setattr(Trainer, "_group_size", staticmethod(lambda grouped, remaining, seconds: remaining))
    data = _data(2000)
    trainer = Trainer(zoo_module("lsr").MODEL(), lr=0.01, plan=Plan(chunk_size=16, batch_size=256),
                      backend="reference")
    trainer.fit(data, epochs=2)
    start = trainer.executor.state.clone()
    trainer.lr = 1e6
    counts = _count_queued_epochs(monkeypatch, trainer)
    with pytest.raises(TrainingDiverged, match="diverged in epoch [3-7] .*epoch 2's parameters are restored"):
        trainer.fit(data, epochs=5)
    assert counts == [5]
    for name, value in start.params.items():
        assert torch.equal(trainer.executor.state.params[name], value)


def test_divergence_restores_the_last_good_parameters():
    data = _data(2000)
    trainer = Trainer(zoo_module("lsr").MODEL(), lr=1e6, plan=Plan(chunk_size=16, batch_size=256),
                      backend="reference")
    with pytest.raises(TrainingDiverged, match="diverged in epoch"):
        trainer.fit(data, epochs=5)
    assert trainer.stopped_because == "diverged"
    assert all(torch.isfinite(v).all() for v in trainer.executor.state.params.values())


def test_unseen_features_are_ignored_and_counted(capsys):
    train = from_csr_arrays(np.array([0, 2, 4]), np.array([0, 1, 1, 2]), None, np.array([1.0, 0.0]), 3)
    test = from_csr_arrays(np.array([0, 2, 3]), np.array([0, 5, 7]), None, np.array([1.0, 0.0]), 8)
    trainer = _trainer()
    trainer.fit(train, epochs=1)
    predictions = trainer.predict(test)
    assert predictions.shape == (2,) and trainer.unseen_entries == 2
    assert "2 entries" in capsys.readouterr().err
    expected = trainer.predict(from_csr_arrays(np.array([0, 1, 1]), np.array([0]), None, np.array([1.0, 0.0]), 3))
    assert torch.allclose(predictions, expected)
    strict = _trainer(unseen="error")
    strict.fit(train, epochs=1)
    with pytest.raises(DataError, match="outside the training feature space"):
        strict.predict(test)
