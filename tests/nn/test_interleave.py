"""alac.nn.interleave: a step in micro-batches (D), with lookups on a side stream (K), trains as the whole
batch's step does (the same tables and MLP gradients as one forward and backward of every row, which
tests/nn/test_aggregate.py checks against hand-written PyTorch); Eq. 2's arithmetic; deferred's guards."""

import copy
import functools

import pytest
import torch

from alac.errors import OptionError
from alac.nn import KeyedBags, PackedEmbeddingBags, Table
from alac.nn.deep_models import mlp
from alac.nn.interleave import (
    Interleaving,
    interleaved_step,
    memory_per_row,
    micro_batch_rows,
    micro_batches_for,
    pack_groups,
    split_rows,
)

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
TABLES = [Table(f"f{i}", rows=30 + i, dim=(4, 8)[i % 2], lr=0.2) for i in range(6)]


def _model(interleave_packs=None):
    torch.manual_seed(0)
    tables = PackedEmbeddingBags(TABLES, seed=3, device=DEVICE, interleave_packs=interleave_packs)
    return tables, mlp([sum(t.dim for t in TABLES), 16, 1]).to(DEVICE)


def _batch(rows=96):
    generator = torch.Generator().manual_seed(5)
    ids = torch.stack([torch.randint(0, t.rows, (rows,), generator=generator) for t in TABLES], 1)
    return ids.to(DEVICE), (torch.rand(rows, generator=generator) < 0.4).float().to(DEVICE)


@functools.cache
def _columns(keys, device):
    """The ids' columns in the packs' key order, made once (before any graph's capture, which copies
    nothing from the host)."""
    return torch.tensor([int(k[1:]) for k in keys], device=device)


def _logit(tables, deep, ids):
    pooled = tables(KeyedBags.one_hot(tables.keys, ids[:, _columns(tables.keys, ids.device)]))
    return deep(torch.cat([pooled[t.name] for t in TABLES], 1)).squeeze(1)


def _whole_batch_step(ids, labels):
    tables, deep = _model()
    loss = torch.nn.functional.binary_cross_entropy_with_logits(_logit(tables, deep, ids), labels)
    loss.backward()
    return tables, deep, loss.detach()


