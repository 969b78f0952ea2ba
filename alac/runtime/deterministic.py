"""Deterministic sync steps: the per-feature gradient sums of a batch in a fixed order.

The train kernels of a deterministic plan store every edge's gradient at the edge's slot and every
chunk's loss and global gradients at the chunk's slot (no floating-point atomics). Before the update
kernel, this reduction sorts the batch's edges by feature (stable, so edges keep their layout order
within a feature), sums each feature's run with a segment reduction, and writes the sums into the
gradient accumulators the update kernel reads. Every step is a fixed sequence of operations on fixed
inputs, so a run repeats bit for bit. It costs a sort and a segment sum per batch and cannot be
replayed as a CUDA graph (the number of features per batch varies).
"""

from __future__ import annotations

import torch


def reduce_batch(layout, chunks, buffers, params, globals_, loss_sum):
    """Sum the batch's stored edge gradients per feature (fixed order) into the accumulators."""
    edges, features, _ = layout.edges_of(chunks)
    features, order = torch.sort(features, stable=True)
    edges = edges[order]
    touched, counts = torch.unique_consecutive(features, return_counts=True)
    for name, value in params.items():
        stored = buffers[f"edge_grad_{name}_ptr"]
        per_edge = stored.view(-1, value.shape[1])[edges] if value.dim() > 1 else stored[edges]
        buffers[f"grad_{name}_ptr"][touched] = torch.segment_reduce(per_edge, "sum", lengths=counts, axis=0)
    for name in globals_:
        buffers[f"grad_{name}_ptr"][0] = buffers[f"chunk_grad_{name}_ptr"][chunks].sum()
    loss_sum += buffers["chunk_loss_ptr"][chunks].sum()
