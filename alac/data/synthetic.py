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

import math
from dataclasses import dataclass

import torch

from alac.data.dataset import DataSource, SparseDataset
from alac.errors import OptionError

_GOLDEN = 0x9E3779B97F4A7C15 - 2**64
_MIX1 = 0xBF58476D1CE4E5B9 - 2**64
_MIX2 = 0x94D049BB133111EB - 2**64

# Independent random streams.
_CARDINALITY, _ID, _WEIGHT_U1, _WEIGHT_U2, _FACTOR_U1, _FACTOR_U2, _LABEL = range(7)

# 2**20 rows per block keeps the int64/float64 temporaries near 1 GB for 39 fields.
_ROWS_PER_BLOCK = 1 << 20


def _shift_right_logical(x, bits):
    return (x >> bits) & ((1 << (64 - bits)) - 1)


def _splitmix64(x):
    x = x + _GOLDEN
    x = (x ^ _shift_right_logical(x, 30)) * _MIX1
    x = (x ^ _shift_right_logical(x, 27)) * _MIX2
    return x ^ _shift_right_logical(x, 31)


def _stream_key(seed, stream):
    return int(_splitmix64(torch.tensor([seed * 64 + stream], dtype=torch.int64))[0])


def uniform(seed, stream, counters):
    """U[0, 1) float64 numbers, one per int64 counter, from a hash of (seed, stream, counter)."""
    return _shift_right_logical(_splitmix64(counters ^ _stream_key(seed, stream)), 11).double() * 2.0**-53


def normal(seed, streams, counters):
    """N(0, 1) float64 numbers by Box-Muller over two uniform streams."""
    u1 = uniform(seed, streams[0], counters)
    u2 = uniform(seed, streams[1], counters)
    return torch.sqrt(-2.0 * torch.log1p(-u1)) * torch.cos(2.0 * math.pi * u2)


@dataclass(frozen=True)
class PlantedModel:
    """The model the labels are drawn from: ids of field f are field_offsets[f] + local id."""

    cardinalities: torch.Tensor   # int64 [n_fields]
    field_offsets: torch.Tensor   # int64 [n_fields + 1]
    weights: torch.Tensor         # float64 [n_features]
    bias: float
    factors: torch.Tensor | None  # float64 [n_features, k], FM only

    @property
    def n_features(self):
        return int(self.field_offsets[-1])

    def logits(self, ids):
        """Planted logits of rows given as a [rows, n_fields] tensor of feature ids."""
        logit = self.bias + self.weights[ids].sum(dim=1)
        if self.factors is not None:
            v = self.factors[ids]
            logit = logit + 0.5 * (v.sum(dim=1).pow(2) - v.pow(2).sum(dim=1)).sum(dim=1)
        return logit


def planted_model(n_fields=39, seed=0, model="lr", k=8, weight_std=0.3, bias=-1.0, factor_std=None,
                  log10_cardinality=(1.0, 5.6), device=None):
    device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    if model not in ("lr", "fm"):
        raise OptionError(f"model must be 'lr' or 'fm', got {model!r}")
    low, high = log10_cardinality
    fields = torch.arange(n_fields, dtype=torch.int64, device=device)
    cardinalities = torch.floor(10.0 ** (low + (high - low) * uniform(seed, _CARDINALITY, fields))).long()
    offsets = torch.zeros(n_fields + 1, dtype=torch.int64, device=device)
    torch.cumsum(cardinalities, 0, out=offsets[1:])
    n_features = int(offsets[-1])
    feature_counter = torch.arange(n_features, dtype=torch.int64, device=device)
    weights = weight_std * normal(seed, (_WEIGHT_U1, _WEIGHT_U2), feature_counter)
    factors = None
    if model == "fm":
        # Pairwise term sum_{f<g} <v_f, v_g> has variance pairs * k * std**4: scale it to about 1,
        # the size of the linear term's spread, so neither part dominates.
        pairs = n_fields * (n_fields - 1) / 2
        std = factor_std if factor_std is not None else (pairs * k) ** -0.25
        factor_counter = torch.arange(n_features * k, dtype=torch.int64, device=device)
        factors = (std * normal(seed, (_FACTOR_U1, _FACTOR_U2), factor_counter)).view(n_features, k)
    return PlantedModel(cardinalities, offsets, weights, bias, factors)


def criteo_like(n_rows, n_fields=39, seed=0, model="lr", k=8, weight_std=0.3, bias=-1.0,
                factor_std=None, device=None, first_row=0):
    """`n_rows` one-hot rows of `n_fields` fields with labels from a planted LR or FM model.

    Rows are drawn by counter: rows [first_row, first_row + n_rows) of the set with these arguments,
    so a set larger than memory can be made piece by piece.

    Returns a binary SparseDataset with per-entry field ids, on `device` (the GPU when present).
    `planted_model` with the same arguments gives the model behind the labels.
    """
    planted = planted_model(n_fields, seed, model, k, weight_std, bias, factor_std, device=device)
    device = planted.weights.device
    nnz = n_rows * n_fields
    indices = torch.empty(nnz, dtype=torch.int32, device=device)
    labels = torch.empty(n_rows, dtype=torch.float32, device=device)
    cardinality = planted.cardinalities.double()
    for start in range(0, n_rows, _ROWS_PER_BLOCK):
        stop = min(n_rows, start + _ROWS_PER_BLOCK)
        counters = torch.arange((first_row + start) * n_fields, (first_row + stop) * n_fields, dtype=torch.int64,
                                device=device)
        u = uniform(seed, _ID, counters).view(-1, n_fields)
        local = (torch.floor(cardinality ** u) - 1).long()
        ids = local + planted.field_offsets[:-1]
        indices[start * n_fields:stop * n_fields] = ids.view(-1).int()
        rows = torch.arange(first_row + start, first_row + stop, dtype=torch.int64, device=device)
        probability = torch.sigmoid(planted.logits(ids))
        labels[start:stop] = (uniform(seed, _LABEL, rows) < probability).float()
    options = (("model", model), ("n_fields", n_fields), ("seed", seed), ("k", k),
               ("weight_std", weight_std), ("bias", bias), ("factor_std", factor_std))
    return SparseDataset(
        indptr=torch.arange(0, nnz + 1, n_fields, dtype=torch.int64, device=device), indices=indices,
        values=None, labels=labels, n_features=planted.n_features,
        fields=torch.arange(n_fields, dtype=torch.int32, device=device).repeat(n_rows),
        n_fields=n_fields, source=DataSource(path=None, format="synthetic", options=options))
