"""A synthetic Criteo-shaped data set with a planted model: the default data and the benchmark set.

Shape (from the issue that defined it): n_fields one-hot fields; field f has cardinality
floor(10**U(1, 5.6)); within a field the id is floor(card**u) - 1 with u ~ U(0, 1), which gives a
heavy head (about half the rows of a field hit ids below sqrt(card)). Labels come from a planted
logistic model: weights N(0, 0.3**2), bias -1, and for `model="fm"` planted k-factor interactions.

Every random number is a counter-based hash (splitmix64) of (seed, stream, index) computed with
int64 torch arithmetic, so the data is the same on the CPU and on any GPU (up to the last-ulp
rounding of pow/exp, which changes an id or a label with probability ~1e-16) and any row block can
be generated independently.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch

from alac.counter_random import normal, uniform
from alac.data.dataset import DataSource, SparseDataset
from alac.data.table import MAX_FEATURES
from alac.errors import OptionError

# Independent random streams.
_CARDINALITY, _ID, _WEIGHT_U1, _WEIGHT_U2, _FACTOR_U1, _FACTOR_U2, _LABEL, _NOISE_U1, _NOISE_U2 = range(9)

# Values drawn per block of rows (ids, and the planted FM's factors of every id): 2**26 keeps the
# float64 temporaries near 0.5 GB whatever the fields and k (2**20 rows of k = 64 factors took 13 GB).
_VALUES_PER_BLOCK = 1 << 26
# Planted params of at most this many values are made once and gathered when a set draws more ids
# than that (the Criteo-shaped set's: 13M at k = 8); more (the Kaggle shape's 574M at k = 16) are
# hashed for the ids of every row block.
TABLE_VALUES = 1 << 27


@dataclass(frozen=True)
class PlantedModel:
    """The model the labels are drawn from: ids of field f are field_offsets[f] + local id. Weights
    and factors are hashes of (seed, feature id): made once as tables where those are small, computed
    for the ids asked where they are not (tens of millions of rows are never held)."""

    cardinalities: torch.Tensor   # int64 [n_fields]
    field_offsets: torch.Tensor   # int64 [n_fields + 1]
    seed: int
    weight_std: float
    bias: float
    k: int
    factor_std: float | None      # FM only
    tables: tuple | None = None   # (weights, factors or None) of every feature, where made (tabulated)

    @property
    def n_features(self):
        return int(self.field_offsets[-1])

    def _hashed_weights(self, ids):
        return self.weight_std * normal(self.seed, (_WEIGHT_U1, _WEIGHT_U2), ids)

    def _hashed_factors(self, ids):
        lanes = torch.arange(self.k, dtype=torch.int64, device=ids.device)
        return self.factor_std * normal(self.seed, (_FACTOR_U1, _FACTOR_U2), ids.unsqueeze(-1) * self.k + lanes)

    def tabulated(self, ids_to_draw):
        """The model with its weights and factors made once as tables, where drawing ids_to_draw ids
        would hash more values than the tables hold and they are at most TABLE_VALUES values."""
        per_feature = 1 + (self.k if self.factor_std is not None else 0)
        if self.tables is not None or ids_to_draw <= self.n_features or self.n_features * per_feature > TABLE_VALUES:
            return self
        ids = torch.arange(self.n_features, dtype=torch.int64, device=self.field_offsets.device)
        return dataclasses.replace(self, tables=(self._hashed_weights(ids),
                                                 None if self.factor_std is None else self._hashed_factors(ids)))

    def weights_of(self, ids):
        return self._hashed_weights(ids) if self.tables is None else self.tables[0][ids]

    def factors_of(self, ids):
        """[*ids.shape, k] factors of the ids (FM)."""
        return self._hashed_factors(ids) if self.tables is None else self.tables[1][ids]

    @property
    def weights(self):
        """Every feature's weight (float64 [n_features])."""
        return self.weights_of(torch.arange(self.n_features, dtype=torch.int64, device=self.field_offsets.device))

    @property
    def factors(self):
        """Every feature's factors (float64 [n_features, k]; None for LR)."""
        if self.factor_std is None:
            return None
        return self.factors_of(torch.arange(self.n_features, dtype=torch.int64, device=self.field_offsets.device))

    def logits(self, ids):
        """Planted logits of rows given as a [rows, n_fields] tensor of feature ids."""
        logit = self.bias + self.weights_of(ids).sum(dim=1)
        if self.factor_std is not None:
            v = self.factors_of(ids)
            logit = logit + 0.5 * (v.sum(dim=1).pow(2) - v.pow(2).sum(dim=1)).sum(dim=1)
        return logit


