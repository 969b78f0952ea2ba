"""A field model's batches, and its training step in PICASSO's interleaving (alac.nn.interleave), for
alac.train.deep. Training rows larger than the GPU's share for them stay in page-locked host memory and
reach the GPU an epoch part at a time: the part's rows, in the epoch's order, gathered by the GPU itself
over their mapped addresses (no host thread, no copy of the whole set), so the batches are exactly the
ones of the rows on the GPU (tests/train/test_deep_stream.py).

D-interleaving, the batch in micro-batches whose losses backpropagate in turn while the tables record
their rows' gradients and step once; K-interleaving, the next micro-batch's lookups issued on a side
stream before this one's MLP. The same step as the whole batch's (tests/train/test_deep.py)."""

from __future__ import annotations

import dataclasses

import torch

from alac.errors import OptionError
from alac.nn.interleave import Interleaving, interleaved_step, memory_per_row, micro_batches_for, split_rows
from alac.runtime.device.memory import available_bytes, mapped_view, pinned_copy
from alac.train.deep_ranks import share

# the training rows stay in host memory where they take more than this share of the GPU's free memory
# (the tables, the MLP's activations and a part's rows need the rest)
STREAM_SHARE = 0.5
# a streamed part: whole steps of about this many bytes of rows (fewer, larger gathers; a part and the
# batches cut from it are on the GPU at once)
PART_BYTES = 1 << 28
# D-interleaving's auto (Eq. 2): a step's activations may take this share of the GPU's free memory, as
# measured by a probe's forward and backward of PROBE_ROWS rows and twice as many (their difference
# per row: the fixed allocations cancel)
STEP_SHARE = 0.5
PROBE_ROWS = 256


def micro_batches_of(trainer, batch, step_rows):
    """PICASSO's Eq. 2 for trainer's steps of step_rows rows: the fewest micro-batches whose
    activations stay within STEP_SHARE of the GPU's free memory, the memory a row adds measured on
    `batch`'s first rows (the tables' outputs and the dense part's forward and backward; the tables are
    not stepped, the dense gradients put back). 1 off a GPU or where the batch is smaller than the probe."""
    device = batch.indptr.device
    if device.type != "cuda" or batch.n_rows < 2 * PROBE_ROWS or step_rows <= 2 * PROBE_ROWS:
        return 1
    network = trainer.network
    parameters = [p for p in network.parameters() if p.requires_grad]
    kept = [p.grad for p in parameters]

    def probe(rows):
        part = batch.take(torch.arange(rows, device=device))
        sparse, dense = trainer.inputs(part)
        with torch.no_grad():
            bags = network.bags(*sparse)
        bags = {name: value.detach().requires_grad_() for name, value in bags.items()}
        trainer._loss(network.logit(bags, dense), part.labels, reduction="sum").backward()
        for p in parameters:
            p.grad = None

    try:
        peaks = [memory_per_row(lambda rows=rows: probe(rows), rows) * rows for rows in (PROBE_ROWS, 2 * PROBE_ROWS)]
    finally:
        for p, grad in zip(parameters, kept):
            p.grad = grad
    per_row = max((peaks[1] - peaks[0]) / PROBE_ROWS, 1.0)
    return micro_batches_for(step_rows, [(STEP_SHARE * available_bytes(device), per_row)])


def interleaved_loss(trainer, batch, scale, micro_batches):
    """The forward and backward of `batch` (a SparseDataset) by trainer.network in micro_batches, on a
    side stream where trainer.settings' side_stream says, each part's summed loss times `scale` backpropagated (the
    tables step once, at the end); returns the batch's summed loss. The dense optimizer's step is the
    caller's."""
    network, settings = trainer.network, trainer.settings
    device = batch.indptr.device
    parts = [batch.take(torch.arange(first, end, device=device))
             for first, end in split_rows(batch.n_rows, micro_batches)]
    inputs = [trainer.inputs(part) for part in parts]

    def sparse(index):
        return network.bags(*inputs[index][0])

    def dense(bags, index):
        logit = network.logit(bags, inputs[index][1])
        return trainer._loss(logit, parts[index].labels, reduction="sum") * scale

    interleaving = Interleaving(micro_batches, settings.side_stream)
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


def dataset_bytes(dataset):
    """Bytes of a dataset's tensors."""
    tensors = (dataset.indptr, dataset.indices, dataset.values, dataset.labels, dataset.fields)
    return sum(t.numel() * t.element_size() for t in tensors if t is not None)


def part_rows(dataset, step_rows, device, stream=None):
    """Rows of every part an epoch's training rows stream in (a whole number of steps), or None where
    they go to the device whole: as `stream` says (None: where they take more than STREAM_SHARE of a
    GPU's free memory; never off a GPU unless asked)."""
    size = dataset_bytes(dataset)
    if stream is None:
        free = available_bytes(device) if torch.device(device).type == "cuda" else None
        stream = free is not None and size > STREAM_SHARE * free
    if not stream:
        return None
    if dataset.device.type == "cuda":
        raise OptionError("streamed training rows come from host memory: give the training set on the CPU")
    steps = max(1, int(PART_BYTES * dataset.n_rows // max(1, size * step_rows)))
    return steps * step_rows


def in_host_memory(dataset, device):
    """The dataset's tensors in page-locked host memory, seen from `device` through their mapped
    addresses where it is a GPU (its gathers read them over PCIe)."""
    if torch.device(device).type != "cuda":
        return dataset

    def mapped(tensor):
        return None if tensor is None else mapped_view(pinned_copy(tensor), device)

    return dataclasses.replace(dataset, indptr=mapped(dataset.indptr), indices=mapped(dataset.indices),
                               values=mapped(dataset.values), labels=mapped(dataset.labels),
                               fields=mapped(dataset.fields))


def epoch_parts(dataset, order, rows=None):
    """The dataset's rows in `order` (on the device), taken `rows` at a time (None: all at once); on a
    GPU each part is gathered on a side stream while the caller trains on the one before."""
    if rows is None:
        yield dataset.take(order)
        return
    starts = range(0, order.numel(), rows)
    if order.device.type != "cuda":
        for first in starts:
            yield dataset.take(order[first:first + rows])
        return
    compute, side = torch.cuda.current_stream(order.device), torch.cuda.Stream(order.device)
    side.wait_stream(compute)           # the order was drawn on the compute stream

    def taken(first):
        with torch.cuda.stream(side):
            return dataset.take(order[first:first + rows])

    following = taken(starts[0])
    for index in range(len(starts)):
        part = following
        compute.wait_stream(side)
        _used_on(part, compute)
        if index + 1 < len(starts):
            # queued before this part's steps, so that its gathers run beside them
            following = taken(starts[index + 1])
        yield part


def _used_on(dataset, stream):
    """A part made on a side stream read on `stream`: its memory not reused before that stream is done."""
    for tensor in (dataset.indptr, dataset.indices, dataset.values, dataset.labels, dataset.fields):
        if tensor is not None:
            tensor.record_stream(stream)
