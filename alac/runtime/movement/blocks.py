"""Blocks: a layout cut into ranges of whole batches, each packed into one byte buffer.

A block is a contiguous range of a layout's chunks (and so of its edges). Its per-slot, per-chunk
and per-edge arrays are packed one after another, 16-byte aligned, into one buffer, so that moving a
block to the device is one copy and its arrays are typed views of the copy. Chunk starts are stored
rebased to the block's first edge: a block is a layout of its own for the kernels. The per-feature
arrays (re-index maps, frequencies) are the whole data set's and live in the `meta` layout, which has
every other array empty.

Edge ids travel as int32 or in the narrow 16-bit form of `alac.runtime.movement.wire` (`edge_id16`,
`escape_start`, `escape_id`), decoded on the device after the copy; `wire_arrays` picks the form. A
block store of one-hot rows with one field a slot may hold the narrow words as ranks within their
field (wire.FieldRanks; the source's `field_ranks`).

`PinnedBlocks` holds a layout's blocks in (pinned) host memory; `alac.runtime.movement.block_store` holds them
on disk. Both read blocks as (index, host buffer, release): release(event) hands the buffer back once
the copy recorded in event is done.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch

from alac.errors import OptionError
from alac.runtime.movement import wire

# (name, dtype, extent) of the packed arrays in byte order; extents count slots, chunk bounds, chunks,
# edges, escape tiles or escapes. The per-chunk hot and cold counts are statistics no kernel reads:
# blocks leave them out.
PACKED_ARRAYS = (
    ("row_of_slot", torch.int64, "slots"), ("labels", torch.float32, "slots"), ("row_nnz", torch.int32, "slots"),
    ("chunk_start", torch.int64, "bounds"), ("chunk_width", torch.int32, "chunks"),
    ("edge_feature", torch.int32, "edges"), ("edge_id16", torch.int16, "edges"),
    ("escape_start", torch.int32, "tiles"), ("escape_id", torch.int32, "escapes"),
    ("edge_value", torch.float32, "edges"), ("edge_field", torch.int32, "edges"))
# the edge ids' two wire forms: int32, or 16 bits with escapes
INT32_IDS = frozenset({"edge_feature"})
NARROW_IDS = frozenset({"edge_id16", "escape_start", "escape_id"})
OPTIONAL_ARRAYS = ("edge_value", "edge_field", *sorted(INT32_IDS | NARROW_IDS))
# every array starts at a multiple of this (the widest element, and full 16-byte vector loads)
ALIGNMENT = 16
# A layout's bytes estimated from its mean row before the rows are laid out: this margin covers the
# ELL padding of rows of unequal length (20news pads 12 % at C = 128).
PADDING_MARGIN = 1.25


@dataclass(frozen=True)
class Block:
    """Chunks [first_chunk, end_chunk) of a layout: edges [first_edge, end_edge), real rows."""

    first_chunk: int
    end_chunk: int
    first_edge: int
    end_edge: int
    rows: int
    escapes: int = 0    # edges whose id needs 32 bits in the narrow wire form
    widest: int = 0     # slots per row of the block's widest chunk

    @property
    def chunks(self):
        return self.end_chunk - self.first_chunk

    @property
    def edges(self):
        return self.end_edge - self.first_edge


def packing(block, chunk_size, optional):
    """((name, dtype, byte offset, count), ...) of a block's packed arrays and the buffer's bytes;
    optional: the OPTIONAL_ARRAYS the blocks carry (one wire form of the ids)."""
    counts = {"slots": block.chunks * chunk_size, "bounds": block.chunks + 1, "chunks": block.chunks,
              "edges": block.edges, "tiles": wire.tiles(block.edges), "escapes": block.escapes}
    entries, offset = [], 0
    for name, dtype, extent in PACKED_ARRAYS:
        if name in OPTIONAL_ARRAYS and name not in optional:
            continue
        entries.append((name, dtype, offset, counts[extent]))
        offset += -(-counts[extent] * dtype.itemsize // ALIGNMENT) * ALIGNMENT
    return tuple(entries), offset


def packed_bytes(block, chunk_size, optional):
    return packing(block, chunk_size, optional)[1]


def device_bytes(block, chunk_size, optional):
    """The device memory a block takes once copied: its packed bytes, and the int32 ids the narrow
    form decodes into."""
    decoded = 4 * block.edges if NARROW_IDS <= optional else 0
    return packed_bytes(block, chunk_size, optional) + decoded


def unpack(buffer, block, chunk_size, optional):
    """{name: typed view of the uint8 buffer} of a packed block."""
    entries, _ = packing(block, chunk_size, optional)
    return {name: buffer[offset:offset + count * dtype.itemsize].view(dtype)
            for name, dtype, offset, count in entries}


def decoded(arrays, ranks=None):
    """A block's arrays as the kernels read them: narrow ids decoded (on their device, ranks the
    wire.FieldRanks there where the words are ranks) into edge_feature."""
    if "edge_id16" not in arrays:
        return arrays
    arrays = dict(arrays)
    arrays["edge_feature"] = wire.decode(*(arrays.pop(name) for name in ("edge_id16", "escape_start", "escape_id")),
                                         ranks=ranks)
    return arrays


def pack_into(buffer, layout, block, optional, ranks=None):
    """Write the block's slices of `layout` (any device) into the uint8 buffer (chunk starts rebased,
    ids in the wire form of optional, narrow words as ranks where ranks are given)."""
    C = layout.chunk_size
    parts = {"slots": slice(block.first_chunk * C, block.end_chunk * C),
             "bounds": slice(block.first_chunk, block.end_chunk + 1),
             "chunks": slice(block.first_chunk, block.end_chunk), "edges": slice(block.first_edge, block.end_edge)}
    views = unpack(buffer, block, C, optional)
    sources = {name: getattr(layout, name)[parts[extent]] for name, _, extent in PACKED_ARRAYS
               if name in views and name not in NARROW_IDS}
    sources["chunk_start"] = sources["chunk_start"] - block.first_edge
    if "edge_id16" in views:
        sources.update(zip(("edge_id16", "escape_start", "escape_id"),
                           wire.encode(layout.edge_feature[parts["edges"]], ranks)))
    for name, source in sources.items():
        views[name].copy_(source)


def packed(layout, block, optional, pin=False, ranks=None):
    """A new (pinned) host buffer holding the block of `layout`, its padding zeroed: a block's bytes,
    and so its checksum, depend on its data only."""
    buffer = torch.zeros(packed_bytes(block, layout.chunk_size, optional), dtype=torch.uint8, pin_memory=pin)
    pack_into(buffer, layout, block, optional, ranks)
    return buffer


def wire_arrays(ids, frequency, nnz):
    """The arrays of the ids' wire form: ids "int32", "narrow", "field_ranks" (narrow words that are
    ranks within a field: block stores of one field a slot), or "auto" (narrow where it moves fewer
    bytes for features of this frequency)."""
    if ids not in ("auto", "int32", "narrow", "field_ranks"):
        raise OptionError(f"ids travel as 'auto', 'int32', 'narrow' or 'field_ranks', got {ids!r}")
    narrow = ids in ("narrow", "field_ranks") or (ids == "auto" and wire.narrow_pays(frequency, nnz))
    return NARROW_IDS if narrow else INT32_IDS


def optional_arrays(layout, fields, ids="auto"):
    """The optional arrays a layout's blocks carry: values where it has them, field ids when asked,
    and the ids' wire form (wire_arrays)."""
    return frozenset(name for name in ("edge_value", "edge_field")
                     if getattr(layout, name) is not None and (fields or name != "edge_field")) | wire_arrays(
        ids, layout.frequency.cpu(), layout.stats.nnz)


