"""The executor's epoch loop: every epoch, one at a time or queued, runs its own chunk order."""

import torch

from alac.plan import Plan
from alac.runtime.execution.executor import Executor, LabelMap
from alac.runtime.movement.layout import LayoutOptions, build_layout
from tests.codegen.test_kernels import awkward_dataset
from tests.zoo_models import ZOO


def test_every_epoch_runs_its_own_chunk_order():
    """Epochs in order, an epoch repeated, a skipped one and a second layout in between, one at a
    time or queued: each runs exactly layout.chunk_order(epoch, seed)."""
    layouts = [build_layout(awkward_dataset(seed, n_rows=80), LayoutOptions(chunk_size=8), device="cpu")
               for seed in (1, 2)]
    labels = [LabelMap.fit("binary", layout.labels).model_labels(layout.labels) for layout in layouts]
    executor = Executor(ZOO["lr"](), Plan(chunk_size=8, batch_size=16), backend="reference", device="cpu", seed=5)
    used = []
    run_epochs = executor._reference_epoch

    def spy(layout, labels, order, rates, scales):
        used.append(order.clone())
        return run_epochs(layout, labels, order, rates, scales)

    executor._reference_epoch = spy
    schedule = [(0, 0), (0, 1), (0, 1), (0, 3), (1, 4), (0, 4), (0, 5)]
    for which, epoch in schedule:
        executor.train_epoch(layouts[which], labels[which], epoch, 0.1)
    # queued epochs; then one at a time again, on the other layout
    for first, count in ((6, 3), (9, 1), (10, 2)):
        executor.train_epochs(layouts[0], labels[0], first, count, 0.1)
    executor.train_epoch(layouts[1], labels[1], 12, 0.1)
    executor.train_epoch(layouts[0], labels[0], 12, 0.1)
    schedule += [(0, epoch) for epoch in range(6, 12)] + [(1, 12), (0, 12)]
    assert len(used) == len(schedule)
    for order, (which, epoch) in zip(used, schedule):
        assert torch.equal(order, layouts[which].chunk_order(epoch, 5))
    # the orders differ between epochs, so the check above can tell them apart
    assert not torch.equal(layouts[0].chunk_order(0, 5), layouts[0].chunk_order(1, 5))


def test_queued_epochs_equal_epochs_one_at_a_time():
    """train_epochs(count) is count train_epoch calls: the same losses and the same parameters."""
    layout = build_layout(awkward_dataset(3, n_rows=80), LayoutOptions(chunk_size=8), device="cpu")
    labels = LabelMap.fit("binary", layout.labels).model_labels(layout.labels)
    one_by_one = Executor(ZOO["fm"](), Plan(chunk_size=8, batch_size=16), backend="reference", device="cpu", seed=2)
    queued = Executor(ZOO["fm"](), Plan(chunk_size=8, batch_size=16), backend="reference", device="cpu", seed=2)
    losses = [one_by_one.train_epoch(layout, labels, epoch, 0.1) for epoch in range(2, 5)]
    assert queued.train_epochs(layout, labels, 2, 3, 0.1) == losses
    assert len(set(losses)) == 3
    for name in one_by_one.state.params:
        assert torch.equal(queued.state.params[name], one_by_one.state.params[name])
    assert queued.batches_done == one_by_one.batches_done
