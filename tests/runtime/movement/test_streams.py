"""Streamed training: blocks of whole batches, from pinned host memory or a block store on disk, trained
one after another, equal resident training with the same chunk order."""

import pytest
import torch

from alac.plan import Plan
from alac.runtime.execution.executor import Executor, LabelMap
from alac.runtime.movement.blocks import INT32_IDS, NARROW_IDS, device_bytes, plan_blocks
from alac.runtime.movement.layout import LayoutOptions, build_layout
from alac.runtime.movement.streams import StreamedLayout
from tests.codegen.test_kernels import awkward_dataset
from tests.zoo_models import ZOO

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
# the generated kernels: compiled on a GPU, Triton's interpreter without one
KERNELS = "triton" if torch.cuda.is_available() else "interpret"


def _layout(seed=3, rows=301):
    return build_layout(awkward_dataset(seed, n_rows=rows, n_features=40), LayoutOptions(chunk_size=8), device="cpu")


@pytest.mark.parametrize("ids", [INT32_IDS, NARROW_IDS])
def test_blocks_are_whole_batches_that_cover_the_layout_within_the_budget(ids):
    layout = _layout()
    budget = 1500
    blocks = plan_blocks(layout, 2, budget, ids)
    assert len(blocks) > 3
    assert blocks[0].first_chunk == 0 and blocks[-1].end_chunk == layout.n_chunks
    assert all(a.end_chunk == b.first_chunk and a.end_edge == b.first_edge for a, b in zip(blocks, blocks[1:]))
    assert all(block.chunks % 2 == 0 for block in blocks[:-1])
    assert sum(block.rows for block in blocks) == layout.n_rows
    for block in blocks:
        assert block.first_edge == int(layout.chunk_start[block.first_chunk])
        # a block holds more than one batch only where it fits the budget
        assert block.chunks == 2 or device_bytes(block, 8, ids) <= budget
    assert plan_blocks(layout, 2, 1 << 40, ids) == (plan_blocks(layout, 2, 1 << 40, ids)[0],)


@pytest.mark.parametrize("backend", ["reference", KERNELS])
@pytest.mark.parametrize(("model", "ids"), [("lr", "int32"), ("fm", "narrow")])
def test_sync_streamed_training_equals_resident_training_in_the_same_order(backend, model, ids):
    """A tiny budget (blocks of one or two batches): bit for bit the losses and parameters of resident
    training whose epochs visit StreamedLayout.epoch_order (the kernels with the deterministic plan:
    float atomics would add in an order that depends on the program count; blocks keep the resident
    edge tiles, whose size follows the mean row width)."""
    layout = _layout()
    label_map = LabelMap.fit("binary", layout.labels)
    plan = Plan(chunk_size=8, batch_size=16, deterministic=backend != "reference")
    device = DEVICE if backend == "triton" else "cpu"
    streamed = StreamedLayout.from_layout(layout, plan.chunks_per_batch, 4 * 1500, device, ids=ids)
    assert len(streamed.blocks) > 3 and ("edge_id16" in streamed.source.optional) == (ids == "narrow")
    resident_layout = layout.to(device)
    labels = label_map.model_labels(resident_layout.labels)
    optimizer = "adagrad"
    resident = Executor(ZOO[model](), plan, backend=backend, device=device, seed=4, optimizer=optimizer)
    stream = Executor(ZOO[model](), plan, backend=backend, device=device, seed=4, optimizer=optimizer)
    expected = []
    for epoch in range(3):
        order = streamed.epoch_order(epoch, 4)
        assert sorted(order.tolist()) == list(range(layout.n_chunks))
        expected.append(resident.train_epoch(resident_layout, labels, epoch, 0.3, order))

    def block_labels(block):
        return label_map.model_labels(block.labels)

    # one epoch alone, then two queued back to back with one wait at their end
    got = [stream.train_streamed_epoch(streamed, block_labels, 0, 0.3),
           *stream.train_streamed_epochs(streamed, block_labels, 1, 2, 0.3)]
    # an epoch's loss is summed per block, then over blocks: equal to rounding
    assert got == pytest.approx(expected, rel=1e-6, abs=1e-7)
    for name, values in resident.state.params.items():
        assert torch.equal(stream.state.params[name], values), name
    assert stream.batches_done == resident.batches_done


