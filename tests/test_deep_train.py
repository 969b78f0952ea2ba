"""alac.deep_train.DeepTrainer: one full-batch epoch is the step of a hand-written PyTorch DeepFM (SGD
on dense tables, Adam on the same MLP); training learns a planted model; early stopping keeps the best
epoch; unseen features and fields are left out at prediction; bad input is refused."""

import math
import pickle

import pytest
import torch

from alac.data.dataset import SparseDataset
from alac.data.synthetic import criteo_like
from alac.deep_train import DEEP_MODELS, DeepSettings, DeepTrainer
from alac.errors import DataError, ModelError, OptionError

N_FIELDS = 6


def _data(rows, seed=1):
    return criteo_like(rows, n_fields=N_FIELDS, seed=seed, model="fm", k=4, device="cpu")


def test_one_full_batch_epoch_is_a_hand_written_deepfm_step():
    data = _data(300)
    settings = DeepSettings(model="deepfm", k=4, hidden=(8,), lr=0.5, optimizer="sgd", epochs=1,
                            batch_size=data.n_rows)
    trainer = DeepTrainer(settings, device="cpu")
    torch.manual_seed(settings.seed)
    start = DEEP_MODELS["deepfm"](data.n_features, N_FIELDS, k=4, hidden=(8,), optimizer="sgd", lr=0.5,
                                  seed=settings.seed, device="cpu")
    w = start.tables.w.clone().requires_grad_()
    v = start.tables.v.clone().requires_grad_()
    deep, bias = start.deep, start.bias
    # the trainer starts the bias at the training labels' log-odds
    rate = float((data.labels > 0.5).float().mean())
    with torch.no_grad():
        bias.fill_(math.log(rate / (1 - rate)))
    ids = data.indices.long().view(-1, N_FIELDS)          # one-hot: a feature per field, fields in order
    embeddings = v[ids]
    logit = bias + w[ids].sum(1) + 0.5 * (embeddings.sum(1) ** 2 - (embeddings**2).sum(1)).sum(1) \
        + deep(embeddings.flatten(1)).squeeze(1)
    loss = torch.nn.functional.binary_cross_entropy_with_logits(logit, (data.labels > 0.5).float())
    adam = torch.optim.Adam([*deep.parameters(), bias], lr=settings.dense_lr)
    loss.backward()
    adam.step()
    trainer.fit(data)
    assert trainer.history[0]["train_loss"] == pytest.approx(loss.item(), rel=1e-5)
    trained = trainer.network
    torch.testing.assert_close(trained.tables.w, (w - 0.5 * w.grad).detach(), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(trained.tables.v, (v - 0.5 * v.grad).detach(), rtol=1e-5, atol=1e-6)
    for ours, theirs in zip(trained.deep.parameters(), deep.parameters()):
        torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-6)


def _planted(rows, values=20, seed=0):
    """One-hot rows of N_FIELDS fields of `values` ids each, labels from a planted logistic model."""
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, values, (rows, N_FIELDS), generator=generator) + values * torch.arange(N_FIELDS)
    weights = torch.randn(values * N_FIELDS, generator=generator)
    labels = (torch.rand(rows, generator=generator) < torch.sigmoid(weights[ids].sum(1))).float()
    return SparseDataset(torch.arange(0, rows * N_FIELDS + 1, N_FIELDS), ids.flatten().int(), None, labels,
                         values * N_FIELDS, torch.arange(N_FIELDS).repeat(rows).int(), N_FIELDS)


@pytest.mark.parametrize("model", sorted(DEEP_MODELS))
def test_training_learns_the_planted_model_and_keeps_the_best_epoch(model):
    data = _planted(6000)
    train, valid = data.take(torch.arange(5000)), data.take(torch.arange(5000, 6000))
    trainer = DeepTrainer(DeepSettings(model=model, k=4, hidden=(16,), epochs=6, batch_size=256, patience=6,
                                       lr=0.05), device="cpu")
    history = trainer.fit(train, valid)
    assert len(history) == 6 and history[-1]["train_loss"] < history[0]["train_loss"]
    # the planted model's own AUC on these rows is 0.91
    assert max(r["valid_auc"] for r in history) > 0.8
    # the kept weights are the best epoch's
    from alac import metrics

    kept = float(metrics.logloss(trainer.predict(valid), valid.labels > 0.5))
    assert kept == pytest.approx(min(r["valid_logloss"] for r in history), rel=1e-5)
    again = pickle.loads(pickle.dumps(trainer))
    torch.testing.assert_close(again.predict(valid), trainer.predict(valid))


def test_unseen_features_and_fields_are_left_out_at_prediction():
    data = _data(400)
    trainer = DeepTrainer(DeepSettings(k=4, hidden=(8,), epochs=1, batch_size=128), device="cpu")
    trainer.fit(data)
    row = data.take(torch.arange(3))
    expected = trainer.predict(row)
    # a row with an extra entry of an unknown feature, and one of an unknown field
    for feature, field in ((data.n_features + 5, 0), (0, N_FIELDS + 2)):
        extra = torch.tensor([feature], dtype=torch.int32)
        wider = type(row)(torch.tensor([0, 7, 13, 19]), torch.cat([row.indices[:6], extra, row.indices[6:]]),
                          None, row.labels, data.n_features + 10,
                          torch.cat([row.fields[:6], torch.tensor([field], dtype=torch.int32), row.fields[6:]]),
                          N_FIELDS + 3, row.source)
        torch.testing.assert_close(trainer.predict(wider), expected)
        assert trainer.unseen_entries == 1


def test_data_without_fields_and_bad_settings_are_refused():
    data = _data(50)
    bare = type(data)(data.indptr, data.indices, None, data.labels, data.n_features)
    with pytest.raises(DataError, match="no field ids"):
        DeepTrainer(DeepSettings(epochs=1), device="cpu").fit(bare)
    with pytest.raises(OptionError, match="unknown deep model"):
        DeepSettings(model="dcn")
    with pytest.raises(OptionError, match="integers >= 1"):
        DeepSettings(hidden=(0,))
    with pytest.raises(ModelError, match="unknown optimizer .bogus."):
        DeepSettings(optimizer="bogus")
    with pytest.raises(OptionError, match="call fit first"):
        DeepTrainer(device="cpu").predict(data)
