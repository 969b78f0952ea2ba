"""Streamed training: blocks of whole batches (alac.runtime.movement.blocks) that visit the GPU one after another.

Blocks come from a source: `PinnedBlocks` (a layout in pinned host memory) or `DiskBlocks` (a block
store on disk, read ahead by threads into a ring of pinned buffers). Each block is one copy to the
device and is trained by the same generated kernels as a layout of its own. An epoch visits the
blocks in a reshuffled order (the last, which may end in a partial batch, stays last) and each
block's chunks in a reshuffled order of their own: the resident epoch whose chunk order is those
orders concatenated (`StreamedLayout.epoch_order`) trains the same batches, so sync streamed training
equals resident training with that order. It is not the resident default order (one permutation of
all chunks): a batch only mixes chunks of one block.

On a GPU the copies run on a copy stream: blocks i + 1 .. i + read_ahead are copied while the
kernels train block i (events order the two), and the next epoch's first blocks while they train the
last. The host keeps at most read_ahead + 2 blocks on the device, waiting for an older block's kernels
before it copies a new one, so that the budget holds however far the host runs ahead.
"""

from __future__ import annotations

import dataclasses
from collections import deque

import torch

from alac.errors import OptionError
from alac.runtime.movement.blocks import PinnedBlocks, decoded, packed_bytes, unpack
from alac.runtime.movement.permutation import chunk_order

# Blocks per memory budget: up to four are on the device at once (one trained, READ_AHEAD copied or
# copying, the one before until its kernels end), and smaller blocks shorten the copy of the first
# that nothing overlaps (benchmarks/streaming.py).
BLOCKS_IN_BUDGET = 4
# Blocks copied ahead of the one trained: with one, the copy stream idled while the last block of an
# epoch trained (benchmarks/streaming.py's read-ahead arms).
READ_AHEAD = 2