@pytest.mark.parametrize("interleaving", [Interleaving(1), Interleaving(4), Interleaving(3, side_stream=True)])
def test_a_step_in_micro_batches_trains_as_the_whole_batch(interleaving):
    ids, labels = _batch()
    expected_tables, expected_deep, expected_loss = _whole_batch_step(ids, labels)
    tables, deep = _model()
    parts = split_rows(ids.shape[0], interleaving.micro_batches)

    def sparse(part):
        first, end = part
        keyed = ids[first:end][:, [int(k[1:]) for k in tables.keys]]
        return tables(KeyedBags.one_hot(tables.keys, keyed))

    def dense(pooled, part):
        first, end = part
        logit = deep(torch.cat([pooled[t.name] for t in TABLES], 1)).squeeze(1)
        share = (end - first) / ids.shape[0]
        return share * torch.nn.functional.binary_cross_entropy_with_logits(logit, labels[first:end])

    loss = interleaved_step(tables, parts, sparse, dense, interleaving)
    torch.testing.assert_close(loss, expected_loss, rtol=1e-5, atol=1e-6)
    for ours, theirs in zip(tables.packs, expected_tables.packs):
        torch.testing.assert_close(ours.v, theirs.v, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(ours.v_accumulator, theirs.v_accumulator, rtol=1e-5, atol=1e-7)
    for ours, theirs in zip(deep.parameters(), expected_deep.parameters()):
        torch.testing.assert_close(ours.grad, theirs.grad, rtol=1e-5, atol=1e-6)


def test_deferred_steps_nothing_on_an_error_and_does_not_nest():
    tables, deep = _model()
    before = copy.deepcopy(tables.state_dict())
    ids, labels = _batch(8)
    with pytest.raises(RuntimeError, match="stop"):
        with tables.deferred():
            _logit(tables, deep, ids).sum().backward()
            raise RuntimeError("stop")
    for name, value in tables.state_dict().items():
        assert torch.equal(value, before[name])
    with pytest.raises(OptionError, match="already active"):
        with tables.packs[0].deferred(), tables.packs[0].deferred():
            pass


def test_picassos_eq_2_sizes_the_micro_batches_by_the_tightest_resource():
    assert micro_batch_rows(1000, 3) == 333 and micro_batch_rows(2, 3) == 1
    # memory allows 250 rows, a second resource 400: 1000 rows need 4 micro-batches
    assert micro_batches_for(1000, [(10_000, 40), (4000, 10)]) == 4
    assert split_rows(10, 3) == [(0, 3), (3, 7), (7, 10)] and split_rows(2, 5) == [(0, 1), (1, 2)]
    with pytest.raises(OptionError):
        Interleaving(0)
    with pytest.raises(OptionError):
        micro_batch_rows(10, 0)
    if not torch.cuda.is_available():
        assert memory_per_row(lambda: None, 10) is None        # no device memory to bound


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_a_steps_memory_per_row_sizes_its_micro_batches():
    """A step holding a [rows, 1024] float32 activation adds at least 4 KiB a row: a budget of 100
    rows' worth splits 1,000 rows into at least 10 micro-batches."""
    def step(rows=256):
        hidden = torch.ones((rows, 1024), device="cuda", requires_grad=True)
        (hidden * 2).sum().backward()

    cost = memory_per_row(step, 256)
    assert cost >= 4096
    assert micro_batches_for(1000, [(100 * cost, cost)]) == 10



def test_picassos_eq_3_groups_consecutive_packs_within_the_capacity():
    assert pack_groups([3, 4, 2, 9, 1, 1], 9) == [[0, 1, 2], [3], [4, 5]]
    # an op over the capacity is a group alone; nothing is left out or reordered
    assert pack_groups([20, 1, 30], 10) == [[0], [1], [2]]
    assert pack_groups([], 5) == []


def _graphed_steps(interleave, ids, labels, steps=4):
    """The tables after `steps` GraphedSteps (two warm-up steps, the capture's, replays) and the losses."""
    from alac.nn import GraphedStep, whole_step

    tables, deep = _model(interleave)
    tables.check_batches = False        # a graph's step reads nothing on the host
    adam = torch.optim.Adam(deep.parameters(), lr=1e-3, capturable=True)
    step = GraphedStep(whole_step(lambda ids, labels: torch.nn.functional.binary_cross_entropy_with_logits(
        _logit(tables, deep, ids), labels), [adam]))
    losses = torch.stack([step(ids, labels).clone() for _ in range(steps)])     # a replay's output is the graph's
    torch.cuda.synchronize()
    assert step.graphs
    return tables, losses


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_packs_interleaved_on_streams_train_as_packs_in_turn_eagerly_and_from_a_cuda_graph():
    """The two packs (dims 4 and 8) of a small batch fill far less than a wave: Eq. 3 puts them in one
    group, each pack on a stream of its own; the outputs and steps are those of the packs in turn, and
    the streams' work joins the step's stream so that the step replays from a CUDA graph. By default
    (None) only a graph's capture interleaves them."""
    ids, labels = _batch()
    eager = {}
    for interleave in (True, False, None):
        tables, deep = _model(interleave)
        loss = torch.nn.functional.binary_cross_entropy_with_logits(_logit(tables, deep, ids), labels)
        loss.backward()
        torch.cuda.synchronize()
        eager[interleave] = (tables, loss.detach())
    assert eager[True][0].last_groups == [[0, 1]]
    assert eager[False][0].last_groups == eager[None][0].last_groups == [[0], [1]]
    torch.testing.assert_close(eager[True][1], eager[False][1])
    for ours, theirs in zip(eager[True][0].packs, eager[False][0].packs):
        torch.testing.assert_close(ours.v, theirs.v)
    (side, side_losses), (turn, turn_losses) = _graphed_steps(None, ids, labels), _graphed_steps(False, ids, labels)
    assert side.last_groups == [[0, 1]] and turn.last_groups == [[0], [1]]       # as captured
    torch.testing.assert_close(side_losses, turn_losses)
    for ours, theirs in zip(side.packs, turn.packs):
        torch.testing.assert_close(ours.v, theirs.v)