def plan_blocks(layout, chunks_per_batch, budget_bytes, optional=INT32_IDS):
    """Blocks of whole batches whose device bytes stay within budget_bytes (at least one batch each)."""
    starts, widths = layout.chunk_start.cpu(), layout.chunk_width.cpu()
    real = (layout.row_of_slot.view(layout.n_chunks, layout.chunk_size) >= 0).sum(dim=1).cpu()
    escaped = torch.zeros(layout.n_chunks + 1, dtype=torch.int64)
    if NARROW_IDS <= optional:
        torch.cumsum(layout.with_hot_size(wire.ID16_LIMIT).cold_edges.cpu(), 0, out=escaped[1:])
    C = layout.chunk_size

    def block(first, end):
        return Block(first, end, int(starts[first]), int(starts[end]), int(real[first:end].sum()),
                     int(escaped[end] - escaped[first]), int(widths[first:end].max()))

    blocks, first = [], 0
    while first < layout.n_chunks:
        end = min(first + chunks_per_batch, layout.n_chunks)
        # grow by whole batches while the block's bytes stay in the budget
        while end < layout.n_chunks:
            grown = min(end + chunks_per_batch, layout.n_chunks)
            if device_bytes(block(first, grown), C, optional) > budget_bytes:
                break
            end = grown
        blocks.append(block(first, end))
        first = end
    return tuple(blocks)