def test_streamed_epochs_reshuffle_blocks_and_chunks():
    streamed = StreamedLayout.from_layout(_layout(), 2, 4 * 1500, "cpu")
    orders = [streamed.epoch_order(epoch, 0) for epoch in range(3)]
    assert not torch.equal(orders[0], orders[1]) and not torch.equal(orders[1], orders[2])
    assert streamed.block_order(0, 0) != streamed.block_order(1, 0)
    assert all(streamed.block_order(epoch, 0)[-1] == len(streamed.blocks) - 1 for epoch in range(3))
    # a batch mixes chunks of one block only: every pair of order positions 2i, 2i + 1 shares a block
    starts = [block.first_chunk for block in streamed.blocks]
    block_of = torch.bucketize(orders[0], torch.tensor(starts), right=True)
    assert torch.equal(block_of[0::2][: len(block_of) // 2], block_of[1::2])


@pytest.mark.gpu
@pytest.mark.parametrize("semantics", ["async", "sync"])
def test_a_streamed_epoch_queues_its_blocks_without_waiting_for_the_gpu(semantics):
    """Queuing a block's copy, decode and kernels reads nothing back from the device (torch's sync
    debug mode raises on any such read): the host queues block i + 1 while block i trains."""
    layout = _layout(rows=2000)
    label_map = LabelMap.fit("binary", layout.labels)
    plan = Plan(chunk_size=8, batch_size=16, semantics=semantics, hot_size=5)
    streamed = StreamedLayout.from_layout(layout, plan.chunks_per_batch, 4 * 4000, "cuda", ids="narrow")
    assert len(streamed.blocks) > 3
    executor = Executor(ZOO["fm"](), plan, backend="triton", device="cuda", optimizer="adagrad")
    executor.train_streamed_epoch(streamed, lambda block: label_map.model_labels(block.labels), 0, 0.3)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for _, block, order in streamed.blocks_on_device(1, executor.seed):
            executor.queue_epoch(block, label_map.model_labels(block.labels), 1, 0.3, order)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    streamed.close()


@pytest.mark.gpu
def test_a_host_far_ahead_of_the_kernels_keeps_the_blocks_intact_and_within_the_budget():
    """Each block's kernels delayed on the GPU (torch.cuda._sleep) so that the host could queue the
    epoch at once: the copy of the n-th block visited starts only once the kernels of block
    n - (read_ahead + 2) have ended (at most read_ahead + 2 blocks on the device), and sync training
    still equals resident training bit for bit (no copy overwrote a block its kernels still read)."""
    layout = _layout(rows=2000)
    label_map = LabelMap.fit("binary", layout.labels)
    plan = Plan(chunk_size=8, batch_size=16, deterministic=True)
    streamed = StreamedLayout.from_layout(layout, plan.chunks_per_batch, 4 * 4000, "cuda", ids="narrow")
    assert len(streamed.blocks) > 20
    resident_layout = layout.to("cuda")
    labels = label_map.model_labels(resident_layout.labels)
    resident = Executor(ZOO["fm"](), plan, backend="triton", device="cuda", seed=4, optimizer="adagrad")
    stream = Executor(ZOO["fm"](), plan, backend="triton", device="cuda", seed=4, optimizer="adagrad")

    def slow_labels(block):
        torch.cuda._sleep(2_000_000)            # ~1 ms of GPU time before the block's kernels
        return label_map.model_labels(block.labels)

    streamed.copy_events, kernels = [], []
    for epoch in range(2):
        resident.train_epoch(resident_layout, labels, epoch, 0.3, streamed.epoch_order(epoch, 4))
        stream.train_streamed_epoch(streamed, slow_labels, epoch, 0.3, kernel_events=kernels)
    torch.cuda.synchronize()
    # copies start in visiting order, across epochs
    assert [index for index, _, _ in streamed.copy_events[:len(kernels)]] == [index for index, _, _ in kernels]
    on_device = streamed.read_ahead + 2
    for n in range(on_device, len(kernels)):
        assert kernels[n - on_device][2].elapsed_time(streamed.copy_events[n][1]) >= 0, n
    for name, values in resident.state.params.items():
        assert torch.equal(stream.state.params[name], values), name
    streamed.close()
