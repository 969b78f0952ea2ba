"""alac.train.deep_steps' streamed training rows: an epoch's parts, taken from host memory in the
epoch's order, are whole steps, so a fit over them is the fit over the rows on the device."""

import pytest
import torch

from alac.data.synthetic import criteo_like
from alac.errors import OptionError
from alac.train import deep_steps
from alac.train.deep import DeepSettings, DeepTrainer
from alac.train.deep_steps import dataset_bytes, epoch_parts, part_rows

DEVICES = ["cpu", "cuda"] if torch.cuda.is_available() else ["cpu"]


def _data(rows, seed):
    return criteo_like(rows, n_fields=6, seed=seed, model="fm", k=4, device="cpu")


def test_parts_are_whole_steps_of_about_part_bytes(monkeypatch):
    data = _data(1000, 0)
    assert part_rows(data, 64, "cpu") is None and part_rows(data, 64, "cpu", stream=False) is None
    monkeypatch.setattr(deep_steps, "PART_BYTES", dataset_bytes(data) // 4)
    assert part_rows(data, 64, "cpu", stream=True) == 192        # 250 rows' bytes: three steps of 64
    assert part_rows(data, 512, "cpu", stream=True) == 512       # at least one step
    order = torch.randperm(1000, generator=torch.Generator().manual_seed(0))
    parts = list(epoch_parts(data, order, 192))
    assert [p.n_rows for p in parts] == [192] * 5 + [40]
    whole = data.take(order)
    assert torch.equal(torch.cat([p.indices for p in parts]), whole.indices)
    assert torch.equal(torch.cat([p.labels for p in parts]), whole.labels)
    if torch.cuda.is_available():
        with pytest.raises(OptionError, match="from host memory"):
            part_rows(data.to("cuda"), 64, "cuda", stream=True)


@pytest.mark.parametrize("device", DEVICES)
def test_a_fit_over_streamed_rows_is_the_fit_over_rows_on_the_device(monkeypatch, device):
    train, valid = _data(700, 1), _data(200, 2)
    settings = DeepSettings(model="deepfm", k=4, hidden=(8,), epochs=2, batch_size=64, patience=2)
    resident = DeepTrainer(settings, device=device)
    resident.fit(train, valid)
    # parts of three steps, the epoch's last part short
    monkeypatch.setattr(deep_steps, "PART_BYTES", dataset_bytes(train) * 200 // 700)
    streamed = DeepTrainer(DeepSettings(**{**settings.__dict__, "stream_data": True}), device=device)
    streamed.fit(train, valid)
    assert streamed._part_rows == 192
    for ours, theirs in zip(streamed.history, resident.history):
        for key in ("train_loss", "valid_logloss", "valid_auc"):
            assert ours[key] == pytest.approx(theirs[key], rel=1e-6)
    torch.testing.assert_close(streamed.predict(valid), resident.predict(valid), rtol=1e-5, atol=1e-6)
