"""alac.train.table_memory: tables over the GPU budget live in host memory with the most-read rows
cached (alac.nn.host_cached), and a fit over them trains, validates, checkpoints and predicts as the
fit whose tables are all on the device."""

import pytest
import torch

from alac.data.synthetic import criteo_like
from alac.errors import OptionError
from alac.train.deep import DeepSettings, DeepTrainer
from alac.train.deep_ranks import table_row_bytes
from alac.train.table_memory import SLOT_BYTES, plan_table_memory

N_FIELDS = 6


def test_tables_within_the_budget_stay_whole_and_larger_ones_cache_their_most_read_rows():
    indices = torch.tensor([4, 4, 4, 1, 1, 7, 0])
    assert plan_table_memory(indices, 100, 100, 5, None, "cpu").hot is None      # no GPU: no budget applies
    assert plan_table_memory(indices, 100, 100, 5, 10_000, "cpu").hot is None
    # each cached row takes twice its bytes (its gradient buffer), the staging slots of a step the same
    budget = SLOT_BYTES * 100 + 2 * 100 * (5 + 2)
    plan = plan_table_memory(indices, 100, 100, 5, budget, "cpu")
    assert plan.hot.tolist() == [4, 1] and plan.staging_rows == 5
    assert "71.4% of the training entries" in plan.describe()
    assert plan_table_memory(None, 100, 100, 5, budget, "cpu").hot.tolist() == [0, 1]
    with pytest.raises(OptionError, match="cannot hold the host tables' cache"):
        plan_table_memory(indices, 100, 100, 5, budget // 2, "cpu")


def _data(rows, seed):
    return criteo_like(rows, n_fields=N_FIELDS, seed=seed, model="fm", k=4, device="cpu")


# on a GPU the steps replay from CUDA graphs, the staged rows' slots found without a host read
DEVICES = ["cpu", "cuda"] if torch.cuda.is_available() else ["cpu"]


@pytest.mark.parametrize("device", DEVICES)
def test_a_fit_over_host_tables_is_the_fit_over_device_tables(tmp_path, device):
    train, valid = _data(600, 1), _data(200, 2)
    settings = DeepSettings(model="deepfm", k=4, hidden=(8,), epochs=3, batch_size=64, patience=3)
    whole = DeepTrainer(settings, device=device)
    whole.fit(train, valid)
    row_bytes = table_row_bytes(settings, N_FIELDS)
    # room for a third of the rows beside the slot map and one step's staging slots
    budget = SLOT_BYTES * train.n_features + 2 * row_bytes * (64 * N_FIELDS + train.n_features // 3)
    cached = DeepTrainer(DeepSettings(**{**settings.__dict__, "gpu_memory": budget}), device=device)
    told = []
    cached.say = told.append
    cached.fit(train, valid)
    assert told and told[0].startswith(f"tables in host memory, {train.n_features // 3:,} rows cached on the GPU")
    assert 0 < cached.network.tables.capacity < train.n_features and cached.network.tables.staged_rows > 0
    for ours, theirs in zip(cached.history, whole.history):
        for key in ("train_loss", "valid_logloss", "valid_auc"):
            assert ours[key] == pytest.approx(theirs[key], rel=1e-5)
    torch.testing.assert_close(cached.predict(valid), whole.predict(valid), rtol=1e-5, atol=1e-6)
    # the checkpoint holds whole tables: loaded, its model caches other rows (no counts) and predicts the same
    torch.save(cached.checkpoint(), tmp_path / "model.pt")
    loaded = DeepTrainer.load(tmp_path / "model.pt", device=device)
    assert loaded.network.tables.capacity == cached.network.tables.capacity
    torch.testing.assert_close(loaded.predict(valid), whole.predict(valid), rtol=1e-5, atol=1e-6)
    # and tables with every row on the device take its weights as they are
    whole.network.load_state_dict(cached.network.state_dict())
    torch.testing.assert_close(whole.predict(valid), cached.predict(valid))


def test_a_gpu_budget_is_a_positive_number_of_bytes():
    with pytest.raises(OptionError, match="gpu_memory is a number of bytes"):
        DeepSettings(gpu_memory=0)
