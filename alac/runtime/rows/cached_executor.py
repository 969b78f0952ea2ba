"""An executor whose rows live in pinned host memory behind a HybridHash cache on the GPU: what the
Trainer trains with when the planner finds the model's rows over the GPU budget
(alac.runtime.planning.param_planner). It answers as an Executor does (initialize, train_epochs, state,
predict, ...): training goes through the cache, everything else reads the host table, whose rows
the cache writes back first."""

from __future__ import annotations

import dataclasses
import time

import torch

from alac.runtime.rows.host_rows import HostRowsExecutor
from alac.runtime.rows.hybrid_hash import PERIOD_SEGMENTS, HybridHash, working_plan

# batches timed on the cache before training to give the cost model its kernel time
CALIBRATION_BATCHES = 16


class CachedExecutor(HostRowsExecutor):
    kind = "hybrid_hash"

    @classmethod
    def planned(cls, executor_arguments, placement, training):
        """The store of a planner's placement (alac.runtime.rows.registry)."""
        return cls(*executor_arguments, placement)

    def __init__(self, model, plan, backend, device, seed, optimizer, schedule, exact_l2, placement):
        """placement: the planner's ParamPlacement (mode hybrid_hash, its cache shape)."""
        # the kernels' hot segment lives in the hot store: at most its rows
        working = dataclasses.replace(plan, hot_size=min(plan.hot_size, placement.shape.capacity))
        super().__init__(model, plan, backend, device, seed, optimizer, schedule, exact_l2, working)
        self.cache = HybridHash(self.whole, self.working, placement.shape)
        self.placement = placement
        self.epoch_hit_ratio = {}   # epoch (counted from 1) -> the mean hit ratio of its batches

    statistics = property(lambda self: self.cache.statistics)

    def _current(self):
        return self.cache.whole_executor()

    def _restored(self):
        self.cache.clear()       # the cache starts empty

    def initialize(self, layout, value_scale=None):
        self.cache.initialize(layout, layout.value_scale() if value_scale is None else value_scale)
        self._initialized = True

    def calibrate(self, layout, labels, placement=None):
        """Complete the forecast with the kernels' epoch time, with every multiprocessor and leaving
        some to the side stream (calibrate_kernels), and train on the cheaper (returns the placement
        so completed)."""
        forecast = calibrate_kernels(self.cache, layout, labels, self.placement.forecast)
        self.placement = dataclasses.replace(self.placement, forecast=forecast)
        return self.placement

    def epoch_record(self, epoch):
        return {"hit_ratio": self.epoch_hit_ratio.get(epoch)}

    def segments(self, layout, labels, epoch, lr, order=None):
        """An epoch's segments through the cache (HybridHash.segments); its mean hit ratio lands in
        epoch_hit_ratio[epoch + 1]."""
        before = len(self.cache.statistics.hit_ratio)
        loss = yield from self.cache.segments(layout, labels, epoch, lr, order)
        ratios = self.cache.statistics.hit_ratio[before:]
        self.epoch_hit_ratio[epoch + 1] = sum(ratios) / max(len(ratios), 1)
        return loss


def kernel_seconds(working, layout, labels, rows):
    """Seconds an epoch of the working executor's kernels takes, from CALIBRATION_BATCHES batches of
    the layout (the cache's `rows` stand in for the layout's: feature id modulo rows); its state is
    put back as it was, in place (kept meanwhile in host memory: a GPU copy of a budget's cache
    doubled it)."""
    live = [*working.state.params.values(), *working.state.globals.values(), *working.state.states.values()]
    saved, done = [values.to("cpu", copy=True) for values in live], working.batches_done
    scratch = dataclasses.replace(layout, edge_feature=torch.where(layout.edge_feature >= 0,
                                                                   layout.edge_feature % rows, -1),
                                  n_features=rows)
    order = layout.chunk_order(0, working.seed)[:CALIBRATION_BATCHES * working.plan.chunks_per_batch]
    working.queue_epoch(scratch, labels, 0, 0.0, order)   # compiles the kernels off the clock
    if working.device.type == "cuda":
        torch.cuda.synchronize(working.device)
    started = time.perf_counter()
    working.queue_epoch(scratch, labels, 0, 0.0, order)
    if working.device.type == "cuda":
        torch.cuda.synchronize(working.device)
    seconds = (time.perf_counter() - started) * layout.n_chunks / max(order.numel(), 1)
    for values, kept in zip(live, saved):
        values.copy_(kept)
    working.batches_done = done
    return seconds


def calibrate_kernels(cache, layout, labels, forecast):
    """The CacheForecast completed with the bookkeeping's measured cost per edge, the row traffic of
    the cache's own moves, and the kernels' time as the working executor's plan launches them and,
    where working_plan leaves multiprocessors to the side stream, with those left; the working
    executor left on the cheaper of the two."""
    working, rows = cache.working, cache.shape.rows
    # a segment's longest reach and half of it: the slope is the cost per edge, the rest per segment
    order = layout.chunk_order(0, working.seed)
    longest = working.plan.chunks_per_batch * max(2, cache.shape.refresh // PERIOD_SEGMENTS)
    lengths = [min(longest, order.numel()) // 2, min(longest, order.numel())]
    seconds = [cache.bookkeeping_seconds(layout, order[:length]) for length in lengths]
    edges = [forecast.edges * length / max(layout.n_chunks, 1) for length in lengths]
    per_edge = max(seconds[1] - seconds[0], 0.0) / max(edges[1] - edges[0], 1.0)
    forecast = forecast.with_bookkeeping(per_edge * 1e9, max(seconds[0] - per_edge * edges[0], 0.0))
    per_row = cache.row_move_seconds(layout, order[:lengths[1]])
    if per_row is not None:
        forecast = forecast.with_row_moves(per_row)
    programs = working.plan.programs
    overlapped = working_plan(working.plan, working.device)
    full = kernel_seconds(working, layout, labels, rows)
    side = None
    if overlapped.programs != programs:
        working.use_programs(overlapped.programs)
        side = kernel_seconds(working, layout, labels, rows)
    forecast = dataclasses.replace(forecast, kernel_seconds=full, side_kernel_seconds=side)
    working.use_programs(overlapped.programs if forecast.overlapped else programs)
    return forecast
