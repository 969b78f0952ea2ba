"""The row store: where a model's per-feature rows (params and optimizer state) live and how an
epoch's rows reach the kernels.

Every store answers as an Executor does (initialize, state, batches_done, predict, predict_slots,
sample_loss, settings), its state always every row in the layout's order whatever the store (so a
checkpoint moves between stores), gives an epoch's segments (`segments`: a generator that the one
runner, alac.runtime.execution.epoch, launches), and has the hooks below. The trainers hold one
and use only this protocol, never asking which store it is. The stores: DeviceRows
(alac.runtime.rows.device), CachedExecutor (HybridHash), FaeExecutor (FAE's hot table),
ShardedExecutor (rows over ranks), DiskRows (memory-mapped files); alac.runtime.rows.registry gives
the one of a planner's placement.
"""

from __future__ import annotations

import contextlib

from alac.runtime.execution.epoch import Segmented


class RowStore(Segmented):
    kind = "device"          # the placement it is, as `alac inspect` and the planner's reasons name it
    host_rows = False        # its rows live in host memory: a trainer snapshots them only where that allows
    sharded = False          # no process holds every row (rank-sharded or hybrid tables)
    statistics = None        # a cache's traffic figures (alac.runtime.rows.hybrid_hash.CacheStatistics)
    snapshots = True         # a trainer may copy its rows into host memory (divergence snapshots)

    def segments(self, layout, labels, epoch, lr, order=None):
        """A generator of the epoch's Segments (alac.runtime.execution.epoch) that returns the epoch's
        loss sum (a device tensor); the store moves its rows around its yields."""
        raise NotImplementedError

    def has_state(self):
        """Whether the model has its parameters (without assembling a state that is costly to assemble)."""
        return self.state is not None

    def calibrate(self, layout, labels, placement):
        """The placement completed by what only training can measure (kernel times), once the store is
        initialized; the store may change how it trains accordingly."""
        return placement

    def steer_with(self, layout, labels):
        """Validation rows (a layout in the training ids) a store's schedule may steer by."""

    def epoch_record(self, epoch):
        """The store's figures of an epoch (counted from 1) for the trainer's history."""
        return {}

    def assembled(self):
        """A context in which `state` is cheap to read repeatedly (sharded rows gathered once)."""
        return contextlib.nullcontext()
