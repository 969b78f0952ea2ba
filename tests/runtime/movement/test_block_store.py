"""Block stores on disk: written in two passes from a file read piece by piece or from a generator,
read back through the ring of reader threads; they hold exactly the data, train like the resident
layout of the same blocks, and a truncated or corrupted block is a clear error and gets rebuilt."""

import dataclasses
import json
import os
import threading
from pathlib import Path

import pytest
import torch
import xxhash

from alac.data import load_libsvm, write_libsvm
from alac.data.synthetic import criteo_like
from alac.errors import DataError, OptionError
from alac.plan import Plan
from alac.runtime.execution.executor import Executor, LabelMap
from alac.runtime.movement.block_manifest import block_file
from alac.runtime.movement.block_store import (
    DAMAGED_FILE,
    DiskBlocks,
    cached_block_store,
    file_pieces,
    pinned_blocks,
    synthetic_pieces,
    write_block_store,
)
from alac.runtime.movement.blocks import decoded, unpack
from alac.runtime.movement.layout import LayoutOptions
from alac.runtime.movement.streams import StreamedLayout
from tests.codegen.test_kernels import awkward_dataset
from tests.runtime.movement.test_streams import DEVICE, KERNELS
from tests.zoo_models import ZOO

OPTIONS = LayoutOptions(chunk_size=8)


def _file(tmp_path, rows=301):
    path = tmp_path / "data.svm"
    write_libsvm(awkward_dataset(5, n_rows=rows, n_features=40), path)
    return path


def _resident(store):
    """The store's blocks read back (through the ring) and joined into one layout, in block order."""
    parts = []
    for index, buffer, release in store.read(range(len(store.blocks))):
        block = store.restored(buffer.clone(), index)
        parts.append((store.blocks[index], decoded(unpack(block, store.blocks[index], store.meta.chunk_size,
                                                          store.optional), store.field_ranks)))
        release(None)
    arrays = {name: torch.cat([part[name] for _, part in parts]) for name in parts[0][1] if name != "chunk_start"}
    starts = [part["chunk_start"][:-1] + block.first_edge for block, part in parts]
    arrays["chunk_start"] = torch.cat(starts + [torch.tensor([parts[-1][0].end_edge])])
    return dataclasses.replace(store.meta, **arrays)


def _same_data(got, expected):
    assert torch.equal(got.indptr, expected.indptr)
    assert torch.equal(got.indices, expected.indices)
    assert torch.equal(got.labels, expected.labels)
    assert (got.values is None) == (expected.values is None)
    if expected.values is not None:
        assert torch.equal(got.values, expected.values)


