"""Field-aware FM (Juan et al. 2016, libffm) as a torch module over alac.nn.SparseAggregate:

    logit = b + sum_i w_i x_i + sum_{i < j} <v[i, f_j], v[j, f_i]> x_i x_j

for the entries i, j of a sample with fields f_i, f_j. Every feature has a k-vector per field (one
table row of F k values); the sample's bags per field, A[f, g] = sum over its entries i of field f of
x_i v[i, g], come from one per-field pooling call, and the pairs of different fields are
<A[f, g], A[g, f]> for f < g; pairs within a field are (|A[f, f]|^2 - sum_i x_i^2 |v[i, f]|^2) / 2.
The tables train inside backward (alac.nn), the bias with any torch.optim optimizer.
"""

from __future__ import annotations

import torch

from alac.nn.deep_models import FieldTables
from alac.nn.table_rows import ONE_DEVICE


class FFM(torch.nn.Module):
    def __init__(self, n_features, n_fields, k=4, optimizer="adagrad", lr=None, seed=0, device=None, init_std=0.1,
                 one_hot=False, backend="auto", semantics="sync", rows=ONE_DEVICE):
        """init_std: of the factors; libffm draws them uniformly in [0, 1 / sqrt(k)). one_hot: every
        sample has at most one entry per field, so no pairs within a field (their sums of squares,
        half the tables' work, are not computed). backend, semantics: the tables' (SparseAggregate's); rows:
        where their rows live (alac.nn.table_rows)."""
        super().__init__()
        self.n_fields, self.k, self.one_hot = n_fields, k, one_hot
        # per feature a weight and a k-vector for each field, flattened field-major
        self.tables = rows.tables(FieldTables(n_fields * k, squares=not one_hot, init_std=init_std), n_features,
                                  optimizer=optimizer, lr=lr, seed=seed, device=device, backend=backend,
                                  semantics=semantics)
        self.bias = torch.nn.Parameter(torch.zeros(1, device=self.tables.w.device))

    def forward(self, indices, offsets, fields, values=None):
        return self.logit(self.bags(indices, offsets, fields, values))

    def bags(self, indices, offsets, fields, values=None):
        return self.tables(indices, offsets, values, fields=fields, n_fields=self.n_fields)

    def logit(self, bags, dense=None):
        """The logits of a batch's bags (dense: none, as FFM takes no dense features)."""
        F, k = self.n_fields, self.k
        rows = bags["wx"].shape[0]
        A = bags["vx"].view(rows, F, F, k)                  # A[b, f, g]: field f's entries' vectors for field g
        across = (A * A.transpose(1, 2)).sum(-1).triu(1).sum((1, 2))
        if self.one_hot:
            return self.bias + bags["wx"].sum(1) + across
        own = torch.diagonal(A, dim1=1, dim2=2)             # [b, k, f]: A[b, f, f]
        squares = torch.diagonal(bags["v2x2"].view(rows, F, F, k), dim1=1, dim2=2).sum((1, 2))
        within = 0.5 * ((own**2).sum((1, 2)) - squares)
        return self.bias + bags["wx"].sum(1) + across + within