def meta_layout(layout):
    """The layout's description without its per-slot, per-chunk and per-edge data: what blocks
    share (sizes, options, statistics, per-feature arrays, the whole layout's tile width)."""
    def empty(name):
        array = getattr(layout, name)
        return None if array is None else array.new_empty(0)

    emptied = {name: empty(name) for name, _, _ in PACKED_ARRAYS if name not in NARROW_IDS}
    emptied["chunk_start"] = layout.chunk_start.new_zeros(1)
    return dataclasses.replace(layout, tile_width=layout.mean_width(), hot_edges=None, cold_edges=None, **emptied)


def is_block_source(data):
    """A PinnedBlocks or DiskBlocks (what a StreamedLayout reads), as opposed to a data set."""
    return hasattr(data, "blocks") and hasattr(data, "read")


class PinnedBlocks:
    """Blocks packed in host memory, pinned where there is a GPU (copies from pinned memory run
    asynchronously at the bus's full speed)."""

    def __init__(self, meta, blocks, buffers, optional, value_scale, field_ranks=None):
        self.meta, self.blocks, self.buffers = meta, tuple(blocks), list(buffers)
        self.optional, self.value_scale, self.field_ranks = frozenset(optional), value_scale, field_ranks

    @classmethod
    def of_layout(cls, layout, chunks_per_batch, block_bytes, pin, fields=False, ids="auto"):
        """A layout's blocks of whole batches, block_bytes of device memory at most each (at least one
        batch); ids: their wire form (wire_arrays)."""
        if block_bytes <= 0:
            raise OptionError(f"a block budget must be positive, got {block_bytes} bytes")
        if ids == "field_ranks":
            raise OptionError("ids travel as field ranks from block stores only (write_block_store, pinned_blocks)")
        optional = optional_arrays(layout, fields, ids)
        meta = meta_layout(layout)
        if not fields:
            meta = dataclasses.replace(meta, edge_field=None)
        blocks = plan_blocks(layout, chunks_per_batch, block_bytes, optional)
        buffers = [packed(layout, block, optional, pin) for block in blocks]
        return cls(meta, blocks, buffers, optional, layout.value_scale())

    def restored(self, block, index):
        """A block's buffer as packed, wherever it was copied to: it is (a block store's may not be)."""
        return block

    def read(self, order):
        """(index, host buffer, release) of the blocks in order; the buffers stay (nothing to release)."""
        for index in order:
            yield index, self.buffers[index], _keep

    def close(self):
        pass


def _keep(event):
    """Release of a buffer that is never reused."""