@pytest.mark.parametrize("ids, codec", [("int32", None), ("narrow", None), ("narrow", "zstd")])
def test_a_block_store_holds_the_file_it_was_written_from(tmp_path, monkeypatch, ids, codec):
    """Pieces of the file (a few hundred bytes each) regrouped into blocks of whole batches: the
    blocks hold every row once, re-indexed by the frequency of the whole file, rows numbered as in it
    (ids moved in either wire form; the block files as they are or zstd-compressed, smaller, in
    frames decompressed on several threads)."""
    from alac.runtime.movement import block_codec, block_store

    monkeypatch.setattr(block_codec, "FRAME_BYTES", 256)
    monkeypatch.setattr(block_store, "READ_ALIGN", 64)   # a block file read in several ranges at once
    path = _file(tmp_path)
    store = write_block_store(tmp_path / "store", file_pieces(path, block_bytes=600), OPTIONS, chunks_per_batch=2,
                              block_bytes=2000, device="cpu", ids=ids, codec=codec)
    store = DiskBlocks(store.folder, ring_depth=2)
    assert store.codec == codec
    sizes = [(store.folder / f"block-{index:06d}.bin").stat().st_size for index in range(len(store.blocks))]
    packed_sizes = [entry["bytes"] for entry in store._entries]
    assert (sizes == packed_sizes) == (codec is None) and sum(sizes) <= sum(packed_sizes)
    if codec is not None:
        assert all(len(entry["frames"]) == -(-entry["bytes"] // 256) and entry["planes"] == 4
                   for entry in store._entries)
    assert ("edge_id16" in store.optional) == (ids == "narrow")
    assert len(store.blocks) > 4
    assert all(block.chunks % 2 == 0 for block in store.blocks[:-1])
    expected = load_libsvm(path)
    resident = _resident(store)
    _same_data(resident.to_csr(), expected)
    frequency = torch.bincount(expected.indices.long(), minlength=expected.n_features)
    assert torch.equal(store.meta.frequency, frequency[store.meta.new_to_old.long()])
    assert torch.all(store.meta.frequency[:-1] >= store.meta.frequency[1:])
    assert store.value_scale == pytest.approx(float(expected.values.abs().mean()), rel=1e-6)
    store.close()


@pytest.mark.parametrize("ring_depth, readers", [(1, 3), (2, 4)])
def test_compressed_blocks_read_ahead_of_their_buffers_come_in_order_and_a_reader_may_stop(tmp_path, monkeypatch,
                                                                                          ring_depth, readers):
    """A compressed block is read before it takes a ring buffer, so more reads are in flight than
    buffers: they still take the buffers in order (no read waits on one the reader cannot release),
    and a reader that stops early, or the next one, does not hang."""
    pytest.importorskip("zstandard")
    from alac.runtime.movement import block_store

    monkeypatch.setattr(block_store, "READ_ALIGN", 32)
    written = write_block_store(tmp_path / "store", file_pieces(_file(tmp_path)), OPTIONS, 2, block_bytes=1500,
                                device="cpu", codec="zstd")
    store = DiskBlocks(written.folder, ring_depth=ring_depth, readers=readers)
    _same_data(_resident(store).to_csr(), load_libsvm(tmp_path / "data.svm"))
    order = list(range(len(store.blocks)))[::-1]
    reader = store.read(order)
    first, buffer, release = next(reader)
    assert first == order[0]
    release(None)
    reader.close()
    assert [index for index, _, release in _released(store.read(order))] == order
    store.close()


@pytest.mark.skipif(not hasattr(os, "posix_fadvise"), reason="no posix_fadvise on this platform")
def test_a_store_read_without_the_page_cache_drops_every_range_it_read(tmp_path, monkeypatch):
    """page_cache=False: every range a disk thread read is dropped from the page cache, each file's
    ranges covering it exactly once, and the blocks are the same."""
    from alac.runtime.movement import block_store

    monkeypatch.setattr(block_store, "READ_ALIGN", 32)
    written = write_block_store(tmp_path / "store", file_pieces(_file(tmp_path)), OPTIONS, 2, block_bytes=1500,
                                device="cpu", codec=None)
    dropped, lock = [], threading.Lock()
    fadvise = os.posix_fadvise

    def recorded(fd, offset, length, advice):
        with lock:
            dropped.append((os.readlink(f"/proc/self/fd/{fd}"), offset, length, advice))
        return fadvise(fd, offset, length, advice)

    monkeypatch.setattr(os, "posix_fadvise", recorded)
    _resident(DiskBlocks(written.folder, readers=3))
    assert dropped == []
    store = DiskBlocks(written.folder, readers=3, page_cache=False)
    _same_data(_resident(store).to_csr(), load_libsvm(tmp_path / "data.svm"))
    assert {advice for *_, advice in dropped} == {os.POSIX_FADV_DONTNEED}
    for index in range(len(store.blocks)):
        path = str(block_file(store.folder, index).resolve())
        ranges = sorted((offset, length) for name, offset, length, _ in dropped if name == path)
        assert ranges[0][0] == 0 and len(ranges) > 1
        assert all(a + n == b for (a, n), (b, _) in zip(ranges, ranges[1:]))
        assert sum(n for _, n in ranges) == Path(path).stat().st_size
    store.close()


def _released(reader):
    for index, buffer, release in reader:
        release(None)
        yield index, buffer, release


def test_generated_pieces_are_the_set_generated_whole(tmp_path):
    """criteo_like's rows are drawn by counter: made in pieces of 300 rows they are the 1,000-row set."""
    store = write_block_store(tmp_path / "store", synthetic_pieces(1000, 300, n_fields=4, device="cpu"), OPTIONS,
                              chunks_per_batch=4, block_bytes=3000, device="cpu")
    assert len(store.blocks) > 2
    whole = criteo_like(1000, n_fields=4, device="cpu")
    _same_data(_resident(store).to_csr(), dataclasses.replace(whole, fields=None))
    assert store.meta.fixed_width == 4


def test_one_hot_rows_with_a_field_a_slot_move_their_ids_as_ranks_within_the_field(tmp_path):
    """criteo_like's rows (field s in slot s): the narrow words are ranks within a field (smaller),
    the blocks hold the same rows, and training from them equals training from the ids' words."""
    pieces = synthetic_pieces(3000, 700, n_fields=5, device="cpu")
    ranked = write_block_store(tmp_path / "ranked", pieces, OPTIONS, 4, block_bytes=20_000, device="cpu")
    narrow = write_block_store(tmp_path / "narrow", pieces, OPTIONS, 4, block_bytes=20_000, device="cpu", ids="narrow")
    plain = write_block_store(tmp_path / "plain", pieces, OPTIONS, 4, block_bytes=20_000, device="cpu", ids="int32")
    assert ranked.field_ranks.width == 5 and narrow.field_ranks is None and plain.field_ranks is None
    assert (ranked.folder / "field_of.npy").is_file() and not (narrow.folder / "field_of.npy").exists()
    whole = dataclasses.replace(criteo_like(3000, n_fields=5, device="cpu"), fields=None)
    _same_data(_resident(DiskBlocks(ranked.folder)).to_csr(), whole)
    _same_data(_resident(narrow).to_csr(), whole)
    # the same rows, other words: ranks within a field are smaller than ids (the escapes: test_wire.py)
    words = [unpack(next(iter(store.read([0])))[1], store.blocks[0], 8, store.optional)["edge_id16"].int() & 0xFFFF
             for store in (ranked, narrow)]
    assert words[0].sum() < words[1].sum()
    losses = []
    for store in (ranked, narrow):
        streamed = StreamedLayout(DiskBlocks(store.folder), "cpu")
        label_map = LabelMap.fit("binary", streamed.first_block().labels)
        executor = Executor(ZOO["lr"](), Plan(chunk_size=8, batch_size=32), backend="reference", device="cpu", seed=1)
        losses.append([executor.train_streamed_epoch(streamed, lambda b: label_map.model_labels(b.labels), epoch, 0.3)
                       for epoch in range(2)])
        streamed.close()
    assert losses[0] == losses[1]
    with pytest.raises(OptionError, match="ids as field ranks need one id of each field a row, field s in slot s: "
                                          "the rows are not one id of each field"):
        write_block_store(tmp_path / "libsvm", file_pieces(_file(tmp_path)), OPTIONS, 2, block_bytes=2000,
                          device="cpu", ids="field_ranks")


def test_a_store_whose_fields_are_out_of_range_is_refused(tmp_path):
    import numpy as np

    from alac.runtime.movement.block_manifest import sealed

    store = write_block_store(tmp_path / "store", synthetic_pieces(500, n_fields=4, device="cpu"), OPTIONS, 2,
                              block_bytes=4000, device="cpu")
    field_of = np.load(store.folder / "field_of.npy")
    field_of[7] = 4
    np.save(store.folder / "field_of.npy", field_of)
    meta = json.loads((store.folder / "meta.json").read_text())
    (store.folder / "meta.json").write_text(json.dumps(sealed(meta, store.folder)))
    with pytest.raises(DataError, match="field_of.npy has fields outside 0 to 3"):
        DiskBlocks(store.folder)
    meta["field_ranks"] = 3
    (store.folder / "meta.json").write_text(json.dumps(sealed(meta, store.folder)))
    with pytest.raises(DataError, match="field_ranks 3 of rows of 4 ids"):
        DiskBlocks(store.folder)


@pytest.mark.parametrize("backend", ["reference", KERNELS])
def test_sync_training_from_disk_equals_resident_training_of_its_blocks(tmp_path, backend):
    path = _file(tmp_path)
    plan = Plan(chunk_size=8, batch_size=16, deterministic=backend != "reference")
    device = DEVICE if backend == "triton" else "cpu"
    store = write_block_store(tmp_path / "store", file_pieces(path), OPTIONS, plan.chunks_per_batch, block_bytes=1500,
                              device=device)
    streamed = StreamedLayout(store, device)
    resident_layout = _resident(store).to(device)
    label_map = LabelMap.fit("binary", resident_layout.labels)
    labels = label_map.model_labels(resident_layout.labels)
    resident = Executor(ZOO["fm"](), plan, backend=backend, device=device, seed=2, optimizer="adagrad")
    stream = Executor(ZOO["fm"](), plan, backend=backend, device=device, seed=2, optimizer="adagrad")
    resident.initialize(resident_layout)
    for epoch in range(2):
        expected = resident.train_epoch(resident_layout, labels, epoch, 0.3, streamed.epoch_order(epoch, 2))
        got = stream.train_streamed_epoch(streamed, lambda block: label_map.model_labels(block.labels), epoch, 0.3)
        assert got == pytest.approx(expected, rel=1e-6, abs=1e-7)
    for name, values in resident.state.params.items():
        assert torch.equal(stream.state.params[name], values), name
    streamed.close()


@pytest.mark.parametrize("codec", [None, "zstd"])
def test_a_truncated_block_is_a_clear_error_before_training_and_the_cached_store_is_rebuilt(tmp_path, codec):
    path = _file(tmp_path)
    store = cached_block_store(path, options=OPTIONS, chunks_per_batch=2, block_bytes=2000, cache_dir=tmp_path / "c",
                               device="cpu", codec=codec)
    victim = store.folder / "block-000001.bin"
    victim.write_bytes(victim.read_bytes()[:100])
    with pytest.raises(DataError, match=r"block-000001\.bin: block 1 is truncated: 100 bytes of [\d,]+; write the st"):
        DiskBlocks(store.folder)
    rebuilt = cached_block_store(path, options=OPTIONS, chunks_per_batch=2, block_bytes=2000,
                                 cache_dir=tmp_path / "c", device="cpu", codec=codec)
    assert rebuilt.folder == store.folder and rebuilt.codec == codec
    _same_data(_resident(rebuilt).to_csr(), load_libsvm(path))


@pytest.mark.parametrize("codec", [None, "zstd"])
def test_a_corrupted_block_is_a_clear_error_when_read_and_the_cached_store_is_rebuilt(tmp_path, codec):
    path = _file(tmp_path)
    store = cached_block_store(path, options=OPTIONS, chunks_per_batch=2, block_bytes=2000, cache_dir=tmp_path / "c",
                               device="cpu", codec=codec)
    victim = store.folder / "block-000002.bin"
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0x40
    victim.write_bytes(bytes(data))
    with pytest.raises(DataError, match=r"block-000002\.bin: block 2 is damaged .*write the store again"):
        _resident(store)
    store.close()
    # nothing is deleted; the damage is recorded beside the store, so the next opening refuses it at once
    assert (store.folder / "meta.json").is_file()
    with pytest.raises(DataError, match=r"block 2 is damaged .*found by an earlier run"):
        DiskBlocks(store.folder)
    # the cache's own store is written again
    rebuilt = cached_block_store(path, options=OPTIONS, chunks_per_batch=2, block_bytes=2000,
                                 cache_dir=tmp_path / "c", device="cpu", codec=codec)
    _same_data(_resident(rebuilt).to_csr(), load_libsvm(path))
    assert not (rebuilt.folder / DAMAGED_FILE).exists()


def test_a_compressed_block_that_does_not_decode_to_its_size_is_damaged_and_a_bad_codec_is_refused(tmp_path):
    """A block file whose checksum holds (a manifest written for it) but whose bytes decompress to another
    size is one clear error when read; an unknown codec is refused before anything is written."""
    import zstandard

    from alac.runtime.movement.block_manifest import sealed

    store = write_block_store(tmp_path / "store", file_pieces(_file(tmp_path)), OPTIONS, 2, block_bytes=2000,
                              device="cpu", codec="zstd")
    victim = store.folder / "block-000001.bin"
    other = zstandard.ZstdCompressor().compress(b"\0" * 10)
    victim.write_bytes(other)
    meta = json.loads((store.folder / "meta.json").read_text())
    meta["blocks"][1].update(stored=len(other), xxh3=xxhash.xxh3_64_hexdigest(other), frames=[len(other)])
    (store.folder / "meta.json").write_text(json.dumps(sealed(meta, store.folder)))
    with pytest.raises(DataError, match=r"block 1 is damaged \(it does not decode \(frame 0: 10 bytes, not [\d,]+\)\)"):
        _resident(DiskBlocks(store.folder))
    with pytest.raises(OptionError, match="codec is one of None, zstd, got 'lz4'"):
        write_block_store(tmp_path / "other", file_pieces(_file(tmp_path)), OPTIONS, 2, device="cpu", codec="lz4")


def test_a_repaired_block_clears_the_record_of_its_damage(tmp_path):
    store = write_block_store(tmp_path / "store", file_pieces(_file(tmp_path)), OPTIONS, 2, block_bytes=2000,
                              device="cpu")
    victim = store.folder / "block-000001.bin"
    original = victim.read_bytes()
    victim.write_bytes(original[:-1] + bytes([original[-1] ^ 1]))
    with pytest.raises(DataError, match="block 1 is damaged"):
        _resident(store)
    store.close()
    with pytest.raises(DataError, match="block 1 is damaged"):
        DiskBlocks(store.folder)
    victim.write_bytes(original)        # the user copies the file again
    _same_data(_resident(DiskBlocks(store.folder)).to_csr(), load_libsvm(tmp_path / "data.svm"))
    assert not (store.folder / DAMAGED_FILE).exists()


def _edit_meta(folder, edit, reseal=False):
    """meta.json of a store edited; reseal: with its checksum made to match again (a store written
    wrong, not edited afterwards)."""
    path = folder / "meta.json"
    meta = json.loads(path.read_text())
    edit(meta)
    if reseal:
        meta["checksum"] = xxhash.xxh3_64_hexdigest(json.dumps({k: v for k, v in meta.items() if k != "checksum"},
                                                               sort_keys=True).encode())
    path.write_text(json.dumps(meta))


def _swap_blocks(meta):
    meta["blocks"][0], meta["blocks"][1] = meta["blocks"][1], meta["blocks"][0]


MANIFEST_EDITS = {
    "the last block dropped": (lambda m: m["blocks"].pop(), "the blocks hold [\\d,]+ rows, n_rows says"),
    "no blocks": (lambda m: m["blocks"].clear(), "no blocks"),
    "base 0": (lambda m: m.update(base=0), None),
    "value_scale x 1e6": (lambda m: m.update(value_scale=m["value_scale"] * 1e6), None),
    "n_rows x 2": (lambda m: m.update(n_rows=2 * m["n_rows"]), "n_rows says"),
    "n_features 10": (lambda m: m.update(n_features=10), "statistics disagree|holds int"),
    "an end_edge edited": (lambda m: m["blocks"][0].update(end_edge=m["blocks"][0]["end_edge"] + 8),
                           "block 1 starts at chunk"),
    "optional []": (lambda m: m.update(optional=[]), "no one form of the ids"),
    "two blocks swapped with their checksums": (_swap_blocks, "block 0 starts at chunk"),
    "no version": (lambda m: m.pop("version"), "a block store of version None"),
}


@pytest.mark.parametrize("edit", MANIFEST_EDITS)
def test_an_edited_manifest_is_one_clear_error_before_any_training(tmp_path, edit):
    change, inconsistency = MANIFEST_EDITS[edit]
    store = write_block_store(tmp_path / "store", file_pieces(_file(tmp_path)), OPTIONS, 2, block_bytes=2000,
                              device="cpu")
    _edit_meta(store.folder, change)
    message = "a block store of version" if edit == "no version" else "the manifest does not match its checksum"
    with pytest.raises(DataError, match=f"store/meta.json: {message}"):
        DiskBlocks(store.folder)
    if inconsistency is not None and edit != "no version":
        # the same fields written by a writer that got them wrong: the manifest's own checks
        store = write_block_store(tmp_path / "store", file_pieces(_file(tmp_path)), OPTIONS, 2, block_bytes=2000,
                                  device="cpu")
        _edit_meta(store.folder, change, reseal=True)
        with pytest.raises(DataError, match=f"store/meta.json: an inconsistent block store manifest .*{inconsistency}"):
            DiskBlocks(store.folder)


@pytest.mark.parametrize("name", ["new_to_old", "old_to_new", "frequency"])
def test_a_changed_feature_array_is_one_clear_error(tmp_path, name):
    import numpy as np

    store = write_block_store(tmp_path / "store", file_pieces(_file(tmp_path)), OPTIONS, 2, block_bytes=2000,
                              device="cpu")
    path = store.folder / f"{name}.npy"
    np.save(path, np.random.default_rng(0).permutation(np.load(path)))
    with pytest.raises(DataError, match=f"{name}.npy: damaged: its bytes do not match the store's checksum"):
        DiskBlocks(store.folder)
    path.unlink()
    with pytest.raises(DataError, match=f"{name}.npy: missing"):
        DiskBlocks(store.folder)


def test_stale_temporaries_of_killed_writers_are_removed_by_the_next_writer(tmp_path):
    from tests.test_outputs import _dead_pid

    pid = _dead_pid()
    stale = [tmp_path / f".store.{pid}.0123456789ab.tmp", tmp_path / "c" / f".blocks-ab12.{pid}.0123456789ab.tmp"]
    alive = tmp_path / f".store.{os.getpid()}.0123456789ab.tmp"
    for folder in [*stale, alive]:
        folder.mkdir(parents=True)
        (folder / "block-000000.bin").write_bytes(b"half")
    write_block_store(tmp_path / "store", file_pieces(_file(tmp_path)), OPTIONS, 2, block_bytes=2000, device="cpu")
    cached_block_store(_file(tmp_path), options=OPTIONS, chunks_per_batch=2, block_bytes=2000, cache_dir=tmp_path / "c",
                       device="cpu")
    assert not any(folder.exists() for folder in stale) and alive.exists()


def test_a_folder_of_other_files_is_never_written_over(tmp_path):
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("the user's")
    with pytest.raises(OptionError, match="mine: exists and is not a block store"):
        write_block_store(tmp_path / "mine", file_pieces(_file(tmp_path)), OPTIONS, 2, block_bytes=2000, device="cpu")
    assert (tmp_path / "mine" / "notes.txt").read_text() == "the user's"


def test_a_folder_that_is_no_block_store_is_a_clear_error(tmp_path):
    with pytest.raises(DataError, match=r"store: not a block store \(no such folder\)$"):
        DiskBlocks(tmp_path / "store")
    (tmp_path / "store").mkdir()
    with pytest.raises(DataError, match=r"store: not a block store \(no meta.json\)$"):
        DiskBlocks(tmp_path / "store")


def test_blocks_made_in_host_memory_are_the_blocks_written_to_disk(tmp_path):
    pieces = file_pieces(_file(tmp_path), block_bytes=600)
    store = write_block_store(tmp_path / "store", pieces, OPTIONS, 2, block_bytes=2000, device="cpu")
    held = pinned_blocks(pieces, OPTIONS, 2, block_bytes=2000, device="cpu")
    assert held.blocks == store.blocks and held.optional == store.optional
    for (_, on_disk, release), (_, in_memory, _) in zip(store.read(range(len(store.blocks))),
                                                        held.read(range(len(held.blocks)))):
        assert torch.equal(on_disk, in_memory)
        release(None)
    for name in ("new_to_old", "frequency"):
        assert torch.equal(getattr(held.meta, name), getattr(store.meta, name))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="the next epoch is read ahead only with a copy stream")
