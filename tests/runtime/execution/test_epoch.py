"""The one epoch runner (alac.runtime.execution.epoch): a store's segments, launched in turn, train what
one segment of the whole epoch trains; the store's code around its yields runs between launches."""

import pytest
import torch

from alac.data.synthetic import criteo_like
from alac.plan import Plan
from alac.runtime.execution import epoch as runner
from alac.runtime.execution.epoch import Segment
from alac.runtime.execution.executor import Executor, LabelMap
from alac.runtime.movement.layout import LayoutOptions, build_layout
from tests.zoo_models import ZOO

PLAN = Plan(chunk_size=8, batch_size=32)


def _problem():
    data = criteo_like(600, n_fields=4, seed=5, device="cpu")
    layout = build_layout(data, LayoutOptions(chunk_size=PLAN.chunk_size), "cpu")
    return layout, LabelMap.fit("binary", data.labels).model_labels(layout.labels)


def _executor(layout):
    executor = Executor(ZOO["fm"](), PLAN, backend="reference", device="cpu", seed=2, optimizer="adagrad")
    executor.initialize(layout)
    return executor


class _Split:
    """A store of one executor's rows whose epoch is runs of `batches` batches, each either an epoch of
    its own chunks or a run of the loaded epoch; it logs its moves around the launches."""

    def __init__(self, executor, batches, loaded):
        self.executor, self.batches, self.loaded, self.log = executor, batches, loaded, []

    def segments(self, layout, labels, epoch, lr, order=None):
        order = layout.chunk_order(epoch, self.executor.seed)
        per_batch = self.executor.plan.chunks_per_batch
        total = -(-order.numel() // per_batch)
        loss = torch.zeros(1)
        if self.loaded:
            self.executor.load_epoch(layout, labels, epoch, lr, order)
        for first in range(0, total, self.batches):
            end = min(first + self.batches, total)
            self.log.append(("before", first))
            chunks = None if self.loaded else order[first * per_batch:end * per_batch]
            yield Segment(self.executor, layout, labels, epoch, lr, chunks=chunks, first=first, end=end)
            self.log.append(("after", first))
            if not self.loaded:
                loss += self.executor.loss_sum
        return self.executor.loss_sum if self.loaded else loss


@pytest.mark.parametrize("loaded", [False, True])
def test_an_epoch_in_segments_trains_what_one_segment_trains(loaded):
    layout, labels = _problem()
    whole, split = _executor(layout), _Split(_executor(layout), 3, loaded)
    for epoch in range(2):
        expected = runner.train_epoch(whole, layout, labels, epoch, 0.2)
        got = runner.train_epoch(split, layout, labels, epoch, 0.2)
        assert got == pytest.approx(expected, rel=1e-5)
    for name, values in whole.state.params.items():
        torch.testing.assert_close(split.executor.state.params[name], values, rtol=1e-5, atol=1e-7)
    assert split.executor.batches_done == whole.batches_done
    firsts = [first for moment, first in split.log if moment == "before"]
    assert len(firsts) > 2 and split.log[:4] == [("before", 0), ("after", 0), ("before", 3), ("after", 3)]


def test_a_failed_launch_closes_the_store_s_epoch():
    """The store's context around its yields (a cache's streams) is left when a launch fails."""
    layout, labels = _problem()
    closed = []

    class Store:
        def segments(self, layout, labels, epoch, lr, order=None):
            try:
                yield Segment(None, layout, labels, epoch, lr, chunks=torch.arange(2))
            finally:
                closed.append(epoch)

    with pytest.raises(AttributeError):
        runner.queue_epoch(Store(), layout, labels, 4, 0.1)
    assert closed == [4]


def test_train_epochs_reads_each_epoch_s_loss_once_at_the_end():
    layout, labels = _problem()
    queued, one_by_one = _executor(layout), _executor(layout)
    losses = runner.train_epochs(queued, layout, labels, 0, 3, 0.2)
    assert losses == pytest.approx([runner.train_epoch(one_by_one, layout, labels, e, 0.2) for e in range(3)])
    assert runner.train_epochs(queued, layout, labels, 3, 0, 0.2) == []
