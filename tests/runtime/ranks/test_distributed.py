"""Ranks over a sub-group: three gloo ranks on the CPU, the first two reducing among themselves while
the third takes no part, the first alone as one rank; an integer's extremes over the ranks; the plan
the ranks agree on."""


import pytest
import torch

from alac.errors import OptionError
from alac.plan import Plan
from alac.runtime.ranks.distributed import Ranks, first_ranks, init_ranks
from tests.two_ranks import gloo_group, spawned


def _run_rank(rank, world, store, out):
    with gloo_group(rank, world, store):
        ranks = init_ranks()
        pair, alone, every = first_ranks(ranks, 2), first_ranks(ranks, 1), first_ranks(ranks, 3)
        found = {"pair": None if pair is None else (pair.rank, pair.world),
                 "alone": None if alone is None else alone.world, "every": every is ranks}
        if pair is not None:
            found["pair_sum"] = float(pair.all_reduce(torch.tensor([rank + 1.0]))[0])
        if alone is not None:
            found["alone_sum"] = float(alone.all_reduce(torch.tensor([rank + 1.0]))[0])
        found["every_sum"] = float(ranks.all_reduce(torch.tensor([rank + 1.0]))[0])
        found["extremes"] = ranks.extremes(10 * rank - 7)
        found["agreed"] = ranks.agreed_plan(Plan(semantics="async", hot_size=[677, 678, 657][rank]))
        try:
            ranks.agreed_plan(Plan(batch_size=1024 if rank else 512))
        except OptionError as error:
            found["disagreed"] = str(error)
        torch.save(found, f"{out}/{rank}.pt")


def test_the_first_ranks_reduce_among_themselves(tmp_path):
    first, second, third = spawned(_run_rank, tmp_path, world=3)
    assert first["pair"] == (0, 2) and second["pair"] == (1, 2) and third["pair"] is None
    assert first["pair_sum"] == second["pair_sum"] == 3.0 and "pair_sum" not in third
    assert first["alone"] == 1 and first["alone_sum"] == 1.0 and second["alone"] is None and third["alone"] is None
    assert all(rank["every"] and rank["every_sum"] == 6.0 for rank in (first, second, third))
    # the smallest and largest of an integer over the ranks, every rank told both
    assert all(rank["extremes"] == (-7, 13) for rank in (first, second, third))
    # hot sizes each rank chose from its own rows: the smallest, the rest of the plan untouched
    assert all(rank["agreed"] == Plan(semantics="async", hot_size=657) for rank in (first, second, third))
    # any other difference: refused on every rank
    assert all("the ranks were given different plans" in rank["disagreed"] for rank in (first, second, third))


def test_more_ranks_than_there_are_is_refused():
    with pytest.raises(OptionError, match="the first 2 ranks of 1: between 1 and 1"):
        first_ranks(Ranks(), 2)


def test_one_rank_computes_on_the_current_gpu_where_there_is_one(monkeypatch):
    # torchrun's one process (WORLD_SIZE 1) on a GPU machine: its ranks' device is that GPU, not the CPU
    monkeypatch.setenv("WORLD_SIZE", "1")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 3)
    assert init_ranks().device == torch.device("cuda", 3)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert init_ranks().device == torch.device("cpu")
