"""Wide models with a deep part, as torch modules over alac.nn.SparseAggregate: Wide & Deep (Cheng et
al. 2016), DeepFM (Guo et al. 2017) and a DLRM-like model (Naumov et al. 2019).

Each takes a batch of one-hot (or weighted) sparse rows as CSR with the field of every entry, and
optionally dense features, and returns one logit per sample. The tables (a weight and a k-vector per
feature, and their optimizer state) live in one SparseAggregate (placed as alac.nn.table_rows says),
pooled per field in one call and updated inside backward; the MLPs are ordinary torch modules for any
torch.optim optimizer. They (and alac.nn.field_aware's FFM) train with `alac train --model NAME` and
the classifiers of alac.sklearn.deep (alac.train.deep).
"""

from __future__ import annotations

import torch

from alac.dsl import Model, Normal, Param
from alac.nn.table_rows import ONE_DEVICE


class FieldTables(Model):
    """Per feature a weight and a k-vector of factors; per bag their sums (and the factors' squares)."""

    def __init__(self, k, squares=False, init_std=0.01):
        self.w = Param(init=0.0)
        self.v = Param(size=k, init=Normal(init_std))
        self.squares = squares

    def aggregate(self, x, p):
        bags = {"wx": x * p.w, "vx": x * p.v}
        if self.squares:
            bags["v2x2"] = x**2 * p.v**2
        return bags


def mlp(sizes):
    """Linear layers of the given sizes with ReLU between them (none after the last)."""
    layers = []
    for index, (inputs, outputs) in enumerate(zip(sizes, sizes[1:])):
        layers.append(torch.nn.Linear(inputs, outputs))
        if index < len(sizes) - 2:
            layers.append(torch.nn.ReLU())
    return torch.nn.Sequential(*layers)


class _FieldModel(torch.nn.Module):
    def __init__(self, n_features, n_fields, k, squares, optimizer, lr, seed, device, backend, rows):
        super().__init__()
        self.n_fields, self.k = n_fields, k
        self.tables = rows.tables(FieldTables(k, squares), n_features, optimizer=optimizer, lr=lr, seed=seed,
                                  device=device, backend=backend)

    def bags(self, indices, offsets, fields, values):
        return self.tables(indices, offsets, values, fields=fields, n_fields=self.n_fields)


class WideAndDeep(_FieldModel):
    """logit = bias + sum of the wide weights + MLP(field embeddings, dense features)."""

    squares = False      # the tables' bags of squared factors (an FM's interactions need them)

    def __init__(self, n_features, n_fields, k=16, hidden=(256, 128), n_dense=0, optimizer="adagrad", lr=None,
                 seed=0, device=None, backend="auto", rows=ONE_DEVICE):
        """backend: the tables' (SparseAggregate's); rows: where their rows live (alac.nn.table_rows)."""
        super().__init__(n_features, n_fields, k, self.squares, optimizer, lr, seed, device, backend, rows)
        self.deep = mlp([n_fields * k + n_dense, *hidden, 1]).to(self.tables.w.device)
        self.bias = torch.nn.Parameter(torch.zeros(1, device=self.tables.w.device))

    def forward(self, indices, offsets, fields, values=None, dense=None):
        return self.logit(self.bags(indices, offsets, fields, values), dense)

    def logit(self, bags, dense):
        deep_in = bags["vx"].flatten(1) if dense is None else torch.cat([bags["vx"].flatten(1), dense], 1)
        return self.bias + bags["wx"].sum(1) + self.deep(deep_in).squeeze(1)


class DeepFM(WideAndDeep):
    """Wide & Deep plus the FM's pairwise interactions of the field embeddings: the FM and the MLP
    share the embeddings."""

    squares = True

    def logit(self, bags, dense):
        summed = bags["vx"].sum(1)
        interactions = 0.5 * (summed**2 - bags["v2x2"].sum(1)).sum(1)
        return super().logit(bags, dense) + interactions


class DLRMLike(_FieldModel):
    """DLRM's shape: a bottom MLP maps the dense features to a k-vector; the dot products of every pair
    of it and the field embeddings, with it, feed a top MLP that gives the logit."""

    def __init__(self, n_features, n_fields, n_dense, k=16, bottom=(64,), top=(128, 64), optimizer="adagrad",
                 lr=None, seed=0, device=None, backend="auto", rows=ONE_DEVICE):
        super().__init__(n_features, n_fields, k, False, optimizer, lr, seed, device, backend, rows)
        device = self.tables.w.device
        self.bottom = torch.nn.Sequential(mlp([n_dense, *bottom, k]), torch.nn.ReLU()).to(device)
        vectors = n_fields + 1
        self.pairs = torch.triu_indices(vectors, vectors, offset=1, device=device)
        self.top = mlp([k + self.pairs.shape[1], *top, 1]).to(device)

    def forward(self, indices, offsets, fields, dense, values=None):
        return self.logit(self.bags(indices, offsets, fields, values), dense)

    def logit(self, bags, dense):
        dense_vector = self.bottom(dense)
        vectors = torch.cat([dense_vector[:, None, :], bags["vx"]], 1)
        dots = torch.bmm(vectors, vectors.transpose(1, 2))[:, self.pairs[0], self.pairs[1]]
        return self.top(torch.cat([dense_vector, dots], 1)).squeeze(1)
