"""Seeded splits of a data set into train / validation / test rows."""

from __future__ import annotations

import torch

from alac.errors import OptionError


def split_rows(n_rows, fractions=(0.8, 0.1, 0.1), seed=0):
    """Disjoint row-index tensors covering all rows, sized by `fractions` (which must sum to 1).

    The permutation comes from a CPU generator, so a seed gives the same split on any machine.
    """
    if any(f < 0 for f in fractions) or abs(sum(fractions) - 1.0) > 1e-9:
        raise OptionError(f"split fractions must be non-negative and sum to 1, got {fractions}")
    permutation = torch.randperm(n_rows, generator=torch.Generator().manual_seed(seed))
    bounds = [round(n_rows * sum(fractions[:i])) for i in range(len(fractions) + 1)]
    bounds[-1] = n_rows
    return [permutation[bounds[i]:bounds[i + 1]].sort().values for i in range(len(fractions))]


def split(dataset, fractions=(0.8, 0.1, 0.1), seed=0):
    """Data sets for the row splits of `split_rows` (rows keep their file order inside a split)."""
    return [dataset.take(rows) for rows in split_rows(dataset.n_rows, fractions, seed)]


def hold_out(dataset, fraction, seed=0):
    """(the rest, a random `fraction` of the rows), or (dataset, None) when that share would leave
    either side without rows: the validation split of `alac train` and the estimators."""
    held = round(dataset.n_rows * fraction)
    if not 1 <= held < dataset.n_rows:
        return dataset, None
    rest, valid = split(dataset, (1 - fraction, fraction), seed)
    return rest, valid
