"""PICASSO's interleaving (§III-C) for a training step over alac.nn tables: how a step is scheduled,
not what it computes.

- D-interleaving: the batch in micro-batches whose losses backpropagate in turn (the dense part's
  gradients add up) while the tables record their rows' gradients and step once when the step ends
  (SparseAggregate.deferred), so that the step is the whole batch's and its activations a
  micro-batch's. micro_batches_for sizes them by PICASSO's Eq. 2 from a measured cost per row
  (memory_per_row: the peak GPU memory a warm-up step adds, per row).
- K-interleaving: the next micro-batch's table lookups issued on a side stream before this one's dense
  part, so that the memory-bound lookups overlap the compute-bound MLP (a GPU only; the tables do not
  change within the step, so the order does not change the result). And the packs of a
  PackedEmbeddingBags in groups by PICASSO's Eq. 3 (pack_groups): packs whose parameters in a step
  together fit one wave of the GPU's programs run side by side on streams of their own, the groups in
  turn.

    step = Interleaving(micro_batches=4, side_stream=True)
    loss = interleaved_step(tables, parts, lambda part: tables(part.bags),
                            lambda pooled, part: part.weight * loss_of(mlp(pooled), part.labels), step)
    dense_optimizer.step()
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from alac.errors import OptionError

# table programs resident on a multiprocessor at once, for Eq. 3's wave (benchmarks/fields.py, arms
# alac_packed_graphed and alac_packed_graphed_k_groups)
PROGRAMS_PER_SM = 4


@dataclass(frozen=True)
class Interleaving:
    """micro_batches: D-interleaving's count (1: off); side_stream: K-interleaving (on a GPU)."""

    micro_batches: int = 1
    side_stream: bool = False

    def __post_init__(self):
        if self.micro_batches < 1:
            raise OptionError(f"micro_batches is at least 1, got {self.micro_batches}")


def micro_batch_rows(bound, cost_per_row):
    """PICASSO's Eq. 2 for one resource: the most rows whose cost (e.g. the peak memory a row adds to a
    step, measured in a warm-up step) stays within bound (e.g. the memory free for it); at least 1."""
    if cost_per_row <= 0:
        raise OptionError(f"a cost per row must be positive, got {cost_per_row}")
    return max(1, int(bound // cost_per_row))


def micro_batches_for(batch_rows, bounds_and_costs):
    """The fewest equal micro-batches of a batch of batch_rows within every (bound, cost per row) pair:
    Eq. 2's minimum over the step's operators."""
    rows = min(micro_batch_rows(bound, cost) for bound, cost in bounds_and_costs)
    return math.ceil(batch_rows / rows)


def memory_per_row(step, rows):
    """Eq. 2's memory cost: the peak GPU memory one call of step() (a training step of `rows` rows)
    adds to what was allocated before it, per row; None off a GPU."""
    if not torch.cuda.is_available():
        return None
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    step()
    torch.cuda.synchronize()
    return max(torch.cuda.max_memory_allocated() - before, 1) / max(rows, 1)


def pack_groups(volumes, capacity):
    """PICASSO's Eq. 3 for packed operations of one resource: consecutive groups of the ops (their
    parameter volumes in a step, RParam) whose summed volume stays within `capacity` (RBound over a
    unit RParam); an op larger than it is a group alone. A group's ops run side by side, the groups in
    turn."""
    groups, load = [], capacity
    for index, volume in enumerate(volumes):
        if not groups or load + volume > capacity:
            groups.append([])
            load = 0
        groups[-1].append(index)
        load += volume
    return groups


def wave_values(device):
    """Eq. 3's bound for alac.nn's table kernels on a GPU: the parameter values one wave of its
    programs holds (multiprocessors x PROGRAMS_PER_SM tiles of TILE_VALUES); a pack under it leaves
    multiprocessors idle that another pack's kernel can take."""
    # here, not at the top: the launcher imports triton, which training without it must not need
    from alac.runtime.execution.bag_launcher import TILE_VALUES

    return torch.cuda.get_device_properties(device).multi_processor_count * PROGRAMS_PER_SM * TILE_VALUES


def interleaved_group(calls, streams):
    """Each of calls (the ops of one Eq. 3 group, returning iterables of (name, tensor)) on a side
    stream of its own where there are several and a GPU, the current stream waiting for them all;
    streams: at least as many side streams. Their results, in order."""
    if len(calls) < 2:
        return [item for call in calls for item in call()]
    main = torch.cuda.current_stream()
    results = []
    for call, stream in zip(calls, streams):
        stream.wait_stream(main)            # the op's inputs were made on the main stream
        with torch.cuda.stream(stream):
            results += list(call())
    for stream in streams[:len(calls)]:
        main.wait_stream(stream)
    for _, tensor in results:
        tensor.record_stream(main)
    return results


def split_rows(n_rows, micro_batches):
    """(first, end) of micro_batches near-equal consecutive parts of n_rows rows (none empty)."""
    count = max(1, min(micro_batches, n_rows))
    edges = [round(i * n_rows / count) for i in range(count + 1)]
    return list(zip(edges[:-1], edges[1:]))


def interleaved_step(tables, parts, sparse, dense, interleaving=Interleaving()):
    """One training step over the micro-batches `parts`: sparse(part) gives the tables' outputs (a
    dict of tensors), dense(outputs, part) that part's share of the step's loss (weighted so that the
    shares add up to the whole batch's loss); each share is backpropagated in turn and the tables
    (anything with deferred(): SparseAggregate, PackedEmbeddingBags) step once at the end. Returns the
    step's loss (a detached tensor). The dense optimizer's step is the caller's, after it."""
    # the tables' rows are buffers (SparseAggregate's), not parameters
    on_gpu = any(tensor.is_cuda for tensor in (*tables.parameters(), *tables.buffers()))
    side = torch.cuda.Stream() if interleaving.side_stream and on_gpu else None
    main = torch.cuda.current_stream() if side is not None else None

    def lookup(part):
        if side is None:
            return sparse(part)
        side.wait_stream(main)           # the part's inputs were made on the main stream
        with torch.cuda.stream(side):
            return sparse(part)

    total = None
    with tables.deferred():
        ahead = lookup(parts[0])
        for index, part in enumerate(parts):
            outputs = ahead
            if side is not None:
                main.wait_stream(side)
                for tensor in outputs.values():
                    tensor.record_stream(main)
            if index + 1 < len(parts):
                ahead = lookup(parts[index + 1])     # queued before this part's dense work: they overlap
            loss = dense(outputs, part)
            loss.backward()
            total = loss.detach() if total is None else total + loss.detach()
        if side is not None:
            main.wait_stream(side)
    return total