def planted_model(n_fields=39, seed=0, model="lr", k=8, weight_std=0.3, bias=-1.0, factor_std=None,
                  log10_cardinality=(1.0, 5.6), device=None, cardinalities=None):
    """The planted model of criteo_like; cardinalities (a list) replace the drawn log-uniform ones."""
    device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    if model not in ("lr", "fm"):
        raise OptionError(f"model must be 'lr' or 'fm', got {model!r}")
    if cardinalities is None:
        low, high = log10_cardinality
        fields = torch.arange(n_fields, dtype=torch.int64, device=device)
        cardinalities = torch.floor(10.0 ** (low + (high - low) * uniform(seed, _CARDINALITY, fields))).long()
    else:
        cardinalities = torch.tensor(cardinalities, dtype=torch.int64, device=device)
        n_fields = cardinalities.numel()
    offsets = torch.zeros(n_fields + 1, dtype=torch.int64, device=device)
    torch.cumsum(cardinalities, 0, out=offsets[1:])
    std = None
    if model == "fm":
        # Pairwise term sum_{f<g} <v_f, v_g> has variance pairs * k * std**4: scale it to about 1,
        # the size of the linear term's spread, so neither part dominates.
        pairs = n_fields * (n_fields - 1) / 2
        std = factor_std if factor_std is not None else (pairs * k) ** -0.25
    return PlantedModel(cardinalities, offsets, seed, weight_std, bias, k, std)


def criteo_like(n_rows, n_fields=39, seed=0, model="lr", k=8, weight_std=0.3, bias=-1.0,
                factor_std=None, device=None, first_row=0):
    """`n_rows` one-hot rows of `n_fields` fields with labels from a planted LR or FM model.

    Rows are drawn by counter: rows [first_row, first_row + n_rows) of the set with these arguments,
    so a set larger than memory can be made piece by piece.

    Returns a binary SparseDataset with per-entry field ids, on `device` (the GPU when present).
    `planted_model` with the same arguments gives the model behind the labels.
    """
    planted = planted_model(n_fields, seed, model, k, weight_std, bias, factor_std, device=device)
    options = (("model", model), ("n_fields", n_fields), ("seed", seed), ("k", k),
               ("weight_std", weight_std), ("bias", bias), ("factor_std", factor_std))
    return _planted_rows(planted, n_rows, seed, first_row, lambda u, cardinality: torch.floor(cardinality ** u) - 1,
                         options)


# The Criteo Kaggle set's 26 categorical fields: their cardinalities (33.8M rows in all)
KAGGLE_CARDINALITIES = (1460, 583, 10131227, 2202608, 305, 24, 12517, 633, 3, 93145, 5683, 8351593, 3194, 27,
                        14992, 5461306, 10, 5652, 2173, 4, 7046547, 18, 15, 286181, 105, 142572)


def kaggle_like(n_rows, zipf=1.1, seed=0, model="fm", k=16, device=None, first_row=0, scale=1):
    """`n_rows` one-hot rows of the Criteo Kaggle set's 26 categorical fields (KAGGLE_CARDINALITIES,
    each times `scale`), ids within a field Zipf(zipf)-distributed (the continuous power law's inverse
    CDF over [1, c + 1), floored: id j has probability about j**-zipf), labels from a planted model as
    criteo_like's; the set of the placement benchmarks, whose tables exceed small GPU budgets (and,
    scaled, the GPU)."""
    if zipf <= 0 or scale < 1:
        raise OptionError(f"the Zipf exponent must be positive and the scale at least 1, got {zipf} and {scale}")
    if sum(KAGGLE_CARDINALITIES) * scale > MAX_FEATURES:
        raise OptionError(f"scale {scale} gives {sum(KAGGLE_CARDINALITIES) * scale:,} features: feature ids are "
                          f"int32 (at most {MAX_FEATURES:,}); the largest scale is "
                          f"{MAX_FEATURES // sum(KAGGLE_CARDINALITIES)}")
    planted = planted_model(seed=seed, model=model, k=k, device=device,
                            cardinalities=[c * scale for c in KAGGLE_CARDINALITIES])

    options = (("model", model), ("zipf", zipf), ("seed", seed), ("k", k), ("shape", "kaggle"))
    if scale != 1:
        options += (("scale", scale),)
    return _planted_rows(planted, n_rows, seed, first_row, _zipf_local(zipf), options)


