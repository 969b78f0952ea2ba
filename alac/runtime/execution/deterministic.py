"""Deterministic sync steps: the per-feature gradient sums of a batch in a fixed order.

The train kernels of a deterministic plan store every edge's gradient at the edge's slot and every
chunk's loss and global gradients at the chunk's slot (no floating-point atomics). Before the update
kernel, each batch's stored gradients are summed per feature in a fixed order: edges sorted by
(batch, feature), stable, so that within a feature they keep their layout order, and each run summed
by a segment reduction into the gradient accumulators the update kernel reads. Every step is a fixed
sequence of operations on fixed inputs, so a run repeats bit for bit.

The sort is done once per epoch for all its batches (`EpochReduction`): a first version sorted each
batch's edges before its update and ran far slower than the atomic plan; per batch there remain a
gather, a segment sum and a scatter.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class EpochReduction:
    """Every batch's edges in summation order, and its features' runs among them."""
    chunks: torch.Tensor            # the epoch's chunk order
    chunks_per_batch: int
    edges: torch.Tensor             # edge positions, sorted by (batch, feature), stable
    lengths: torch.Tensor           # edges per (batch, feature) run
    features: torch.Tensor          # the feature of every run
    edge_bounds: list               # batch b's edges: edges[edge_bounds[b]:edge_bounds[b + 1]]
    run_bounds: list                # batch b's runs: lengths/features[run_bounds[b]:run_bounds[b + 1]]


def plan_epoch(layout, chunks, chunks_per_batch):
    """The summation order of an epoch whose batches are consecutive runs of chunks_per_batch chunks."""
    edges, features, rows = layout.edges_of(chunks)
    batch = rows // (layout.chunk_size * chunks_per_batch)
    key = batch * layout.n_features + features
    key, order = torch.sort(key, stable=True)
    runs, lengths = torch.unique_consecutive(key, return_counts=True)
    n_batches = (chunks.numel() + chunks_per_batch - 1) // chunks_per_batch
    edge_counts = torch.bincount(batch, minlength=n_batches)
    run_counts = torch.bincount(runs // layout.n_features, minlength=n_batches)
    bounds = torch.stack([torch.cumsum(edge_counts, 0), torch.cumsum(run_counts, 0)]).cpu().tolist()
    return EpochReduction(chunks, chunks_per_batch, edges[order], lengths, runs % layout.n_features,
                          [0] + bounds[0], [0] + bounds[1])


def reduce_batch(reduction, batch, find, params, globals_, loss_sum):
    """Sum batch `batch`'s stored edge gradients per feature (fixed order) into the accumulators;
    find(role, of) gives the kernels' buffer of that manifest role."""
    e0, e1 = reduction.edge_bounds[batch], reduction.edge_bounds[batch + 1]
    r0, r1 = reduction.run_bounds[batch], reduction.run_bounds[batch + 1]
    edges, lengths, touched = reduction.edges[e0:e1], reduction.lengths[r0:r1], reduction.features[r0:r1]
    # a batch of empty rows touches no feature (segment_reduce refuses empty input)
    for name, value in (params.items() if r1 > r0 else ()):
        stored = find("edge_grad", name)
        per_edge = stored.view(-1, value.shape[1])[edges] if value.dim() > 1 else stored[edges]
        find("grad", name)[touched] = torch.segment_reduce(per_edge, "sum", lengths=lengths, axis=0)
    step = reduction.chunks_per_batch
    chunks = reduction.chunks[batch * step:(batch + 1) * step]
    for name in globals_:
        find("grad", name)[0] = find("chunk_grad", name)[chunks].sum()
    loss_sum += find("chunk_loss")[chunks].sum()
