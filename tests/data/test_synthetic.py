import math

import pytest
import torch

from alac.data.synthetic import criteo_like, planted_model


def test_shape_and_determinism():
    first = criteo_like(3000, seed=3, device="cpu")
    second = criteo_like(3000, seed=3, device="cpu")
    other = criteo_like(3000, seed=4, device="cpu")
    assert first.same_as(second) and not first.same_as(other)
    assert first.is_binary and first.n_fields == 39 and (first.row_lengths() == 39).all()
    planted = planted_model(seed=3, device="cpu")
    ids = first.indices.view(-1, 39).long()
    assert ((ids >= planted.field_offsets[:-1]) & (ids < planted.field_offsets[1:])).all()
    cards = planted.cardinalities.double()
    assert (cards >= 10).all() and (cards <= 10**5.6).all()


def test_heavy_head():
    # id = floor(card**u) - 1 with u ~ U(0, 1), so P(id < m - 1) = log(m) / log(card): with
    # m = floor(sqrt(card)) about half of a field's rows hit its first sqrt(card) ids.
    rows = 20000
    data = criteo_like(rows, seed=1, device="cpu")
    planted = planted_model(seed=1, device="cpu")
    local = data.indices.view(-1, 39).long() - planted.field_offsets[:-1]
    cardinality = planted.cardinalities.double()
    m = cardinality.sqrt().floor()
    expected = m.log() / cardinality.log()
    observed = (local < m - 1).double().mean(0)
    tolerance = 5 * (expected * (1 - expected) / rows).sqrt()
    assert ((observed - expected).abs() < tolerance).all()


def test_labels_follow_the_planted_model():
    data = criteo_like(50000, seed=2, device="cpu")
    planted = planted_model(seed=2, device="cpu")
    probability = torch.sigmoid(planted.logits(data.indices.view(-1, 39).long()))
    # the empirical positive rate matches the planted probabilities within 4 standard errors
    expected = probability.mean().item()
    standard_error = math.sqrt((probability * (1 - probability)).sum().item()) / data.n_rows
    assert abs(data.labels.double().mean().item() - expected) < 4 * standard_error
    # and the planted logit separates the classes well (AUC of the Bayes score)
    from sklearn.metrics import roc_auc_score
    assert roc_auc_score(data.labels.numpy(), probability.numpy()) > 0.8


def test_planted_weights_have_the_documented_spread():
    planted = planted_model(seed=0, device="cpu")
    assert abs(planted.weights.std().item() - 0.3) < 0.01 and abs(planted.weights.mean().item()) < 0.01


def test_fm_variant_has_planted_factors():
    data = criteo_like(2000, seed=0, model="fm", k=4, device="cpu")
    planted = planted_model(seed=0, model="fm", k=4, device="cpu")
    assert planted.factors.shape == (planted.n_features, 4)
    assert not data.same_as(criteo_like(2000, seed=0, device="cpu"))


@pytest.mark.gpu
def test_gpu_generates_the_same_data():
    cpu = criteo_like(100_000, seed=9, device="cpu")
    gpu = criteo_like(100_000, seed=9, device="cuda")
    assert gpu.device.type == "cuda"
    assert torch.equal(cpu.indices, gpu.indices.cpu())
    # labels compare a float64 sigmoid with a uniform: a last-ulp difference flips ~1e-16 of them
    assert int((cpu.labels != gpu.labels.cpu()).sum()) == 0


