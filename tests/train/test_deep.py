"""alac.train.deep.DeepTrainer: one full-batch epoch is the step of a hand-written PyTorch DeepFM (SGD
on dense tables, Adam on the same MLP); training learns a planted model; early stopping keeps the best
epoch; unseen features and fields are left out at prediction; bad input is refused."""

import dataclasses
import math
import pickle

import pytest
import torch

from alac.data.dataset import SparseDataset
from alac.data.synthetic import criteo_like
from alac.errors import DataError, ModelError, OptionError
from alac.train.deep import DEEP_MODELS, DeepSettings, DeepTrainer

N_FIELDS = 6


def _data(rows, seed=1):
    return criteo_like(rows, n_fields=N_FIELDS, seed=seed, model="fm", k=4, device="cpu")


@pytest.mark.parametrize("interleaving", [{}, {"micro_batches": 3}, {"micro_batches": 2, "side_stream": True}])
def test_one_full_batch_epoch_is_a_hand_written_deepfm_step(interleaving):
    """Whole, or in PICASSO's interleaving (micro-batches backpropagated in turn, the tables stepped
    once; a side stream for the lookups where there is a GPU): the same step."""
    data = _data(300)
    settings = DeepSettings(model="deepfm", k=4, hidden=(8,), lr=0.5, optimizer="sgd", epochs=1,
                            batch_size=data.n_rows, **interleaving)
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


@pytest.mark.parametrize("model", ["deepfm", "ffm", "wide_deep"])
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
    # the trainer checks its entries itself: its tables skip their per-batch round trip
    from alac.nn import SparseAggregate

    tables = [m for t in (trainer, again) for m in t.network.modules() if isinstance(m, SparseAggregate)]
    assert tables and not any(m.check_batches for m in tables)


def _with_dense(rows, seed=0):
    """The planted one-hot rows plus two dense fields (ids N_FIELDS, N_FIELDS + 1: one entry each,
    a normal value) that the labels also depend on."""
    sparse = _planted(rows, seed=seed)
    generator = torch.Generator().manual_seed(seed + 1)
    dense = torch.randn(rows, 2, generator=generator)
    one_hot = sparse.indices.view(rows, N_FIELDS).long()
    ids = torch.cat([one_hot, sparse.n_features + torch.arange(2).expand(rows, 2)], 1)
    values = torch.cat([torch.ones(rows, N_FIELDS), dense], 1)
    weights = torch.randn(sparse.n_features, generator=generator)
    logit = weights[one_hot].sum(1) + 2 * dense[:, 0] - 2 * dense[:, 1]
    labels = (torch.rand(rows, generator=generator) < torch.sigmoid(logit)).float()
    width = N_FIELDS + 2
    return SparseDataset(torch.arange(0, rows * width + 1, width), ids.flatten().int(), values.flatten(), labels,
                         sparse.n_features + 2, torch.arange(width).repeat(rows).int(), width), dense


def test_dlrm_takes_the_dense_fields_values_as_its_dense_features_and_learns_from_them():
    data, dense = _with_dense(4000)
    train, valid = data.take(torch.arange(3000)), data.take(torch.arange(3000, 4000))
    settings = DeepSettings(model="dlrm", k=4, hidden=(16,), bottom=(8,), epochs=6, batch_size=128, lr=0.05,
                            dense_fields=(N_FIELDS, N_FIELDS + 1), patience=6)
    trainer = DeepTrainer(settings, device="cpu")
    history = trainer.fit(train, valid)
    assert max(r["valid_auc"] for r in history) > 0.75
    # the network saw the dense fields' values as its dense features and the rest as sparse fields
    batch = valid.take(torch.arange(5))
    sparse_part = batch.indices.view(5, N_FIELDS + 2)[:, :N_FIELDS].long().flatten()
    expected = trainer.network(sparse_part, torch.arange(0, 5 * N_FIELDS + 1, N_FIELDS),
                               torch.arange(N_FIELDS).repeat(5), values=torch.ones(5 * N_FIELDS),
                               dense=dense[3000:3005])
    torch.testing.assert_close(trainer._logits(batch), expected)
    with pytest.raises(OptionError, match="dlrm needs dense features"):
        DeepSettings(model="dlrm")
    with pytest.raises(OptionError, match="ffm takes no dense features"):
        DeepSettings(model="ffm", dense_fields=(1,))
    with pytest.raises(DataError, match="name fields the data do not have"):
        DeepTrainer(DeepSettings(model="dlrm", dense_fields=(40,), epochs=1), device="cpu").fit(train)


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


def test_a_diverging_run_stops_with_a_clear_error():
    from alac.train.trainer import TrainingDiverged

    data = _planted(500)
    trainer = DeepTrainer(DeepSettings(k=4, hidden=(8,), epochs=3, batch_size=64, dense_lr=1e30), device="cpu")
    with pytest.raises(TrainingDiverged, match="training diverged in epoch 1 .*smaller learning rate"):
        trainer.fit(data)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_micro_batches_by_eq_2_split_only_a_step_whose_activations_exceed_the_memory(monkeypatch):
    """auto (micro_batches None) keeps a step whole where it fits, and where its measured activations
    exceed STEP_SHARE of the free memory splits it as that many explicit micro-batches would."""
    from alac.train import deep_steps

    data = _data(4096)
    settings = DeepSettings(model="deepfm", k=4, hidden=(64,), epochs=1, batch_size=2048, stream_data=False)
    whole = DeepTrainer(settings, device="cuda")
    whole.fit(data)
    assert whole._micro_batches == 1
    costs = []
    eq_2 = deep_steps.micro_batches_for

    def spied(rows, pairs):
        costs.append(pairs[0][1])
        return eq_2(rows, pairs)

    monkeypatch.setattr(deep_steps, "micro_batches_for", spied)
    monkeypatch.setattr(deep_steps, "available_bytes", lambda device: 1 << 20)
    said = []
    split = DeepTrainer(settings, device="cuda")
    split.say = said.append
    split.fit(data)
    parts = split._micro_batches
    # a row's activations: at least its tables' outputs (w, v and v^2 sums of 6 fields) and hidden layer
    assert costs[0] >= 4 * (N_FIELDS * (1 + 2 * 4) + 64)
    assert parts == math.ceil(2048 / ((1 << 19) // costs[0])) > 1
    assert [line for line in said if "micro-batches" in line] == [
        f"a step in {parts} micro-batches (PICASSO's Eq. 2: its measured activations exceed 50% of the GPU's free "
        "memory)"]
    monkeypatch.undo()
    explicit = DeepTrainer(dataclasses.replace(settings, micro_batches=parts), device="cuda")
    explicit.fit(data)
    assert split.history[0]["train_loss"] == pytest.approx(explicit.history[0]["train_loss"], rel=1e-5)
    torch.testing.assert_close(split.network.tables.v, explicit.network.tables.v)