class StreamedLayout:
    """Blocks of a source trained one after another on a device; the per-feature arrays (re-index
    maps, frequencies) are on the device whole."""

    def __init__(self, source, device, overlap=True, read_ahead=READ_AHEAD):
        """source: PinnedBlocks or DiskBlocks; overlap: copy the next read_ahead blocks while the
        current one trains (on a GPU), off: every copy waits for the kernels before it and they for it
        (the no-pipeline baseline)."""
        self.source, self.device = source, torch.device(device)
        self.host, self.blocks, self.value_scale = source.meta, source.blocks, source.value_scale
        self.chunk_size, self.n_rows = self.host.chunk_size, self.host.n_rows
        self.features = {name: getattr(self.host, name).to(self.device)
                         for name in ("new_to_old", "old_to_new", "frequency")}
        self.bytes_per_epoch = sum(packed_bytes(block, self.chunk_size, source.optional) for block in self.blocks)
        # where the narrow words are ranks within a field, the tables that undo them, on the device
        self._field_ranks = source.field_ranks.to(self.device) if source.field_ranks is not None else None
        self._copy_stream = torch.cuda.Stream(self.device) if self.device.type == "cuda" and overlap else None
        self.read_ahead = read_ahead
        # (rank, ranks): the blocks this layout trains, every ranks-th of each epoch's order (take_part)
        self.part = None
        # ((epoch, seed), reader, deque of (index, layout, copy done)) of the next epoch's first blocks
        self._prefetched = None
        # a list to collect (block index, copy started, copy done) CUDA events in (timelines), or None
        self.copy_events = None

    def first_block(self):
        """Block 0 on the device (what the divergence guard samples and labels are fit on), copied
        on each call rather than kept: a kept block would take device memory beyond the budget."""
        # the next epoch's read-ahead holds the ring's buffers: it starts again when that epoch does
        self.stop_reading()
        reader = self.source.read([0])
        block = self._to_device(*next(reader))
        reader.close()
        return block

    @classmethod
    def from_layout(cls, layout, chunks_per_batch, budget_bytes, device, overlap=True,
                    blocks_in_budget=BLOCKS_IN_BUDGET, fields=False, ids="auto"):
        """A layout streamed from pinned host memory; budget_bytes: the device memory of the blocks in
        flight, blocks_in_budget blocks' worth; fields: move the edges' field ids too (only
        field-aware kernels read them); ids: their wire form ("auto", "int32" or "narrow")."""
        if budget_bytes <= 0:
            raise OptionError(f"a streaming budget must be positive, got {budget_bytes} bytes")
        pin = torch.device(device).type == "cuda"
        source = PinnedBlocks.of_layout(layout, chunks_per_batch, budget_bytes // blocks_in_budget, pin, fields,
                                        ids)
        # the trained block, the one before it until its kernels end, and the blocks read ahead
        return cls(source, device, overlap, min(READ_AHEAD, max(1, blocks_in_budget - 2)))

    def take_part(self, rank, ranks):
        """Train blocks rank, rank + ranks, ... only (data-parallel ranks, each its part of a block
        store: the blocks are whole batches of rows)."""
        self.part = (rank, ranks)
        self.n_rows = sum(block.rows for index, block in enumerate(self.blocks) if index % ranks == rank)

    def block_order(self, epoch, seed):
        """The blocks' visiting order of an epoch: the layout's last block (the one that may end in a
        partial batch) stays last, so that the resident order of epoch_order makes the same batches
        (of this layout's part, where it has one)."""
        last = len(self.blocks) - 1
        order = (chunk_order(last, seed, epoch, torch.device("cpu")).tolist() if last else []) + [last]
        return order if self.part is None else [index for index in order if index % self.part[1] == self.part[0]]

    def chunk_order_in(self, index, epoch, seed):
        """The chunk order inside block index (block-local ids), its own permutation per epoch."""
        block = self.blocks[index]
        return chunk_order(block.chunks, seed * 1_000_003 + index + 1, epoch, self.device)

    def epoch_order(self, epoch, seed):
        """The resident chunk order whose batches equal this epoch's streamed ones."""
        return torch.cat([self.blocks[index].first_chunk + self.chunk_order_in(index, epoch, seed)
                          for index in self.block_order(epoch, seed)])

    def _to_device(self, index, buffer, release):
        """Block index as a layout of its own on the device, copied from its host buffer (on the
        current stream); the buffer is released once the copy is done."""
        if self.device.type == "cuda":
            moved = buffer.to(self.device, non_blocking=True)
            copied = torch.cuda.Event()
            copied.record()
        else:
            # the host buffer may be refilled at once: the block needs its own copy
            moved, copied = buffer.clone(), None
        release(copied)
        moved = self.source.restored(moved, index)
        block = self.blocks[index]
        # byte planes are undone and narrow ids decoded on the copy's stream: the block is ready for the
        # kernels once it is done
        arrays = decoded(unpack(moved, block, self.chunk_size, self.source.optional), self._field_ranks)
        return dataclasses.replace(self.host, n_rows=block.rows, host_extent=(block.widest, block.edges), **arrays,
                                   **self.features)

    def blocks_on_device(self, epoch, seed):
        """(block index, device layout, chunk order) of an epoch's blocks in their order; on a GPU the
        next block's copy runs on the copy stream while the caller trains the current one."""
        order = self.block_order(epoch, seed)
        prefetched, self._prefetched = self._prefetched, None
        if prefetched is not None and prefetched[0] != (epoch, seed):
            prefetched[1].close()
            prefetched = None
        if self._copy_stream is None:
            for index, buffer, release in self.source.read(order):
                yield index, self._to_device(index, buffer, release), self.chunk_order_in(index, epoch, seed)
            return
        compute = torch.cuda.current_stream(self.device)
        # (kernels queued) events of the blocks yielded whose kernels may still run: the device holds
        # them, the blocks copying and the ones copied, at most read_ahead + 2 (the trained one and the
        # one before it until its kernels end)
        trained = deque()

        def start(reader):
            while len(trained) + len(pending) + len(ahead) >= self.read_ahead + 2:
                # the host waits for an older block's kernels, not the device: the copy's memory is
                # then that block's, freed by the caching allocator once its kernels are done
                trained.popleft().synchronize()
            index, buffer, release = next(reader)
            with torch.cuda.stream(self._copy_stream):
                started = torch.cuda.Event(enable_timing=True) if self.copy_events is not None else None
                if started is not None:
                    started.record()
                layout = self._to_device(index, buffer, release)
                done = torch.cuda.Event(enable_timing=started is not None)
                done.record(self._copy_stream)
            if started is not None:
                self.copy_events.append((index, started, done))
            return index, layout, done

        # copies of the next epoch's first blocks start during this epoch's last ones when that epoch came before
        if prefetched is not None:
            _, reader, pending = prefetched
        else:
            reader, pending = self.source.read(order), deque()
        following, ahead, started = None, deque(), len(pending)

        def top_up():
            """Start copies until read_ahead blocks are copied or copying: this epoch's, then the next's."""
            nonlocal following, started
            while len(pending) + len(ahead) < self.read_ahead:
                if started < len(order):
                    pending.append(start(reader))
                    started += 1
                    continue
                if following is None:
                    reader.close()
                    following = self.source.read(self.block_order(epoch + 1, seed))
                if len(ahead) == len(self.blocks):
                    return
                ahead.append(start(following))

        top_up()
        for position in range(len(order)):
            index, layout, done = pending.popleft()
            compute.wait_event(done)
            for tensor in layout.tensors().values():
                # the copy stream made these; the compute stream reads them now (the caching allocator
                # reuses their memory once the kernels queued before they are freed have ended)
                tensor.record_stream(compute)
            yield index, layout, self.chunk_order_in(index, epoch, seed)
            del layout
            # the block's kernels are queued: the next copies start behind them on the host only, so
            # that the first kernels of a block never wait for the host to start copies
            trained.append(torch.cuda.Event())
            trained[-1].record(compute)
            top_up()
            if position + 1 == len(order):
                self._prefetched = ((epoch + 1, seed), following, ahead)

    def stop_reading(self):
        """Drop the next epoch's read-ahead, giving back the ring buffers it holds (another reader of
        the same source may start; the next epoch reads from its start)."""
        if self._prefetched is not None:
            self._prefetched[1].close()
            self._prefetched = None

    def close(self):
        """Stop reading ahead (a disk source's threads end)."""
        self.stop_reading()
        self.source.close()


