"""Parameters larger than the GPU, FAE's way: hot rows on the GPU, every row in host memory.

FAE (`../shared/papers`, §4) trains pure batches: a hot input (every feature it touches hot,
`alac.runtime.rows.profiler.classify_inputs`) trains on the GPU against a table of the hot rows only; a
cold input trains against the whole table, which lives in pinned host memory and which the kernels
reach through mapped pointers (the access layer's host placement). Both tables are kept consistent
by copying hot rows, their optimizer state and the globals at every swap between hot and cold
batches: the hot rows either kind of batch changed since the last swap, or (dirty_only off) all.
The shuffle scheduler sets how many batches of a kind run between swaps: a rate r is the share of an
epoch's batches of that kind (R(100) = all cold batches, then all hot; R(1) = 1 %), moved by the
validation loss after each swap (FAE's Eq. 5 with min and max the right way round).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import torch

from alac.runtime.device.memory import mapped_view
from alac.runtime.execution import epoch as runner
from alac.runtime.execution.epoch import Segment
from alac.runtime.execution.state import ModelState
from alac.runtime.movement.layout import build_layout
from alac.runtime.rows.profiler import classify_inputs

# FAE's rates: R(100), its starting R(50) and the floor R(1), as shares of an epoch's batches
FULL_RATE, START_RATE, FLOOR_RATE = 1.0, 0.5, 0.01
# swaps in a row whose validation loss improves before the rate doubles (FAE's u)
IMPROVING_SWAPS = 4


@dataclass(eq=False)
class FaeData:
    """A data set split for FAE: the hot inputs laid out in hot-row ids (hot_ids[i] is the global id
    of hot row i), the cold inputs in global ids; both keep ids in place (no re-index)."""

    hot_ids: torch.Tensor
    hot: object            # BigraphLayout or None when no input is hot
    cold: object
    hot_input_share: float


def fae_data(dataset, hot, options, device):
    """FaeData of a data set under per-feature hot flags (alac.runtime.rows.profiler.hot_features)."""
    hot = hot.to(dataset.device)
    hot_rows, cold_rows = classify_inputs(dataset, hot)
    hot_ids = torch.nonzero(hot).squeeze(1)
    slot = torch.full((dataset.n_features,), -1, dtype=torch.int32, device=dataset.device)
    slot[hot_ids] = torch.arange(hot_ids.numel(), dtype=torch.int32, device=dataset.device)

    def laid_out(rows, n_features, remap):
        if rows.numel() == 0:
            return None
        part = dataset.take(rows)
        if remap:
            part = dataclasses.replace(part, indices=slot[part.indices.long()], n_features=n_features)
        return build_layout(part, options, device, feature_order=torch.arange(n_features))

    return FaeData(hot_ids, laid_out(hot_rows, hot_ids.numel(), True), laid_out(cold_rows, dataset.n_features, False),
                   hot_rows.numel() / max(dataset.n_rows, 1))


def _next_segment(kind, done, totals, rate):
    """(kind, first batch, batches) of the next segment from `kind` on (cold and hot in turn), or None
    when the epoch is done: ceil(rate * its batches) of a kind at a time, at least one."""
    for turn in (kind, "hot" if kind == "cold" else "cold"):
        if done[turn] < totals[turn]:
            return turn, done[turn], min(max(1, math.ceil(rate * totals[turn])), totals[turn] - done[turn])
    return None


def swap_segments(cold_batches, hot_batches, rate):
    """[(kind, first batch, batches)] of an epoch at a fixed rate, cold first."""
    segments, done, totals = [], {"cold": 0, "hot": 0}, {"cold": cold_batches, "hot": hot_batches}
    segment = _next_segment("cold", done, totals, rate)
    while segment is not None:
        segments.append(segment)
        kind, _, count = segment
        done[kind] += count
        segment = _next_segment("hot" if kind == "cold" else "cold", done, totals, rate)
    return segments


class ShuffleScheduler:
    """FAE's Eq. 5, min and max the right way round: after a swap whose validation loss is no better
    than the last one's, the rate halves (to FLOOR_RATE at least); after IMPROVING_SWAPS improving
    swaps in a row it doubles (to FULL_RATE at most)."""

    def __init__(self, rate=START_RATE):
        self.rate, self._last, self._improving = rate, None, 0

    def after_swap(self, valid_loss):
        if self._last is not None and valid_loss >= self._last:
            self.rate, self._improving = max(self.rate / 2, FLOOR_RATE), 0
        elif self._last is not None:
            self._improving += 1
            if self._improving >= IMPROVING_SWAPS:
                self.rate, self._improving = min(self.rate * 2, FULL_RATE), 0
        self._last = valid_loss
        return self.rate


class FaeTables:
    """The two executors of FAE and the copies that keep them consistent: `cold` holds every row (in
    host memory where the plan places its params there), `hot` the hot rows on the device. A swap
    copies the hot rows either table changed since the last one (dirty_only) or every hot row, by GPU
    gathers and scatters over the host table's mapped address."""

    def __init__(self, cold, hot, hot_ids, dirty_only=True):
        self.cold, self.hot, self.hot_ids = cold, hot, hot_ids
        self.dirty_only = dirty_only
        self.on = "cold"        # the executor whose hot rows are current
        self.rows_copied = 0    # hot rows copied at swaps

    def initialize(self, layout, value_scale):
        """Fresh parameters drawn for every row (the cold executor's), the hot rows copied to the GPU."""
        self.cold.initialize(layout, value_scale)
        self.hot.value_scale = value_scale
        device = self.hot.device
        self._ids = self.hot_ids.to(device)
        # hot row of a global id (-1: cold), to mark what a cold batch changes
        self._slot = torch.full((layout.n_features,), -1, dtype=torch.int64, device=device)
        self._slot[self._ids] = torch.arange(self._ids.numel(), device=device)
        self._dirty = torch.zeros(self._ids.numel(), dtype=torch.bool, device=device)
        self.reload()

    def reload(self):
        """The hot table gathered anew from the cold one (fresh, or replaced by a restored state)."""
        device = self.hot.device
        state = self.cold.state
        self.hot.state = ModelState.placed({k: mapped_view(v, device)[self._ids] for k, v in state.params.items()},
                                           {k: v.clone() for k, v in state.globals.items()},
                                           {k: mapped_view(v, device)[self._ids] for k, v in state.states.items()},
                                           device)
        self._dirty.zero_()
        self.on = "cold"

    def use(self, kind):
        """Make `kind`'s table current: copy the (dirty) hot rows, their optimizer state and the globals."""
        if kind == self.on:
            return
        device = self.hot.device
        rows = torch.nonzero(self._dirty).squeeze(1) if self.dirty_only else \
            torch.arange(self._ids.numel(), device=device)
        ids = self._ids[rows]
        for part in ("params", "states"):
            for name, hot in getattr(self.hot.state, part).items():
                cold = mapped_view(getattr(self.cold.state, part)[name], device)
                if kind == "cold":
                    cold[ids] = hot[rows]
                else:
                    hot[rows] = cold[ids]
        source, target = (self.hot, self.cold) if kind == "cold" else (self.cold, self.hot)
        for name, values in target.state.globals.items():
            values.copy_(source.state.globals[name].to(values.device))
        self._dirty.zero_()
        self.rows_copied += rows.numel()
        self.on = kind

    def _mark(self, kind, layout, chunks):
        """The hot rows the chunks' batches changed: dirty until the next swap."""
        _, features, _ = layout.edges_of(chunks)
        features = features.to(self._dirty.device)
        rows = features if kind == "hot" else self._slot[features]
        self._dirty[rows[rows >= 0]] = True

    def whole(self):
        """The executor of every row, current (the hot rows copied back): for predictions, checkpoints."""
        self.use("cold")
        return self.cold

    def current_state(self):
        return self.whole().state

    def segments(self, split, labels_of, epoch, seed, lr, scheduler, validate=None):
        """A generator of an epoch of FAE's Segments (alac.runtime.execution.epoch): the cold and hot
        inputs of split (FaeData), each kind's epoch loaded on its executor in its own chunk order,
        run in segments at scheduler.rate, cold first; after every swap validate() (the validation
        loss of every row's current parameters, or None: a fixed rate) moves the rate. The segments
        run, [(kind, first batch, batches)], land in self.last_segments; returns the epoch's loss sum
        (a device tensor)."""
        layouts = {kind: layout for kind, layout in (("cold", split.cold), ("hot", split.hot)) if layout is not None}
        executors = {"cold": self.cold, "hot": self.hot}
        started = self.cold.batches_done
        for executor in executors.values():
            executor.loss_sum.zero_()
        labels, orders, totals = {}, {}, {"cold": 0, "hot": 0}
        for kind, layout in layouts.items():
            labels[kind], orders[kind] = labels_of(layout), layout.chunk_order(epoch, seed)
            executors[kind].load_epoch(layout, labels[kind], epoch, lr, orders[kind])
            totals[kind] = -(-orders[kind].numel() // executors[kind].plan.chunks_per_batch)
        done, self.last_segments = {"cold": 0, "hot": 0}, []
        segment = _next_segment("cold", done, totals, scheduler.rate)
        while segment is not None:
            kind, first, count = segment
            self.use(kind)
            yield Segment(executors[kind], layouts[kind], labels[kind], epoch, lr, first=first, end=first + count)
            if self.dirty_only:
                per_batch = executors[kind].plan.chunks_per_batch
                self._mark(kind, layouts[kind], orders[kind][first * per_batch:(first + count) * per_batch])
            self.last_segments.append(segment)
            done[kind] += count
            following = "hot" if kind == "cold" else "cold"
            if validate is not None and done[following] < totals[following]:
                scheduler.after_swap(validate())
            segment = _next_segment(following, done, totals, scheduler.rate)
        for executor in executors.values():
            executor.batches_done = started + sum(totals.values())
        return self.cold.loss_sum.to(self.hot.device) + self.hot.loss_sum

    def train_epoch(self, split, labels_of, epoch, seed, lr, scheduler, validate=None):
        """An epoch of segments (FaeTables.segments); returns them, [(kind, first batch, batches)]."""
        runner.run_segments(self.segments(split, labels_of, epoch, seed, lr, scheduler, validate))
        return self.last_segments