def test_reading_a_block_between_epochs_does_not_wait_for_the_read_ahead(tmp_path):
    """The next epoch's read-ahead holds every ring buffer; the divergence guard's first block, read
    between epochs, must not wait for one."""
    plan = Plan(chunk_size=8, batch_size=16)
    written = write_block_store(tmp_path / "store", file_pieces(_file(tmp_path)), OPTIONS, plan.chunks_per_batch,
                                block_bytes=1500, device="cuda")
    streamed = StreamedLayout(DiskBlocks(written.folder, pin=True, ring_depth=2), "cuda")
    label_map = LabelMap.fit("binary", streamed.first_block().labels)
    executor = Executor(ZOO["lr"](), plan, backend="triton", device="cuda", optimizer="adagrad")
    for epoch in range(2):
        executor.train_streamed_epoch(streamed, lambda block: label_map.model_labels(block.labels), epoch, 0.3)
        first = streamed.first_block()
        assert first.n_rows == streamed.blocks[0].rows
    streamed.close()


@pytest.mark.parametrize("frames", [["x"], [1], [], "all"])
def test_a_manifest_whose_frames_do_not_add_up_is_refused_when_opened(tmp_path, frames):
    pytest.importorskip("zstandard")
    from alac.runtime.movement.block_manifest import sealed

    store = write_block_store(tmp_path / "store", file_pieces(_file(tmp_path)), OPTIONS, 2, block_bytes=2000,
                              device="cpu", codec="zstd")
    meta = json.loads((store.folder / "meta.json").read_text())
    meta["blocks"][0]["frames"] = frames
    (store.folder / "meta.json").write_text(json.dumps(sealed(meta, store.folder)))
    with pytest.raises(DataError, match="block 0's frames"):
        DiskBlocks(store.folder)
