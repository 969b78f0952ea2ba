"""Streamed training: a layout cut into blocks of whole batches that visit the GPU one after another.

A block is a contiguous range of the layout's chunks (and so of its edges): its arrays are slices of
the layout's, copied to the device whole and trained by the same generated kernels as a layout of its
own (chunk ids and edge offsets rebased to the block). An epoch visits the blocks in a reshuffled
order and each block's chunks in a reshuffled order of their own: the resident epoch whose chunk
order is those orders concatenated (`StreamedLayout.epoch_order`) trains the same batches, so sync
streamed training equals resident training with that order. It is not the resident default order
(one permutation of all chunks): a batch only mixes chunks of one block.

On a GPU the blocks come from pinned host memory through a copy stream: block i + 1 is copied while
the kernels train block i (events order the two), and the next epoch's first block while they train
the last.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch

from alac.errors import OptionError
from alac.runtime.permutation import chunk_order

# Blocks per memory budget: two are on the device at once (one trained, one copied), and smaller
# blocks shorten the copy of the first that nothing overlaps (benchmarks/streaming.py).
BLOCKS_IN_BUDGET = 4
# The per-slot and per-edge arrays a block slices; the per-feature ones stay whole on the device.
SLOT_ARRAYS = ("row_of_slot", "labels", "row_nnz")
EDGE_ARRAYS = ("edge_feature", "edge_value", "edge_field")
CHUNK_ARRAYS = ("chunk_width", "hot_edges", "cold_edges")


@dataclass(frozen=True)
class Block:
    """Chunks [first_chunk, end_chunk) of a layout: edges [first_edge, end_edge), real rows."""

    first_chunk: int
    end_chunk: int
    first_edge: int
    end_edge: int
    rows: int

    @property
    def chunks(self):
        return self.end_chunk - self.first_chunk


def _bytes_per_edge_and_chunk(layout):
    """Bytes a block moves per edge (edge arrays) and per chunk (its slots' arrays, its chunk arrays)."""
    per_edge = sum(getattr(layout, name).element_size() for name in EDGE_ARRAYS if getattr(layout, name) is not None)
    per_chunk = (sum(getattr(layout, name).element_size() for name in SLOT_ARRAYS) * layout.chunk_size
                 + sum(getattr(layout, name).element_size() for name in (*CHUNK_ARRAYS, "chunk_start")))
    return per_edge, per_chunk


def plan_blocks(layout, chunks_per_batch, budget_bytes):
    """Blocks of whole batches that move at most budget_bytes each (at least one batch)."""
    per_edge, per_chunk = _bytes_per_edge_and_chunk(layout)
    starts = layout.chunk_start.cpu()
    real = (layout.row_of_slot.view(layout.n_chunks, layout.chunk_size) >= 0).sum(dim=1).cpu()
    blocks, first = [], 0
    while first < layout.n_chunks:
        end = min(first + chunks_per_batch, layout.n_chunks)
        # grow by whole batches while the block's bytes stay in the budget
        while end < layout.n_chunks:
            grown = min(end + chunks_per_batch, layout.n_chunks)
            if (int(starts[grown]) - int(starts[first])) * per_edge + (grown - first) * per_chunk > budget_bytes:
                break
            end = grown
        blocks.append(Block(first, end, int(starts[first]), int(starts[end]), int(real[first:end].sum())))
        first = end
    return tuple(blocks)


def block_bytes(layout, block):
    """Bytes a block moves to the device."""
    per_edge, per_chunk = _bytes_per_edge_and_chunk(layout)
    return (block.end_edge - block.first_edge) * per_edge + block.chunks * per_chunk


class StreamedLayout:
    """A layout held in host memory (pinned where there is a GPU) and trained block by block on
    device; the per-feature arrays (re-index maps, frequencies) are on the device whole."""

    def __init__(self, layout, chunks_per_batch, budget_bytes, device, overlap=True,
                 blocks_in_budget=BLOCKS_IN_BUDGET, fields=False):
        """budget_bytes: the device memory of the blocks in flight, blocks_in_budget blocks' worth;
        overlap: copy the next block while the current one trains (on a GPU), off: every copy waits
        for the kernels before it and they for it (the no-pipeline baseline); fields: move the
        edges' field ids too (only field-aware kernels read them)."""
        if budget_bytes <= 0:
            raise OptionError(f"a streaming budget must be positive, got {budget_bytes} bytes")
        self.device = torch.device(device)
        pin = self.device.type == "cuda"
        host = dataclasses.replace(layout.to("cpu"), tile_width=layout.mean_width())
        if not fields:
            host = dataclasses.replace(host, edge_field=None)
        self.host = dataclasses.replace(host, **{
            name: (getattr(host, name).pin_memory() if pin else getattr(host, name))
            for name in (*SLOT_ARRAYS, *EDGE_ARRAYS, *CHUNK_ARRAYS, "chunk_start")
            if getattr(host, name) is not None})
        self.features = {name: getattr(layout, name).to(self.device)
                         for name in ("new_to_old", "old_to_new", "frequency")}
        self.blocks = plan_blocks(host, chunks_per_batch, budget_bytes // blocks_in_budget)
        self.chunk_size, self.n_rows = layout.chunk_size, layout.n_rows
        self.bytes_per_epoch = sum(block_bytes(host, block) for block in self.blocks)
        self._copy_stream = torch.cuda.Stream(self.device) if pin and overlap else None
        self._prefetched = None    # ((epoch, seed), (layout, copy done)) of the next epoch's first block

    def block_order(self, epoch, seed):
        return chunk_order(len(self.blocks), seed, epoch, torch.device("cpu")).tolist()

    def chunk_order_in(self, index, epoch, seed):
        """The chunk order inside block index (block-local ids), its own permutation per epoch."""
        block = self.blocks[index]
        return chunk_order(block.chunks, seed * 1_000_003 + index + 1, epoch, self.device)

    def epoch_order(self, epoch, seed):
        """The resident chunk order whose batches equal this epoch's streamed ones."""
        return torch.cat([self.blocks[index].first_chunk + self.chunk_order_in(index, epoch, seed)
                          for index in self.block_order(epoch, seed)])

    def _slice(self, block, non_blocking):
        """The block's arrays on the device, as a layout of its own (chunk and edge ids rebased)."""
        host, C = self.host, self.chunk_size
        slots = slice(block.first_chunk * C, block.end_chunk * C)
        edges = slice(block.first_edge, block.end_edge)
        chunks = slice(block.first_chunk, block.end_chunk)

        def moved(name, part):
            array = getattr(host, name)
            return None if array is None else array[part].to(self.device, non_blocking=non_blocking)

        arrays = {name: moved(name, slots) for name in SLOT_ARRAYS}
        arrays.update({name: moved(name, edges) for name in EDGE_ARRAYS})
        arrays.update({name: moved(name, chunks) for name in CHUNK_ARRAYS})
        starts = host.chunk_start[block.first_chunk:block.end_chunk + 1].to(self.device, non_blocking=non_blocking)
        arrays["chunk_start"] = starts - block.first_edge
        return dataclasses.replace(host, n_rows=block.rows, **arrays, **self.features)

    def blocks_on_device(self, epoch, seed):
        """(block index, device layout, chunk order) of an epoch's blocks in their order; on a GPU the
        next block's copy runs on the copy stream while the caller trains the current one."""
        order = self.block_order(epoch, seed)
        if self._copy_stream is None:
            for index in order:
                # from pinned memory the copy is asynchronous to the host but in the kernels' stream
                yield index, self._slice(self.blocks[index], self.device.type == "cuda"), \
                    self.chunk_order_in(index, epoch, seed)
            return
        compute = torch.cuda.current_stream(self.device)

        def start(index):
            with torch.cuda.stream(self._copy_stream):
                # the copy may overwrite memory the kernels of an earlier block still read
                self._copy_stream.wait_stream(compute)
                layout = self._slice(self.blocks[index], True)
                done = torch.cuda.Event()
                done.record(self._copy_stream)
            return layout, done

        # the first block was copied during the last epoch's last block when that epoch came before
        prefetched, self._prefetched = self._prefetched, None
        pending = prefetched[1] if prefetched is not None and prefetched[0] == (epoch, seed) else start(order[0])
        for position, index in enumerate(order):
            layout, done = pending
            compute.wait_event(done)
            for tensor in layout.tensors().values():
                # the copy stream made these; the compute stream reads them now
                tensor.record_stream(compute)
            chunks = self.chunk_order_in(index, epoch, seed)
            if position + 1 < len(order):
                pending = start(order[position + 1])
            else:
                self._prefetched = ((epoch + 1, seed), start(self.block_order(epoch + 1, seed)[0]))
            yield index, layout, chunks

