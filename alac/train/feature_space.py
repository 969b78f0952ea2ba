"""A validation, test or prediction set in the model's feature space. Features it has beyond the
training feature space are ignored (the policy of Vowpal Wabbit and libFM: a feature never trained has
no weight) and reported once; `unseen="error"` makes them a DataError naming the file, line and token
instead."""

from __future__ import annotations

import dataclasses
import sys

from alac.data.dataset import same_numbering


def in_training_space(dataset, feature_ids, n_features, unseen="ignore"):
    """(the data set in a model's space of n_features, its entries dropped as unseen): a data set of
    another numbering than feature_ids (the file's own ids, a renumbered space) is renumbered first."""
    if not same_numbering(dataset.feature_ids, feature_ids):
        dataset = dataset.in_space_of(feature_ids)
    if dataset.n_features <= n_features:
        return (dataclasses.replace(dataset, n_features=n_features) if dataset.n_features < n_features
                else dataset), 0
    if unseen == "error":
        dataset.check_feature_space(n_features)
    keep = dataset.indices < n_features
    dropped = int((~keep).sum())
    if not dropped:
        return dataclasses.replace(dataset, n_features=n_features), 0
    rows = dataset.entry_rows()
    dropped_rows = int(rows[~keep].unique().numel())
    print(f"alac: {dropped:,} entries of {dataset.source.path or 'the data'} ({dropped_rows:,} "
          f"rows) have features the model never trained; they are ignored", file=sys.stderr)
    return dataclasses.replace(dataset.with_entries(keep, rows), n_features=n_features), dropped
