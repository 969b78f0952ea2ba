"""Block stores on disk: written in two passes from a file read piece by piece or from a generator,
read back through the ring of reader threads; they hold exactly the data, train like the resident
layout of the same blocks, and a truncated or corrupted block is a clear error and gets rebuilt."""

import dataclasses

import pytest
import torch

from alac.data import load_libsvm, write_libsvm
from alac.data.synthetic import criteo_like
from alac.errors import DataError
from alac.plan import Plan
from alac.runtime.block_store import (
    DiskBlocks,
    cached_block_store,
    file_pieces,
    pinned_blocks,
    synthetic_pieces,
    write_block_store,
)
from alac.runtime.blocks import decoded, unpack
from alac.runtime.executor import Executor, LabelMap
from alac.runtime.layout import LayoutOptions
from alac.runtime.streams import StreamedLayout
from tests.codegen.test_kernels import awkward_dataset
from tests.runtime.test_streams import DEVICE, KERNELS
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
        parts.append((store.blocks[index], decoded(unpack(buffer.clone(), store.blocks[index],
                                                          store.meta.chunk_size, store.optional))))
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


@pytest.mark.parametrize("ids", ["int32", "narrow"])
def test_a_block_store_holds_the_file_it_was_written_from(tmp_path, ids):
    """Pieces of the file (a few hundred bytes each) regrouped into blocks of whole batches: the
    blocks hold every row once, re-indexed by the frequency of the whole file, rows numbered as in it
    (ids moved in either wire form)."""
    path = _file(tmp_path)
    store = write_block_store(tmp_path / "store", file_pieces(path, block_bytes=600), OPTIONS, chunks_per_batch=2,
                              block_bytes=2000, device="cpu", ids=ids)
    store = DiskBlocks(store.folder, ring_depth=2)
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


def test_generated_pieces_are_the_set_generated_whole(tmp_path):
    """criteo_like's rows are drawn by counter: made in pieces of 300 rows they are the 1,000-row set."""
    store = write_block_store(tmp_path / "store", synthetic_pieces(1000, 300, n_fields=4, device="cpu"), OPTIONS,
                              chunks_per_batch=4, block_bytes=3000, device="cpu")
    assert len(store.blocks) > 2
    whole = criteo_like(1000, n_fields=4, device="cpu")
    _same_data(_resident(store).to_csr(), dataclasses.replace(whole, fields=None))
    assert store.meta.fixed_width == 4


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


def test_a_truncated_block_is_a_clear_error_before_training_and_the_cached_store_is_rebuilt(tmp_path):
    path = _file(tmp_path)
    store = cached_block_store(path, options=OPTIONS, chunks_per_batch=2, block_bytes=2000, cache_dir=tmp_path / "c",
                               device="cpu")
    victim = store.folder / "block-000001.bin"
    victim.write_bytes(victim.read_bytes()[:100])
    with pytest.raises(DataError, match=r"block-000001\.bin: block 1 is truncated: 100 bytes of [\d,]+$"):
        DiskBlocks(store.folder)
    rebuilt = cached_block_store(path, options=OPTIONS, chunks_per_batch=2, block_bytes=2000,
                                 cache_dir=tmp_path / "c", device="cpu")
    assert rebuilt.folder == store.folder
    _same_data(_resident(rebuilt).to_csr(), load_libsvm(path))


def test_a_corrupted_block_is_a_clear_error_when_read_and_the_cached_store_is_rebuilt(tmp_path):
    path = _file(tmp_path)
    store = cached_block_store(path, options=OPTIONS, chunks_per_batch=2, block_bytes=2000, cache_dir=tmp_path / "c",
                               device="cpu")
    victim = store.folder / "block-000002.bin"
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0x40
    victim.write_bytes(bytes(data))
    with pytest.raises(DataError, match=r"block-000002\.bin: block 2 is damaged"):
        _resident(store)
    store.close()
    # a whole store never reads as one afterwards; asking for it again writes it again
    with pytest.raises(DataError, match="not a block store"):
        DiskBlocks(store.folder)
    rebuilt = cached_block_store(path, options=OPTIONS, chunks_per_batch=2, block_bytes=2000,
                                 cache_dir=tmp_path / "c", device="cpu")
    _same_data(_resident(rebuilt).to_csr(), load_libsvm(path))


def test_a_folder_that_is_no_block_store_is_a_clear_error(tmp_path):
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
