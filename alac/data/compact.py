"""Feature spaces that follow the ids a data set uses, not its largest id.

A LIBSVM file whose ids reach 10^8, or Criteo's hashed fields (39 x 2^20 ids, of which a sample uses
a few thousand), declare a space far larger than the features their rows have; a model's rows, its
optimizer state and the layout's re-index tables are as large as that space. `compact_feature_ids`
renumbers such data sets (read together, one space) densely over the ids they use, in ascending
order, and records the file's id of every new id (`SparseDataset.feature_ids`), which checkpoints
keep, so that predictions and exports speak the file's ids again.
"""

from __future__ import annotations

import dataclasses

import torch

# A space is renumbered when its unused ids outnumber the used ones and exceed this many: below it,
# the unused ids' rows and tables (4-20 bytes each) cost less than a map worth keeping.
MIN_UNUSED = 1 << 20


def used_ids(datasets):
    """The ids the data sets use, ascending (int64): by counting where the space is small beside the
    entries, by sorting the entries where it is not (a 10^8 space of three rows)."""
    n_features = datasets[0].n_features
    nnz = sum(d.nnz for d in datasets)
    if n_features <= 4 * nnz:
        counts = torch.zeros(n_features, dtype=torch.int64)
        for dataset in datasets:
            counts += torch.bincount(dataset.indices.cpu().long(), minlength=n_features)
        return torch.nonzero(counts).squeeze(1)
    return torch.unique(torch.cat([d.indices.cpu() for d in datasets]).long())


def compact_feature_ids(datasets, min_unused=MIN_UNUSED):
    """The data sets (of one feature space, as read together) renumbered densely over the ids they use
    where most of the space is unused (see MIN_UNUSED); else as they are. Returns (data sets, whether
    renumbered)."""
    datasets = list(datasets)
    if not datasets or any(d.feature_ids is not None for d in datasets):
        return datasets, False
    n_features = datasets[0].n_features
    used = used_ids(datasets)
    unused = n_features - used.numel()
    if unused <= max(min_unused, used.numel()):
        return datasets, False
    renumbered = []
    for dataset in datasets:
        indices = torch.searchsorted(used, dataset.indices.cpu().long()).int().to(dataset.device)
        renumbered.append(dataclasses.replace(dataset, indices=indices, n_features=used.numel(), feature_ids=used))
    return renumbered, True
