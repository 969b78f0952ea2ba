"""One epoch over any row store (alac.runtime.rows.store): the store's `segments(layout, labels, epoch,
lr, order)` is a generator of the epoch's segments, each a run of batches for an executor whose table
holds the segment's rows and a layout whose edges point at that table. The runner here launches every
segment; the store moves rows around its yields (a cache's loads and re-pointed edges before, the
write-back after; a sharded table's gather and all-to-all) and returns the epoch's loss sum (a device
tensor) when its generator ends. Device rows are one segment, the Executor itself."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Segment:
    """A run of an epoch's batches on one executor. chunks: the run's chunks, launched as an epoch of
    their own (Executor.queue_epoch); None: batches first .. end - 1 of the executor's loaded epoch
    (Executor.load_epoch, which a sync store calls once per epoch)."""

    executor: object
    layout: object
    labels: object
    epoch: int
    lr: float
    chunks: torch.Tensor | None = None
    first: int = 0
    end: int = 0


def launch(segment, progress=None):
    """Queue a segment's kernels (their loss adds to its executor's loss_sum); progress(rows): told the
    rows of each launch (of each batch on the reference backend, which trains on the host)."""
    executor = segment.executor
    executor.on_rows = progress
    try:
        if segment.chunks is None:
            executor.queue_batches(segment.layout, segment.labels, segment.first, segment.end)
        else:
            executor.queue_epoch(segment.layout, segment.labels, segment.epoch, segment.lr, segment.chunks)
    finally:
        executor.on_rows = None


def queue_epoch(store, layout, labels, epoch, lr, order=None, progress=None):
    """Queue an epoch over the store (the layout's order of the epoch unless given); returns its loss
    sum, a device tensor of one element that is final once the GPU has run what was queued."""
    return run_segments(store.segments(layout, labels, epoch, lr, order), progress)


def run_segments(segments, progress=None):
    """Launch every segment of a store's generator; returns what the generator returns (the loss sum)."""
    while True:
        try:
            segment = next(segments)
        except StopIteration as finished:
            return finished.value
        launch(segment, progress)


def train_epoch(store, layout, labels, epoch, lr, order=None):
    """One epoch over the store; returns its mean training loss."""
    return float(queue_epoch(store, layout, labels, epoch, lr, order)) / max(layout.n_rows, 1)


def train_epochs(store, layout, labels, first_epoch, count, lr, progress=None):
    """count epochs from first_epoch over the store, queued back to back with one read of their mean
    training losses at the end (a list): an epoch's host work (its small launches, the kernel launch)
    overlaps the previous epoch's kernels instead of preceding its own (benchmarks/fit_queue.py).
    progress(rows): as launch's."""
    losses = None
    for index in range(count):
        loss = queue_epoch(store, layout, labels, first_epoch + index, lr, progress=progress)
        if losses is None:
            losses = torch.zeros(count, dtype=loss.dtype, device=loss.device)
        losses[index] = loss.reshape(-1)[0]
    if losses is None:
        return []
    return (losses.double() / max(layout.n_rows, 1)).tolist()


class Segmented:
    """train_epoch and train_epochs (the functions above) as methods of whatever gives an epoch's
    segments: an Executor, a row store, a HybridHash cache."""

    def train_epoch(self, layout, labels, epoch, lr, order=None):
        """One epoch; returns its mean training loss."""
        return train_epoch(self, layout, labels, epoch, lr, order)

    def train_epochs(self, layout, labels, first_epoch, count, lr):
        """count epochs from first_epoch, queued back to back; their mean training losses."""
        return train_epochs(self, layout, labels, first_epoch, count, lr)
