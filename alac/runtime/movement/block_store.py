"""A layout's blocks on disk, for data larger than host memory, and their reader.

Written in two passes over the data's pieces (a file read block by block, or a generator): the first
counts feature frequencies for the re-index, the second lays out groups of whole batches with that
re-index and writes each as one packed block file (`alac.runtime.movement.blocks`) with its xxh3 checksum.
The folder is written under a temporary name and renamed into place, so a reader sees a whole store
or none; the temporaries of writers that died are removed by the next writer. Opening a store checks
its manifest, its per-feature arrays and every block file's size (`alac.runtime.movement.block_manifest`), so
a damaged or edited store fails before training starts; every block's checksum is checked as it is
read. A block found damaged is recorded beside the store (DAMAGED_FILE: nothing of the user's is
deleted), so that the next opening refuses the store at once, and `cached_block_store` rebuilds its
own.

Reader threads fill a ring of (pinned) host buffers ahead of the copy stream, each buffer reused
once the device copy of its last block is done. The disk threads read one block at a time, a range
each, so blocks arrive in order; a compressed block is decompressed after its read while the disk
reads the next.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import queue
import shutil
import threading
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import torch
import xxhash

from alac.data.dataset import DataSource, mean_scale
from alac.errors import DataError, OptionError
from alac.runtime.movement import wire
from alac.runtime.movement.block_codec import PLANES, check_codec, decode_into, encode, from_planes
from alac.runtime.movement.block_manifest import (
    FEATURE_ARRAYS,
    FIELD_ARRAY,
    META_FILE,
    REBUILD,
    block_file,
    read_manifest,
    sealed,
)
from alac.runtime.movement.blocks import NARROW_IDS, PADDING_MARGIN, Block, PinnedBlocks, packed, wire_arrays
from alac.runtime.movement.layout import (
    BigraphLayout,
    LayoutOptions,
    LayoutStats,
    build_layout,
    default_device,
    order_by_frequency,
    top_share,
)
from alac.runtime.movement.slot_fields import SlotFields, check_slot_fields, field_ranks
from alac.temporary import remove_stale_folders, temporary_folder_name

# written beside a store's files when a block is found damaged as it is read
DAMAGED_FILE = "DAMAGED.json"
# Host buffers read ahead of the copy stream and the threads reading them: (4, 4) read nearly as fast
# as the best (depth, readers) with half its pinned memory (benchmarks/streaming.py's disk_ring_sweep).
RING_DEPTH = 4
READERS = 4
# a block's file is read in READERS ranges of a multiple of this many bytes
READ_ALIGN = 1 << 20


def _count(pieces, slot_fields):
    """Pass 1: (frequency, rows, nnz, widest row, sum of |values| or None, n_fields, has fields, the
    first piece's source options); each piece also goes to slot_fields."""
    frequency, rows, nnz, widest, value_sum, n_fields, has_fields = None, 0, 0, 0, None, 0, False
    source_options = None
    for piece in pieces():
        slot_fields.add(piece)
        if source_options is None:
            source_options = dict(piece.source.options)
        counts = torch.bincount(piece.indices.long(), minlength=piece.n_features).cpu()
        if frequency is None:
            frequency = counts
        else:
            grown = max(frequency.numel(), counts.numel())
            frequency = torch.nn.functional.pad(frequency, (0, grown - frequency.numel()))
            frequency[:counts.numel()] += counts
        rows, nnz = rows + piece.n_rows, nnz + piece.nnz
        if piece.n_rows:
            widest = max(widest, int(piece.row_lengths().max()))
        if piece.values is not None:
            value_sum = (value_sum or 0.0) + float(piece.values.double().abs().sum())
        n_fields, has_fields = max(n_fields, piece.n_fields), has_fields or piece.fields is not None
    if frequency is None or rows == 0:
        raise DataError("no rows to write a block store of")
    return frequency, rows, nnz, widest, value_sum, n_fields, has_fields, source_options


def _concatenate(pieces):
    """One data set of several (same feature space)."""
    if len(pieces) == 1:
        return pieces[0]
    first = pieces[0]
    offsets = torch.cumsum(torch.tensor([0] + [p.nnz for p in pieces[:-1]], device=first.device), 0)
    indptr = torch.cat([pieces[0].indptr[:1]] + [p.indptr[1:] - p.indptr[0] + o for p, o in zip(pieces, offsets)])

    def joined(name):
        arrays = [getattr(p, name) for p in pieces]
        return None if arrays[0] is None else torch.cat(arrays)

    return dataclasses.replace(first, indptr=indptr, indices=joined("indices"), values=joined("values"),
                               labels=joined("labels"), fields=joined("fields"))


def _groups(pieces, n_features, rows_per_block, device):
    """The pieces' rows regrouped into data sets of rows_per_block rows (the last may be shorter)."""
    held, count = [], 0
    for piece in pieces():
        # the file's line numbers serve parse errors only, which pass 1 has raised
        piece = dataclasses.replace(piece, n_features=n_features, source=DataSource()).to(device)
        held.append(piece)
        count += piece.n_rows
        while count >= rows_per_block:
            data = _concatenate(held)
            yield data.take(torch.arange(rows_per_block, device=device))
            rest = data.take(torch.arange(rows_per_block, data.n_rows, device=device))
            held, count = ([rest] if rest.n_rows else []), rest.n_rows
    if count:
        yield _concatenate(held)


def build_blocks(pieces, options, chunks_per_batch, block_bytes, device, fields, progress, emit, ids="auto"):
    """The two passes: count, then lay out groups of whole batches of about block_bytes of device
    memory each and hand each to emit(index, the group's layout, the group as a Block of that
    layout, the optional arrays, the wire.FieldRanks or None), which returns what the meta dict
    records of it; returns the meta dict (sizes, statistics, the blocks) and the per-feature arrays.
    ids: the ids' wire form (alac.runtime.movement.blocks.wire_arrays; "auto" takes field ranks where
    the rows allow them and the narrow form pays)."""
    options = options if options is not None else LayoutOptions()
    if block_bytes <= 0:
        raise OptionError(f"a block budget must be positive, got {block_bytes} bytes")
    started = time.perf_counter()
    slot_fields = SlotFields()
    frequency, n_rows, nnz, widest, value_sum, n_fields, has_fields, source_options = _count(pieces, slot_fields)
    sorted_frequency, new_to_old, old_to_new = order_by_frequency(frequency)
    optional = (frozenset(({"edge_value"} if value_sum is not None else set())
                          | ({"edge_field"} if fields and has_fields else set()))
                | wire_arrays(ids, sorted_frequency, nnz))
    C = options.chunk_size
    if ids == "field_ranks" and slot_fields.why is not None:
        raise OptionError(f"ids as field ranks need one id of each field a row, field s in slot s: {slot_fields.why}")
    use_ranks = ids in ("auto", "field_ranks") and NARROW_IDS <= optional and slot_fields.why is None
    ranks = slot_fields.ranks(new_to_old, C) if use_ranks else None
    if ranks is not None:
        # every block's encoding gathers its edges' ranks: the table moved to the layouts' device once
        ranks = dataclasses.replace(ranks, rank=ranks.rank.to(device))
    # an edge's device bytes: its id (narrow: 2 on the wire, 4 decoded, 4 more if escaped), value, field
    narrow = NARROW_IDS <= optional
    escaped = float(sorted_frequency[wire.ID16_LIMIT:].sum()) / nnz if narrow and nnz else 0.0
    edge_bytes = (6 + 4 * escaped if narrow else 4) + 4 * len(optional & {"edge_value", "edge_field"})
    row_bytes = 16 + PADDING_MARGIN * edge_bytes * nnz / n_rows
    batch_rows = C * chunks_per_batch
    rows_per_block = max(1, int(block_bytes / row_bytes) // batch_rows) * batch_rows
    base_options = dataclasses.replace(options, hot_size=0)
    entries, first_row, first_chunk, first_edge, width_sum, lengths = [], 0, 0, 0, 0, set()
    for index, group in enumerate(_groups(pieces, frequency.numel(), rows_per_block, device)):
        layout = build_layout(group, base_options, device, feature_order=new_to_old)
        layout.row_of_slot[layout.row_of_slot >= 0] += first_row
        if ranks is not None:
            check_slot_fields(layout, ranks)
        escapes = wire.escape_count(layout.edge_feature, ranks) if narrow else 0
        widest, edges = layout.extent()
        local = Block(0, layout.n_chunks, 0, edges, group.n_rows, escapes, widest)
        block = dataclasses.replace(local, first_chunk=first_chunk, end_chunk=first_chunk + local.chunks,
                                    first_edge=first_edge, end_edge=first_edge + edges)
        entries.append({**dataclasses.asdict(block), **emit(index, layout, local, optional, ranks)})
        first_row, first_chunk, first_edge = first_row + group.n_rows, block.end_chunk, block.end_edge
        width_sum += int(layout.chunk_width.long().sum())
        lengths.add(layout.fixed_width)
        if progress is not None:
            progress(first_row, n_rows)
    fixed_width = widest if lengths == {widest} else None
    stats = LayoutStats(
        rows=n_rows, nnz=nnz, mean_nnz=nnz / n_rows, max_nnz=widest, n_features=frequency.numel(),
        features_seen=int((frequency > 0).sum()), top_share=top_share(frequency, nnz),
        padding_overhead=(first_edge - nnz) / nnz if nnz else 0.0, chunks=first_chunk, chunk_size=C,
        fixed_width=fixed_width, hot_size=0, hot_edge_share=0.0,
        build_seconds=time.perf_counter() - started, device=str(device))
    meta = {"options": dataclasses.asdict(base_options), "n_rows": n_rows,
            "n_features": frequency.numel(), "n_fields": n_fields, "fixed_width": fixed_width,
            "tile_width": math.ceil(width_sum / first_chunk), "optional": sorted(optional),
            "value_scale": mean_scale(value_sum, nnz) if value_sum is not None else 1.0,
            # a LIBSVM file's id base (0 or 1), so that files read beside the store share its ids
            "base": source_options.get("base"),
            "stats": dataclasses.asdict(stats), "blocks": entries,
            # narrow words as ranks within the fields of this many slots (field_of.npy): wire.FieldRanks
            "field_ranks": ranks.width if ranks is not None else None}
    features = dict(zip(FEATURE_ARRAYS, (new_to_old.cpu(), old_to_new.cpu(), sorted_frequency.cpu())))
    if ranks is not None:
        features[FIELD_ARRAY] = slot_fields.field_of_new(new_to_old)
    return meta, features


def write_block_store(folder, pieces, options=None, chunks_per_batch=1, block_bytes=256 << 20,
                      device=None, fields=False, progress=None, ids="auto", codec=None):
    """Lay the data out into blocks of whole batches of about block_bytes each, in `folder`.

    pieces: a function returning an iterable of SparseDataset pieces in row order (called twice).
    progress(rows_done, rows) is called after every block; ids: the ids' wire form; codec: how the
    block files hold their bytes (alac.runtime.movement.block_codec). Returns the opened DiskBlocks.
    """
    check_codec(codec)
    device = torch.device(device) if device is not None else default_device()
    folder = Path(folder)
    if folder.exists() and not (folder / META_FILE).is_file() and (not folder.is_dir() or any(folder.iterdir())):
        raise OptionError(f"{folder}: exists and is not a block store; a block store is written to a new folder or "
                          "over another block store")
    folder.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_folders(folder.parent, folder.name)
    temporary = folder.parent / temporary_folder_name(folder.name)
    temporary.mkdir()

    def write(index, layout, local, optional, ranks):
        buffer = packed(layout, local, optional, ranks=ranks)
        stored, frames = encode(buffer.numpy(), codec)
        block_file(temporary, index).write_bytes(stored)
        # the checksum is over what is stored: a damaged file is refused before it is decoded
        return {"bytes": buffer.numel(), "stored": len(stored), "xxh3": xxhash.xxh3_64_hexdigest(stored),
                **({"frames": frames, "planes": PLANES} if frames is not None else {})}

    try:
        meta, features = build_blocks(pieces, options, chunks_per_batch, block_bytes, device, fields, progress, write,
                                      ids)
        for name, array in features.items():
            np.save(temporary / f"{name}.npy", array.numpy())
        # meta.json last: a store is whole when it has one
        (temporary / META_FILE).write_text(json.dumps(sealed(dict(meta, codec=codec), temporary)))
        if folder.exists():
            # the old store is moved aside first: a crash between the renames leaves it a stale temporary
            old = folder.parent / temporary_folder_name(folder.name)
            os.rename(folder, old)
            os.rename(temporary, folder)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.rename(temporary, folder)
    finally:
        shutil.rmtree(temporary, ignore_errors=True)
    return DiskBlocks(folder, pin=device.type == "cuda")


def pinned_blocks(pieces, options=None, chunks_per_batch=1, block_bytes=256 << 20, device=None, fields=False,
                  progress=None, ids="auto"):
    """The same blocks held in (pinned) host memory instead of on disk: data larger than the GPU
    that fits the host, made without ever holding the whole layout anywhere."""
    device = torch.device(device) if device is not None else default_device()
    buffers = []

    def keep(index, layout, local, optional, ranks):
        buffers.append(packed(layout, local, optional, pin=device.type == "cuda", ranks=ranks))
        return {"bytes": buffers[-1].numel()}

    meta, features = build_blocks(pieces, options, chunks_per_batch, block_bytes, device, fields, progress, keep, ids)
    return PinnedBlocks(_meta_layout(meta, features), _blocks_of(meta), buffers, frozenset(meta["optional"]),
                        float(meta["value_scale"]), field_ranks(meta, features))


def _blocks_of(meta):
    return tuple(Block(**{field.name: entry[field.name] for field in dataclasses.fields(Block)})
                 for entry in meta["blocks"])


def _meta_layout(meta, features):
    """The meta layout (alac.runtime.movement.blocks.meta_layout) of a store's meta dict and feature arrays."""
    optional = meta["optional"]
    stats = dict(meta["stats"], top_share=tuple(tuple(p) for p in meta["stats"]["top_share"]))
    empty32, empty64 = torch.empty(0, dtype=torch.int32), torch.empty(0, dtype=torch.int64)
    return BigraphLayout(
        options=LayoutOptions(**meta["options"]), n_rows=meta["n_rows"], n_features=meta["n_features"],
        n_fields=meta["n_fields"], fixed_width=meta["fixed_width"], row_of_slot=empty64, labels=torch.empty(0),
        row_nnz=empty32, chunk_start=torch.zeros(1, dtype=torch.int64), chunk_width=empty32,
        edge_feature=empty32, edge_value=torch.empty(0) if "edge_value" in optional else None,
        edge_field=empty32.clone() if "edge_field" in optional else None, hot_edges=None, cold_edges=None,
        stats=LayoutStats(**stats), tile_width=meta["tile_width"], **{name: features[name] for name in FEATURE_ARRAYS})


def synthetic_pieces(n_rows, rows_per_piece=1 << 22, **criteo_like_options):
    """pieces() of alac.data.synthetic.criteo_like's first n_rows rows, made piece by piece."""
    from alac.data.synthetic import criteo_like

    def pieces():
        for first in range(0, n_rows, rows_per_piece):
            yield criteo_like(min(rows_per_piece, n_rows - first), first_row=first, **criteo_like_options)

    return pieces


def file_pieces(path, format="auto", **load_options):
    """pieces() of a data file read block by block (alac.data.formats.iter_blocks)."""
    from alac.data import formats

    return lambda: formats.iter_blocks(path, format, **load_options)


class DiskBlocks:
    """A block store opened for reading: its meta layout, blocks and a reader of their buffers."""

    def __init__(self, folder, pin=False, ring_depth=RING_DEPTH, readers=READERS, page_cache=True):
        """page_cache=False drops a file's pages from the OS page cache once read: a store larger than
        memory then leaves other files' pages alone, and every epoch reads from the disk."""
        self.folder = Path(folder)
        meta, features = read_manifest(self.folder)
        features = {name: torch.from_numpy(array) for name, array in features.items()}
        self.meta = _meta_layout(meta, features)
        self.field_ranks = field_ranks(meta, features)
        self.blocks = _blocks_of(meta)
        self._entries = meta["blocks"]
        self.optional = frozenset(meta["optional"])
        self.value_scale = float(meta["value_scale"])
        self.base = meta["base"]
        self.codec = meta.get("codec")
        self._check_recorded_damage()
        self.pin, self.ring_depth, self.readers = pin, ring_depth, readers
        self.page_cache = page_cache or not hasattr(os, "posix_fadvise")
        self._pool, self._free = None, None

    def _check_recorded_damage(self):
        """A block an earlier reader found damaged is checked again before any training: still
        damaged, the store is refused; repaired (the file copied again), the record goes."""
        record = self.folder / DAMAGED_FILE
        if not record.is_file():
            return
        try:
            index = int(json.loads(record.read_text())["block"])
        except (OSError, ValueError, KeyError, TypeError):
            index = None
        indices = range(len(self._entries)) if index is None or not 0 <= index < len(self._entries) else [index]
        for block in indices:
            path = block_file(self.folder, block)
            if xxhash.xxh3_64_hexdigest(path.read_bytes()) != self._entries[block]["xxh3"]:
                raise DataError(f"block {block} is damaged (its bytes do not match the store's checksum, found by an "
                                f"earlier run: {record.name}); {REBUILD}", path=path)
        record.unlink(missing_ok=True)

    def restored(self, block, index):
        """Block index's buffer as packed, wherever it was copied to (zstd frames' byte planes undone)."""
        return from_planes(block, self._entries[index].get("planes", 1))

    def mark_damaged(self, index):
        """Record beside the store that block index is damaged (the next opening refuses it at once)."""
        try:
            (self.folder / DAMAGED_FILE).write_text(json.dumps({"block": index, "file": block_file("", index).name}))
        except OSError:
            pass  # a read-only store: the next reader finds the damage as this one did

    def _ring(self):
        if self._pool is None:
            size = max(entry["bytes"] for entry in self._entries)
            self._free = queue.Queue()
            for _ in range(self.ring_depth):
                self._free.put((torch.empty(size, dtype=torch.uint8, pin_memory=self.pin), None))
            # a block's thread waits for its reads, then decodes it while the disk reads the next blocks
            threads = self.readers + (self.ring_depth if self.codec is not None else 0)
            self._pool = ThreadPoolExecutor(threads, thread_name_prefix="alac-blocks")
            self._disk = ThreadPoolExecutor(self.readers, thread_name_prefix="alac-disk")
        return self._pool, self._free

    def _read_file(self, path, into):
        """The file's bytes read into the uint8 array `into` by every disk thread at once, a range each:
        the blocks arrive in the order asked, the first after its own read rather than with the
        readers' others; returns the bytes read."""
        share = -(-into.size // self.readers)
        step = max(READ_ALIGN, -(-share // READ_ALIGN) * READ_ALIGN)

        def read_range(start):
            with open(path, "rb", buffering=0) as handle:
                handle.seek(start)
                view, done = memoryview(into)[start:start + step], 0
                while done < len(view):
                    count = handle.readinto(view[done:])
                    if not count:
                        break
                    done += count
                if not self.page_cache:
                    os.posix_fadvise(handle.fileno(), start, done, os.POSIX_FADV_DONTNEED)
                return done

        return sum(future.result() for future in [self._disk.submit(read_range, start)
                                                  for start in range(0, max(into.size, 1), step)])

    def _ring_buffer(self, turn):
        """A free ring buffer once its last copy is done, taken in the order of the reads (turn: the
        event the read before sets once it has its buffer, and this read's own): the oldest read
        waiting always gets the next buffer freed, so the reader of the blocks in order never waits on
        a read that waits on it."""
        before, mine = turn
        if before is not None:
            before.wait()
        buffer, copied = self._free.get()
        mine.set()
        if copied is not None:
            copied.synchronize()
        return buffer

    def _read_into(self, index, turn):
        """A ring buffer holding block index, read, checked and decoded (runs on a reader thread). A
        compressed block is read whole before it takes a buffer (its checksum is over what is stored),
        so the disk goes on reading while earlier blocks decompress and wait for their copies."""
        try:
            return self._read_block(index, turn)
        finally:
            turn[1].set()   # taken a buffer or failed before: the reads after this one take theirs

    def _read_block(self, index, turn):
        entry, path = self._entries[index], block_file(self.folder, index)
        stored_bytes = entry.get("stored", entry["bytes"])
        if self.codec is None:
            buffer = self._ring_buffer(turn)
            view = buffer[:entry["bytes"]]
            stored = view.numpy()
        else:
            buffer, stored = None, np.empty(stored_bytes, dtype=np.uint8)
        read = self._read_file(path, stored)
        problem = None
        if read != stored_bytes or xxhash.xxh3_64_hexdigest(stored) != entry["xxh3"]:
            problem = "its bytes do not match the store's checksum"
        elif self.codec is not None:
            buffer = self._ring_buffer(turn)
            view = buffer[:entry["bytes"]]
            try:
                decode_into(stored, view.numpy(), self.codec, entry.get("frames"))
            except ValueError as error:
                problem = f"it does not decode ({error})"
        if problem is not None:
            if buffer is not None:
                self._free.put((buffer, None))
            self.mark_damaged(index)
            raise DataError(f"block {index} is damaged ({problem}); {REBUILD}", path=path)
        return buffer, view

    def read(self, order):
        """(index, host buffer, release) of the blocks in order, read ahead on reader threads;
        release(event or None) returns the buffer to the ring once the event's copy is done."""
        pool, free = self._ring()
        order, pending = list(order), deque()
        upcoming = iter(order)
        last_turn = [None]

        def submit():
            index = next(upcoming, None)
            if index is not None:
                turn = (last_turn[0], threading.Event())
                last_turn[0] = turn[1]
                pending.append((index, pool.submit(self._read_into, index, turn)))

        # compressed blocks are read before they need a buffer: every reader keeps reading
        ahead = self.ring_depth + (self.readers if self.codec is not None else 0)
        for _ in range(min(ahead, len(order))):
            submit()
        held = []   # the buffer handed out and not yet released
        try:
            while pending:
                index, future = pending.popleft()
                buffer, view = future.result()
                held[:] = [buffer]

                def release(event, buffer=buffer):
                    held.clear()
                    free.put((buffer, event))
                    submit()

                yield index, view, release
        finally:
            # a reader left early (an error, another epoch's order) gives every buffer back to the ring
            for buffer in held:
                free.put((buffer, None))
            for _, future in pending:
                if future.exception() is None:
                    free.put((future.result()[0], None))

    def close(self):
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._disk.shutdown(wait=True)
            self._pool = self._free = None


def cached_block_store(path, format="auto", options=None, chunks_per_batch=1, block_bytes=256 << 20,
                       cache_dir=None, device=None, progress=None, codec=None, **load_options):
    """The block store of a data file under the cache directory, keyed by the file's content and the
    options; written (two passes over the file) when absent, damaged or truncated."""
    from alac.cache import DiskCache
    from alac.data import formats

    format = formats.resolve_format(path, format)
    options = dataclasses.replace(options if options is not None else LayoutOptions(), hot_size=0)
    device = torch.device(device) if device is not None else default_device()
    key = DiskCache.key("blocks", dataset=formats.dataset_cache_key(path, format, load_options),
                        options=dataclasses.asdict(options), chunks_per_batch=chunks_per_batch,
                        block_bytes=block_bytes, **({"codec": codec} if codec else {}))
    root = DiskCache(cache_dir).root
    remove_stale_folders(root)
    folder = root / key
    if (folder / META_FILE).exists():
        try:
            return DiskBlocks(folder, pin=device.type == "cuda")
        except DataError:
            pass  # damaged: alac's own copy, written again below
    return write_block_store(folder, file_pieces(path, format, **load_options), options, chunks_per_batch,
                             block_bytes, device, progress=progress, codec=codec)
