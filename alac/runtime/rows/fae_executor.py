"""An executor that trains FAE's way (alac.runtime.rows.fae): what the Trainer trains with when the
planner (alac.runtime.planning.param_planner) places the model's rows in pinned host memory with FAE's hot
table of the budget's most accessed rows on the GPU. It answers as an Executor does (initialize,
train_epochs, state, predict, ...): an epoch runs the training rows as pure hot and cold batches in
segments, hot ones against the hot table, cold ones against every row in host memory; everything
else reads the host table, whose hot rows are copied back first. The segments' length is FAE's
shuffle schedule: R(50) at first, cold first, then steered by the validation loss after every swap
when the Trainer has validation rows (FAE's Eq. 5; the first STEERING_ROWS of them), else fixed.

The batches are FAE's, not the layout's: the hot inputs and the cold ones are laid out apart, so an
epoch visits the same rows in another order (and sync batches, whatever the plan's semantics).
"""

from __future__ import annotations

import dataclasses

import torch

from alac.runtime.movement.layout import LayoutOptions
from alac.runtime.rows.fae import START_RATE, FaeTables, ShuffleScheduler, fae_data
from alac.runtime.rows.host_rows import HostRowsExecutor

# validation rows whose loss steers the schedule after every swap (a sample: FAE validates this often)
STEERING_ROWS = 4096


class FaeExecutor(HostRowsExecutor):
    kind = "fae"

    @classmethod
    def planned(cls, executor_arguments, placement, training):
        """The store of a planner's placement (alac.runtime.rows.registry)."""
        return cls(*executor_arguments, placement, training.dataset, training.layout, training.labels_of)

    def __init__(self, model, plan, backend, device, seed, optimizer, schedule, exact_l2, placement, dataset, layout,
                 labels_of):
        """placement: the planner's ParamPlacement (mode fae); dataset: the training rows, laid out in
        `layout` (whose frequency order ranks the rows: its first placement.fae.hot_rows are hot);
        labels_of(layout): a layout's labels as the model reads them."""
        plan = dataclasses.replace(plan, semantics="sync")
        hot_rows = placement.fae.hot_rows
        super().__init__(model, plan, backend, device, seed, optimizer, schedule, exact_l2,
                         dataclasses.replace(plan, hot_size=min(plan.hot_size, hot_rows)))
        in_layout_ids = dataclasses.replace(
            dataset, indices=layout.old_to_new.to(dataset.device)[dataset.indices.long()].to(dataset.indices.dtype))
        hot = torch.arange(layout.n_features, device=dataset.device) < hot_rows
        self.split = fae_data(in_layout_ids, hot, LayoutOptions(chunk_size=plan.chunk_size), self.working.device)
        self.tables = FaeTables(self.whole, self.working, self.split.hot_ids)
        self.labels_of = labels_of
        self.placement = placement
        self.scheduler = ShuffleScheduler(START_RATE)
        self._validate = None

    def _current(self):
        return self.tables.whole()

    def _restored(self):
        self.tables.reload()     # the hot table gathered anew

    def steer_with(self, layout, labels):
        """Steer the schedule by the loss of these validation rows (a layout in the training ids)."""
        self._validate = lambda: self.sample_loss(layout, labels, STEERING_ROWS)

    def epoch_record(self, epoch):
        return {"hot_input_share": self.split.hot_input_share, "fae_rate": self.scheduler.rate}

    def initialize(self, layout, value_scale=None):
        """Every row drawn as the all-GPU run draws it (the training layout's ids), the hot ones copied."""
        self.tables.initialize(layout, layout.value_scale() if value_scale is None else value_scale)
        self.batches_done = 0
        self._initialized = True

    def segments(self, layout, labels, epoch, lr, order=None):
        """An epoch of FAE's pure batches (FaeTables.segments; layout, labels and order: the Trainer's,
        unused); returns its loss sum."""
        return (yield from self.tables.segments(self.split, self.labels_of, epoch, self.seed, lr, self.scheduler,
                                                self._validate))
