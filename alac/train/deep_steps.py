"""A field model's batches, and its training step in PICASSO's interleaving (alac.nn.interleave), for
alac.train.deep:
D-interleaving, the batch in micro-batches whose losses backpropagate in turn while the tables record
their rows' gradients and step once; K-interleaving, the next micro-batch's lookups issued on a side
stream before this one's MLP. The same step as the whole batch's (tests/train/test_deep.py)."""

from __future__ import annotations

import torch

from alac.nn.interleave import Interleaving, interleaved_step, split_rows
from alac.train.deep_ranks import share


def interleaved_loss(trainer, batch, scale):
    """The forward and backward of `batch` (a SparseDataset) by trainer.network as trainer.settings'
    micro_batches and side_stream say, each part's summed loss times `scale` backpropagated (the
    tables step once, at the end); returns the batch's summed loss. The dense optimizer's step is the
    caller's."""
    network, settings = trainer.network, trainer.settings
    device = batch.indptr.device
    parts = [batch.take(torch.arange(first, end, device=device))
             for first, end in split_rows(batch.n_rows, settings.micro_batches)]
    inputs = [trainer.inputs(part) for part in parts]

    def sparse(index):
        return network.bags(*inputs[index][0])

    def dense(bags, index):
        logit = network.logit(bags, inputs[index][1])
        return trainer._loss(logit, parts[index].labels, reduction="sum") * scale

    interleaving = Interleaving(settings.micro_batches, settings.side_stream)
    return interleaved_step(network.tables, list(range(len(parts))), sparse, dense, interleaving) / scale


def batches(dataset, batch_size, ranks=None):
    """The dataset's consecutive batches of batch_size rows, as views of its tensors (the entries'
    bounds read from the device once, not a round trip per batch); over several ranks each is (the
    batch's rows, this rank's share of them: alac.train.deep_ranks.share)."""
    starts = list(range(0, dataset.n_rows, batch_size))
    spans = [(first, min(first + batch_size, dataset.n_rows)) for first in starts]
    if ranks is not None:
        spans = [(first + a, first + b) for first, end in spans for a, b in [share(end - first, ranks)]]
    cuts = sorted({row for span in spans for row in span})
    bounds = dict(zip(cuts, dataset.indptr[torch.tensor(cuts, device=dataset.indptr.device)].tolist()))
    for (first, end), start in zip(spans, starts):
        low, high = bounds[first], bounds[end]

        def part(tensor):
            return None if tensor is None else tensor[low:high]

        batch = type(dataset)(dataset.indptr[first:end + 1] - low, dataset.indices[low:high], part(dataset.values),
                              dataset.labels[first:end], dataset.n_features, part(dataset.fields), dataset.n_fields,
                              dataset.source)
        yield batch if ranks is None else (min(start + batch_size, dataset.n_rows) - start, batch)
