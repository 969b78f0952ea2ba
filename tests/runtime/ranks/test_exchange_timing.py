"""A step's exchanges timed over two gloo ranks: one number on both, the probe's bytes left out of the
run's traffic; and the rank-table planner weighing the modes by it, to one choice on both ranks."""

import torch

from alac.nn.ranked import ExchangeShape, step_exchanges
from alac.runtime.ranks.distributed import init_ranks
from alac.runtime.ranks.exchange_timing import exchange_seconds
from alac.train.deep_ranks import plan_rank_tables
from tests.two_ranks import gloo_group, spawned


def _run_rank(rank, world, store, out):
    with gloo_group(rank, world, store):
        ranks = init_ranks()
        shape = ExchangeShape(17, torch.float32, 35)
        small = exchange_seconds(ranks, step_exchanges(shape, world, 64, 0))
        large = exchange_seconds(ranks, step_exchanges(shape, world, 0, 200_000))
        counted = (ranks.traffic.bytes, ranks.traffic.collectives)
        counts = torch.tensor([5, 0, 9, 6] * 50)
        tables = plan_rank_tables("auto", counts, 8, 2, ranks, "cpu", budget=10_000, shape=shape)
        torch.save({"small": small, "large": large, "counted": counted, "reason": tables.describe()},
                   f"{out}/{rank}.pt")


def test_exchanges_are_timed_alike_on_every_rank_and_the_planner_chooses_by_them(tmp_path):
    first, second = spawned(_run_rank, tmp_path)
    assert first["small"] == second["small"] > 0 and first["large"] == second["large"]
    # 200,000 slots of 17 + 35 floats and two ids each way take longer than 64 slots gathered
    assert first["large"] > first["small"]
    assert first["counted"] == (0, 0)
    assert first["reason"] == second["reason"]
    assert "a step's exchanges, measured: replicated " in first["reason"] and ", sharded " in first["reason"]