def ratings_like(n_ratings, n_users=100_000, n_items=20_000, k=8, zipf=1.1, noise_std=0.5, mean=3.5, seed=0,
                 device=None, first_row=0):
    """`n_ratings` (user, item) ratings, one-hot fields 0 (users) and 1 (items, ids after the users'),
    each field's ids Zipf(zipf)-distributed as kaggle_like's (power-law users and items); the rating
    is a planted FM of rank k (mean, user and item biases N(0, 0.3^2), factors scaled so that the
    interaction has about unit variance) plus N(0, noise_std^2) noise: the set of benchmarks/fm_mcmc.py."""
    if zipf <= 0 or n_users < 1 or n_items < 1 or noise_std < 0:
        raise OptionError(f"the Zipf exponent is positive, the users and items at least 1 and the noise std at "
                          f"least 0, got {zipf}, {n_users}, {n_items}, {noise_std}")
    planted = planted_model(seed=seed, model="fm", k=k, bias=mean, device=device, cardinalities=[n_users, n_items])

    def rating(logits, rows):
        return logits + noise_std * normal(seed, (_NOISE_U1, _NOISE_U2), rows)

    options = (("zipf", zipf), ("seed", seed), ("k", k), ("shape", "ratings"), ("noise_std", noise_std))
    return _planted_rows(planted, n_ratings, seed, first_row, _zipf_local(zipf), options, rating)


def _zipf_local(zipf):
    """A field's local id of a uniform u: the continuous power law's inverse CDF over [1, c + 1), floored."""
    def local(u, cardinality):
        if zipf == 1:
            return torch.floor((cardinality + 1) ** u) - 1
        power = 1 - zipf
        return torch.floor((((cardinality + 1) ** power - 1) * u + 1) ** (1 / power)) - 1
    return local


def _binary(seed):
    """Labels 1 with the planted logits' probability."""
    def labels(logits, rows):
        return (uniform(seed, _LABEL, rows) < torch.sigmoid(logits)).float()
    return labels


def _planted_rows(planted, n_rows, seed, first_row, draw_local, options, labels_of=None):
    """Rows [first_row, first_row + n_rows) of one id per field, local id draw_local(u, cardinality)
    of a uniform u per (row, field), labels labels_of(planted logits, row numbers) (default: binary,
    drawn with the logits' probability)."""
    labels_of = labels_of or _binary(seed)
    device = planted.field_offsets.device
    n_fields = planted.cardinalities.numel()
    planted = planted.tabulated(n_rows * n_fields)
    nnz = n_rows * n_fields
    indices = torch.empty(nnz, dtype=torch.int32, device=device)
    labels = torch.empty(n_rows, dtype=torch.float32, device=device)
    cardinality = planted.cardinalities.double()
    per_row = n_fields * (1 + (planted.k if planted.factor_std is not None else 0))
    rows_per_block = max(1, _VALUES_PER_BLOCK // per_row)
    for start in range(0, n_rows, rows_per_block):
        stop = min(n_rows, start + rows_per_block)
        counters = torch.arange((first_row + start) * n_fields, (first_row + stop) * n_fields, dtype=torch.int64,
                                device=device)
        u = uniform(seed, _ID, counters).view(-1, n_fields)
        local = torch.minimum(draw_local(u, cardinality).long(), planted.cardinalities - 1)
        ids = local + planted.field_offsets[:-1]
        indices[start * n_fields:stop * n_fields] = ids.view(-1).int()
        rows = torch.arange(first_row + start, first_row + stop, dtype=torch.int64, device=device)
        labels[start:stop] = labels_of(planted.logits(ids), rows).float()
    return SparseDataset(
        indptr=torch.arange(0, nnz + 1, n_fields, dtype=torch.int64, device=device), indices=indices,
        values=None, labels=labels, n_features=planted.n_features,
        fields=torch.arange(n_fields, dtype=torch.int32, device=device).repeat(n_rows),
        n_fields=n_fields, source=DataSource(path=None, format="synthetic", options=options))