@pytest.mark.parametrize("zipf", [1.1, 1.2])
def test_kaggle_shaped_rows_have_its_fields_and_zipf_ids(zipf):
    """26 fields of the Kaggle cardinalities (33.8M rows in all), every id inside its field, the ids of
    the largest field falling off as id**-zipf, drawn by counter (pieces are the whole set's rows)."""
    from alac.data.synthetic import KAGGLE_CARDINALITIES, kaggle_like

    data = kaggle_like(200_000, zipf=zipf, model="lr", device="cpu")
    assert data.n_fields == 26 and data.n_features == sum(KAGGLE_CARDINALITIES) == 33_762_577
    ids = data.indices.view(-1, 26).long()
    offsets = torch.tensor((0, *KAGGLE_CARDINALITIES)).cumsum(0)
    assert bool(((ids >= offsets[:-1]) & (ids < offsets[1:])).all())
    local = ids[:, 2] - offsets[2]          # the 10,131,227-row field
    counts = torch.bincount(local[local < 2000], minlength=2000).double()
    ranks = torch.arange(20, 2000)
    slope = torch.linalg.lstsq(torch.stack([torch.log(ranks + 1.5), torch.ones(len(ranks))], 1).double(),
                               torch.log(counts[20:2000].clamp(min=0.5))[:, None]).solution[0, 0]
    assert abs(float(slope) + zipf) < 0.1
    piece = kaggle_like(1000, zipf=zipf, model="lr", device="cpu", first_row=5000)
    whole = kaggle_like(6000, zipf=zipf, model="lr", device="cpu")
    assert torch.equal(piece.indices, whole.indices[5000 * 26:]) and torch.equal(piece.labels, whole.labels[5000:])
    assert 0.05 < float(data.labels.mean()) < 0.95


@pytest.mark.parametrize("model", ["lr", "fm"])
def test_tabulated_planted_params_are_the_hashed_ones(model):
    """Sets that draw more ids than the model has features gather from tables made once: the same
    weights, factors and logits as hashing every id."""
    planted = planted_model(n_fields=5, seed=1, model=model, k=4, device="cpu")
    tabulated = planted.tabulated(10 * planted.n_features)
    assert planted.tables is None and tabulated.tables is not None
    assert planted.tabulated(planted.n_features).tables is None
    ids = torch.randint(0, planted.n_features, (2000, 5), generator=torch.Generator().manual_seed(0))
    assert torch.equal(tabulated.logits(ids), planted.logits(ids))
    assert torch.equal(tabulated.weights, planted.weights)


def test_a_kaggle_scale_past_int32_ids_is_refused_before_any_row_is_made():
    from alac.data.synthetic import KAGGLE_CARDINALITIES, kaggle_like
    from alac.errors import OptionError

    largest = (2**31 - 1) // sum(KAGGLE_CARDINALITIES)
    with pytest.raises(OptionError, match=f"the largest scale is {largest}"):
        kaggle_like(10, scale=largest + 1, model="lr", device="cpu")


def test_ratings_follow_their_planted_fm_plus_noise_with_power_law_users_and_items():
    from alac.data.synthetic import planted_model, ratings_like

    data = ratings_like(100_000, n_users=2000, n_items=500, k=4, noise_std=0.5, seed=3, device="cpu")
    assert (data.n_features, data.n_fields) == (2500, 2) and data.values is None
    ids = data.indices.long().view(-1, 2)
    assert bool((ids[:, 0] < 2000).all()) and bool((ids[:, 1] >= 2000).all())
    # Zipf 1.1: the first user is rated about 2^1.1 times as often as the second, far more than the median one
    users = torch.bincount(ids[:, 0], minlength=2000).double()
    assert 1.7 < float(users[0] / users[1]) < 2.6 and float(users[0]) > 50 * float(users.median())
    # the residual from the planted model (an FM of user and item: mean 3.5, biases, one product) is the noise
    planted = planted_model(seed=3, model="fm", k=4, bias=3.5, device="cpu", cardinalities=[2000, 500])
    residual = data.labels.double() - planted.logits(ids)
    assert abs(float(residual.mean())) < 0.01 and float(residual.std()) == pytest.approx(0.5, rel=0.02)
    assert torch.equal(ratings_like(1000, 2000, 500, k=4, seed=3, device="cpu").labels, data.labels[:1000])
