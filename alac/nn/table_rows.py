"""Where a field model's table rows live (alac.nn.deep_models, alac.nn.field_aware): all on one
device (SparseAggregate), over ranks (alac.nn.ranked: replicated, sharded or hybrid) or in host memory
with the hot ones cached on the GPU (alac.nn.host_cached). The trainer plans it (alac.train.deep_ranks,
alac.train.table_memory); the model builds its tables from it."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from alac.errors import OptionError
from alac.nn.aggregate import SparseAggregate
from alac.nn.host_cached import HostCachedAggregate
from alac.nn.ranked import RankedAggregate


@dataclass(frozen=True)
class TableRows:
    """ranks, replicated, order: the rows over several ranks (RankedAggregate's arguments); hot: the
    ids cached on the GPU, the rows in host memory (None: every row on the device); staging_rows: the
    cache's slots for a batch's other rows at first (HostCachedAggregate's)."""

    ranks: object = None
    replicated: int | None = None
    order: torch.Tensor | None = None
    hot: torch.Tensor | None = None
    staging_rows: int = 0

    def __post_init__(self):
        if self.hot is not None and self.ranks is not None and self.ranks.world > 1:
            raise OptionError("tables over several ranks shard their rows (rank_tables sharded) where one GPU "
                              "cannot hold them: the host-memory cache is for one process")

    def tables(self, model, n_features, **options):
        """The SparseAggregate of `model` over n_features rows placed so (options: SparseAggregate's)."""
        if self.hot is not None:
            return HostCachedAggregate(model, n_features, self.hot, self.staging_rows, **options)
        if self.ranks is None or self.ranks.world == 1:
            return SparseAggregate(model, n_features, **options)
        return RankedAggregate(model, n_features, self.ranks, self.replicated, self.order, **options)


# every row on the one device (the models' default)
ONE_DEVICE = TableRows()