class BlockStatistics:
    """Per-block loss sums of a streamed epoch, copied to (pinned) host memory on a small stream of
    their own as each block's kernels end: progress reads the latest without waiting for the GPU."""

    def __init__(self, blocks, device):
        cuda = device.type == "cuda"
        self.sums = torch.zeros(blocks, device=device)
        self.host = torch.zeros(blocks, pin_memory=cuda)
        self.rows, self.order = [0] * blocks, [0] * blocks
        self._stream = torch.cuda.Stream(device) if cuda else None
        self._copied = []    # (position, event recorded after the copy, None on a CPU)

    def add(self, position, index, loss_sum, rows):
        """Block index, trained at this position of the epoch, summed loss_sum (a device scalar the
        next block overwrites) over rows rows."""
        self.rows[position], self.order[position] = rows, index
        self.sums[position:position + 1].copy_(loss_sum)
        if self._stream is None:
            self.host[position] = self.sums[position]
            self._copied.append((position, None))
            return
        ended = torch.cuda.Event()
        ended.record()
        with torch.cuda.stream(self._stream):
            self._stream.wait_event(ended)
            self.host[position:position + 1].copy_(self.sums[position:position + 1], non_blocking=True)
            copied = torch.cuda.Event()
            copied.record()
        self._copied.append((position, copied))

    def latest(self):
        """(block index, its mean loss) of the last block whose sum has reached the host, or None."""
        for position, copied in reversed(self._copied):
            if copied is None or copied.query():
                return self.order[position], float(self.host[position]) / max(self.rows[position], 1)
        return None

    def finish(self):
        """The epoch's mean loss and [(block index, mean loss)] in visiting order (waits for the GPU)."""
        total = float(self.sums.sum()) / max(sum(self.rows), 1)
        if self._stream is not None:
            self._stream.synchronize()
        losses = [(self.order[p], float(self.host[p]) / max(self.rows[p], 1)) for p, _ in self._copied]
        return total, losses
