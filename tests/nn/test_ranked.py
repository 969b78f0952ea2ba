"""Tables over ranks (alac.nn.ranked) against one process: a DeepFM trained on the same global batches
by two gloo ranks (each given half of every batch, the model under DDP, its tables replicated, sharded
or hybrid) ends with the tables and MLP of one process trained on the whole batches, to float
tolerance; and a rank's rows are the ones RankRows names."""

import pytest
import torch

from alac.errors import OptionError
from alac.nn.deep_models import DeepFM
from alac.nn.ranked import RankRows
from alac.nn.table_rows import TableRows
from alac.runtime.ranks.distributed import Ranks

N_FEATURES, N_FIELDS, K, ROWS, STEPS = 60, 3, 4, 16, 3
REPLICATED = {"replicated": None, "sharded": 0, "hybrid": 20}
# hybrid's ranks number the ids anew, the hot ones first (here a shuffle: any order trains alike)
ORDER = {"hybrid": torch.randperm(N_FEATURES, generator=torch.Generator().manual_seed(3))}


def _batch(step, first=0, end=ROWS):
    """Rows first..end of global batch `step` (CSR indices, offsets, fields; labels)."""
    generator = torch.Generator().manual_seed(step)
    counts = torch.randint(1, 3, (ROWS, N_FIELDS), generator=generator)
    fields = torch.repeat_interleave(torch.arange(N_FIELDS).repeat(ROWS), counts.flatten())
    indices = fields * 20 + torch.randint(0, 20, (fields.numel(),), generator=generator)
    offsets = torch.cat([torch.zeros(1, dtype=torch.int64), counts.sum(1).cumsum(0)])
    labels = (torch.rand(ROWS, generator=generator) < 0.5).float()
    a, b = int(offsets[first]), int(offsets[end])
    return indices[a:b], offsets[first:end + 1] - a, fields[a:b], labels[first:end]


def _model(**placement):
    torch.manual_seed(1)
    return DeepFM(N_FEATURES, N_FIELDS, k=K, hidden=(8,), optimizer="adagrad", lr=0.2, device="cpu",
                  rows=TableRows(**placement))


def _train(model, forward, rows):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(STEPS):
        indices, offsets, fields, labels = _batch(step, *rows)
        optimizer.zero_grad()
        torch.nn.functional.binary_cross_entropy_with_logits(forward(indices, offsets, fields), labels).backward()
        optimizer.step()


def _rank(rank, folder):
    """One of two gloo ranks: a model of every mode trained on its half of each batch, saved."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    dist.init_process_group("gloo", init_method=f"file://{folder}/rendezvous", rank=rank, world_size=2)
    try:
        for mode, replicated in REPLICATED.items():
            ranks = Ranks(rank, 2, torch.device("cpu"), "gloo")
            model = _model(ranks=ranks, replicated=replicated, order=ORDER.get(mode))
            if mode == "sharded":
                # the trainer's way: the exchanges' slots and the global batch given, no count summed
                model.tables.entry_capacity, model.tables.global_samples = ROWS // 2 * 2 * N_FIELDS, ROWS
            half = ROWS // 2
            _train(model, DistributedDataParallel(model, broadcast_buffers=False), (rank * half, (rank + 1) * half))
            # what the tables' collectives moved (DDP's own all-reduce does not pass through Ranks)
            sent = (ranks.traffic.bytes, model.tables.bytes_per_step())
            model.tables.align()
            torch.save({"tables": model.tables.whole_state(), "deep": [p.detach() for p in model.parameters()],
                        "held": {name: model.tables.held(name).clone() for name in ("w", "v")}, "sent": sent},
                       f"{folder}/{mode}{rank}.pt")
        # exchanges too small for the batch: the entries that do not fit are not sent, and the check says so
        model = _model(ranks=Ranks(rank, 2, torch.device("cpu"), "gloo"), replicated=20)
        model.tables.entry_capacity = 2
        _train(model, DistributedDataParallel(model, broadcast_buffers=False), (rank * 8, rank * 8 + 8))
        try:
            model.tables.check_exchanges()
            refused = ""
        except OptionError as error:
            refused = str(error)
        torch.save(refused, f"{folder}/refused{rank}.pt")
    finally:
        dist.destroy_process_group()


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    folder = tmp_path_factory.mktemp("ranks")
    torch.multiprocessing.spawn(_rank, args=(str(folder),), nprocs=2)
    return folder


@pytest.mark.parametrize("mode", sorted(REPLICATED))
def test_two_ranks_train_as_one_process_on_the_whole_batches(mode, trained):
    one = _model()
    _train(one, one, (0, ROWS))
    for rank in (0, 1):
        saved = torch.load(trained / f"{mode}{rank}.pt")
        for name, value in saved["tables"].items():
            torch.testing.assert_close(value, getattr(one.tables, name), rtol=1e-5, atol=1e-6)
        for mine, theirs in zip(saved["deep"], one.parameters()):
            torch.testing.assert_close(mine, theirs, rtol=1e-5, atol=1e-6)
        # the rank held only its rows: the replicated ones and its round-robin share
        held = RankRows(N_FEATURES, N_FEATURES if REPLICATED[mode] is None else REPLICATED[mode], rank, 2).held_ids()
        if mode in ORDER:
            held = ORDER[mode][held]
        torch.testing.assert_close(saved["held"]["v"], one.tables.v[held], rtol=1e-5, atol=1e-6)
    assert not torch.equal(one.tables.v, _model().tables.v)      # the steps changed the tables


def test_bytes_per_step_are_what_a_steps_exchanges_send(trained):
    """RankedAggregate.bytes_per_step (from step_exchanges) against the bytes the ranks' collectives
    counted over the sharded run's steps, where nothing else passes through them."""
    for rank in (0, 1):
        moved, per_step = torch.load(trained / f"sharded{rank}.pt")["sent"]
        assert per_step > 0 and moved == STEPS * per_step


def test_exchanges_smaller_than_a_batch_are_refused(trained):
    for rank in (0, 1):
        assert "more than the 2 entries of entry_capacity" in torch.load(trained / f"refused{rank}.pt")


def test_rank_rows_split_the_ids_once():
    rows = [RankRows(10, 3, rank, 3) for rank in range(3)]
    assert [r.owned_ids().tolist() for r in rows] == [[3, 6, 9], [4, 7], [5, 8]]
    ids = torch.arange(10)
    for r in rows:
        mine = r.owner(r.owned_ids()) == r.rank
        assert mine.all() and torch.equal(r.local(r.held_ids()), torch.arange(r.held_ids().numel()))
    assert rows[0].mode == "hybrid" and RankRows(10, 0, 0, 2).mode == "sharded" and RankRows(10, 10, 0, 2).mode == \
        "replicated"
    assert torch.equal(rows[1].owner(ids[3:]), torch.tensor([0, 1, 2, 0, 1, 2, 0]))
