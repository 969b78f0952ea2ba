"""FAE's hot and cold tables: pure hot and cold batches trained on two tables kept consistent give the
parameters of one table training the same batches (the all-GPU run), and the shuffle schedule."""

import pytest
import torch

from alac.data.synthetic import criteo_like
from alac.plan import Plan
from alac.runtime.execution.executor import Executor, LabelMap
from alac.runtime.execution.schedule import batch_scales
from alac.runtime.movement.layout import LayoutOptions, build_layout
from alac.runtime.rows.fae import FaeTables, ShuffleScheduler, fae_data, swap_segments
from alac.runtime.rows.profiler import access_counts, classify_inputs
from tests.runtime.movement.test_streams import DEVICE, KERNELS
from tests.zoo_models import ZOO

OPTIONS = LayoutOptions(chunk_size=8)


def _batches(layout, plan):
    return -(-layout.n_chunks // plan.chunks_per_batch)


@pytest.mark.parametrize(("model", "backend", "dirty_only"), [("lr", "reference", True), ("fm", "reference", True),
                                                              ("fm", "reference", False), ("fm", KERNELS, True)])
def test_fae_tables_train_as_one_table_does_on_the_same_batches(model, backend, dirty_only):
    """Pure hot and cold batches in a fixed order, on FAE's two tables (the cold one's params and
    AdaGrad state in host memory, reached through mapped pointers on a GPU) and on one table; swaps
    copy the hot rows changed since the last one, or every hot row."""
    device = DEVICE if backend == "triton" else "cpu"
    # the interpreter launches every batch's kernels slowly: fewer rows and one epoch there
    rows, epochs = (3000, 2) if backend != "interpret" else (800, 1)
    data = criteo_like(rows, n_fields=5, seed=4, device="cpu")
    counts = access_counts(data.indices, data.n_features)
    hot = counts >= 2
    split = fae_data(data, hot, OPTIONS, device)
    assert 0.1 < split.hot_input_share < 0.9 and split.hot.n_features == int(hot.sum())
    labels = LabelMap.fit("binary", data.labels)
    # the kernels in their deterministic mode: float atomics would add in a different order per run
    plan = Plan(chunk_size=8, batch_size=32, deterministic=backend != "reference")
    in_host = Plan(chunk_size=8, batch_size=32, deterministic=backend != "reference",
                   placement=tuple((name, "host") for name in ("w", "v") if model == "fm" or name == "w"))

    def executor(placed=plan):
        return Executor(ZOO[model](), placed, backend=backend, device=device, seed=1, optimizer="adagrad")

    tables = FaeTables(executor(in_host), executor(), split.hot_ids, dirty_only=dirty_only)
    tables.initialize(split.cold, 1.0)
    # the all-GPU run: one table of every row, the hot inputs laid out in global ids (the same chunks)
    one = executor()
    one.initialize(split.cold, 1.0)
    hot_rows, _ = classify_inputs(data, hot)
    hot_global = build_layout(data.take(hot_rows), OPTIONS, device, feature_order=torch.arange(data.n_features))
    layouts = {"cold": (split.cold, split.cold), "hot": (split.hot, hot_global)}
    for epoch in range(epochs):
        orders = {kind: pair[0].chunk_order(epoch, 1) for kind, pair in layouts.items()}
        segments = tables.train_epoch(split, lambda layout: labels.model_labels(layout.labels), epoch, 1, 0.3,
                                      ShuffleScheduler(0.3))
        assert segments == swap_segments(_batches(split.cold, plan), _batches(split.hot, plan), 0.3)
        assert segments[0][0] == "cold" and len(segments) > 4
        # the one table: the same batches, each kind's in its own order, batch after batch
        for kind, first, count in segments:
            _, global_layout = layouts[kind]
            per_batch = plan.chunks_per_batch
            one_labels = labels.model_labels(global_layout.labels)
            scales = batch_scales(global_layout, orders[kind], per_batch).tolist()
            for batch in range(first, first + count):
                offset = batch * per_batch
                one.train_batch(global_layout, one_labels, orders[kind], offset,
                                min(per_batch, global_layout.n_chunks - offset), 0.3, scales[batch])
    state = tables.current_state()
    swaps = sum(a[0] != b[0] for a, b in zip(segments, segments[1:])) * epochs + 1
    if dirty_only:
        assert 0 < tables.rows_copied < swaps * split.hot_ids.numel()
    else:
        assert tables.rows_copied >= (swaps - 1) * split.hot_ids.numel()
    for part in ("params", "states", "globals"):
        for name, values in getattr(one.state, part).items():
            torch.testing.assert_close(getattr(state, part)[name].cpu(), values.cpu(), rtol=1e-5, atol=1e-7)


def test_segments_cover_an_epoch_cold_first_at_the_rate():
    assert swap_segments(10, 4, 1.0) == [("cold", 0, 10), ("hot", 0, 4)]
    assert swap_segments(10, 4, 0.5) == [("cold", 0, 5), ("hot", 0, 2), ("cold", 5, 5), ("hot", 2, 2)]
    assert swap_segments(3, 0, 0.01) == [("cold", 0, 1), ("cold", 1, 1), ("cold", 2, 1)]
    segments = swap_segments(7, 3, 0.01)
    assert [kind for kind, _, _ in segments[:6]] == ["cold", "hot"] * 3 and len(segments) == 10


def test_the_rate_halves_on_a_worse_loss_and_doubles_after_four_better():
    scheduler = ShuffleScheduler()
    assert scheduler.after_swap(0.60) == 0.5
    assert scheduler.after_swap(0.61) == 0.25                      # worse: halved (FAE's min/max erratum)
    rates = [scheduler.after_swap(loss) for loss in (0.59, 0.58, 0.57, 0.56)]
    assert rates == [0.25, 0.25, 0.25, 0.5]                       # doubled after 4 better in a row
    for _ in range(12):
        scheduler.after_swap(1.0)
    assert scheduler.rate == 0.01                                 # R(1) at least


def test_an_fae_run_steered_by_validation_learns_what_mixed_batches_learn():
    """Three epochs of FAE with the dynamic rate (validation loss after every swap) against three
    epochs of the same model on mixed batches: validation logloss within 0.01; a worse validation
    loss after a swap halves the rate, so later epochs swap more often."""
    from alac import metrics

    data = criteo_like(5000, n_fields=5, seed=2, device="cpu")
    train, valid = data.take(torch.arange(4000)), data.take(torch.arange(4000, 5000))
    hot = access_counts(train.indices, train.n_features) >= 2
    split = fae_data(train, hot, OPTIONS, "cpu")
    labels = LabelMap.fit("binary", train.labels)
    plan = Plan(chunk_size=8, batch_size=64)
    identity = torch.arange(train.n_features)
    valid_layout = build_layout(valid, OPTIONS, "cpu", feature_order=identity)

    def executor():
        return Executor(ZOO["lr"](), plan, backend="reference", device="cpu", seed=3, optimizer="adagrad")

    def logloss(model):
        return float(metrics.logloss(model.predict(valid_layout), valid.labels > 0.5))

    tables = FaeTables(executor(), executor(), split.hot_ids)
    tables.initialize(split.cold, 1.0)
    scheduler = ShuffleScheduler()
    counts = []
    for epoch in range(3):
        segments = tables.train_epoch(split, lambda layout: labels.model_labels(layout.labels), epoch, 3, 0.3,
                                      scheduler, validate=lambda: logloss(tables.whole()))
        counts.append(len(segments))
    mixed = executor()
    whole = build_layout(train, OPTIONS, "cpu", feature_order=identity)
    for epoch in range(3):
        mixed.train_epoch(whole, labels.model_labels(whole.labels), epoch, 0.3)
    assert logloss(tables.whole()) == pytest.approx(logloss(mixed), abs=0.01)
    assert counts[0] >= 3 and scheduler.rate < 0.5 and counts[-1] > counts[0]
