"""The coordinate blocks of libFM's solvers on a GPU (alac.runtime.solvers.fm_coordinate): sets of a
field's features of which no two share a row, so that a block's coordinates (their w, or their
v_{.,f}) are independent given the rest and step together exactly, as TPA-SCD steps coordinates that
share no entry. A field with at most one entry a row (a user, an item) is one block; a field that
repeats in rows (a bag of tags) is split by greedy colouring of its features' co-occurrence, the
most frequent first: at least as many blocks as the longest row's entries of the field. Compiled by
numba: the colouring visits every pair of a row's entries in the field once.
"""

from __future__ import annotations

from dataclasses import dataclass

import numba
import numpy as np
import torch

from alac.errors import DataError


@dataclass(frozen=True)
class Block:
    """Features (global ids, ascending) of one field (`prior`: the field's position among the data's
    fields, whose prior they share) that share no row, and their entries: row, the feature's position in
    `features`, value."""

    prior: int
    features: torch.Tensor
    rows: torch.Tensor
    local: torch.Tensor
    values: torch.Tensor


@numba.njit(cache=True)
def _greedy_colours(order, feature_start, feature_rows, row_start, row_features, n_features):
    """A colour per feature (local ids 0 .. n_features - 1), visited in `order`: the smallest colour no
    feature sharing a row with it has yet; CSC (feature -> rows) and CSR (row -> features) given."""
    colour = np.full(n_features, -1, np.int64)
    stamp = np.full(n_features + 1, -1, np.int64)     # stamp[c] == j: colour c is taken by a neighbour of j
    for j in order:
        for t in range(feature_start[j], feature_start[j + 1]):
            row = feature_rows[t]
            for u in range(row_start[row], row_start[row + 1]):
                other = row_features[u]
                if colour[other] >= 0:
                    stamp[colour[other]] = j
        c = 0
        while stamp[c] == j:
            c += 1
        colour[j] = c
    return colour


def _colours(rows, local, n_local):
    """Colours of a field's features (local ids) from its entries (row, local id), no two of a row alike."""
    counts = np.bincount(local, minlength=n_local)
    by_feature = np.argsort(local, kind="stable")
    feature_start = np.concatenate([[0], np.cumsum(counts)])
    _, dense_rows = np.unique(rows, return_inverse=True)
    by_row = np.argsort(dense_rows, kind="stable")
    row_start = np.concatenate([[0], np.cumsum(np.bincount(dense_rows))])
    order = np.argsort(-counts, kind="stable")
    return _greedy_colours(order, feature_start, dense_rows[by_feature], row_start, local[by_row], n_local)


def coordinate_blocks(dataset, device, dtype):
    """The Blocks of a SparseDataset, in field order and within a field by colour; and the features of
    each field (the priors' groups; data without fields are one). Every feature must come in one field
    (a DataError names the row's line otherwise)."""
    rows = dataset.entry_rows().long().cpu()
    # data without fields: one field, one prior, its features coloured
    fields = dataset.fields.long().cpu() if dataset.fields is not None else torch.zeros_like(rows)
    features = dataset.indices.long().cpu()
    values = dataset.values_or_ones().cpu()
    field_of = torch.full((dataset.n_features,), -1, dtype=torch.int64)
    field_of[features] = fields
    mixed = field_of[features] != fields
    if bool(mixed.any()):
        entry = int(torch.nonzero(mixed)[0])
        raise DataError(f"{dataset.source.describe_row(int(rows[entry]))}: feature {int(features[entry])} comes in "
                        f"fields {int(fields[entry])} and {int(field_of[features[entry]])}: ALS and MCMC group a "
                        "feature's prior by its one field")
    blocks, priors = [], []
    for prior, field in enumerate(torch.unique(fields).tolist()):
        members = torch.nonzero(field_of == field).flatten()
        priors.append(members.to(device))
        mine = fields == field
        position = torch.full((dataset.n_features,), -1, dtype=torch.int64)
        position[members] = torch.arange(members.numel())
        field_rows, field_local = rows[mine], position[features[mine]]
        repeats = torch.unique(field_rows).numel() < field_rows.numel()
        colour = torch.from_numpy(_colours(field_rows.numpy(), field_local.numpy(), members.numel())) if repeats \
            else torch.zeros(members.numel(), dtype=torch.int64)
        if not members.numel():
            continue
        # a colour's features in id order, and its entries in the field's order: one sort each, then cuts
        by_colour = torch.argsort(colour, stable=True)
        counts = torch.bincount(colour).tolist()
        rank = torch.empty_like(colour)
        rank[by_colour] = torch.arange(colour.numel()) - torch.repeat_interleave(
            torch.cumsum(torch.tensor([0] + counts[:-1]), 0), torch.tensor(counts))
        entry_colour = colour[field_local]
        entry_order = torch.argsort(entry_colour, stable=True)
        entry_counts = torch.bincount(entry_colour, minlength=len(counts)).tolist()
        field_values = values[mine]
        for chosen, entries in zip(torch.split(by_colour, counts), torch.split(entry_order, entry_counts)):
            blocks.append(Block(prior, members[chosen].to(device), field_rows[entries].to(device),
                                rank[field_local[entries]].to(device), field_values[entries].to(device, dtype)))
    return blocks, priors
