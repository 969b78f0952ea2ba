"""Where a field model's table rows live over ranks (alac.train.deep_ranks): the planner's choice and
its reason, the hybrid's hot rows and order, a rank's share of a batch, and predictions put back in
the rows' order."""

import pytest
import torch

from alac.errors import OptionError
from alac.nn.ranked import ExchangeShape
from alac.runtime.ranks.distributed import Ranks
from alac.train import deep_ranks
from alac.train.deep_ranks import plan_rank_tables, share, whole_predictions

TWO = Ranks(0, 2, torch.device("cpu"), "gloo")


def test_auto_replicates_rows_that_fit_a_quarter_of_the_free_memory_and_shards_the_others(monkeypatch):
    counts = torch.tensor([5, 0, 9, 1])
    monkeypatch.setattr(deep_ranks, "available_bytes", lambda device: 4 * 100 * 4)
    fits = plan_rank_tables("auto", counts, 100, 3, TWO, "cpu")
    assert (fits.mode, fits.replicated, fits.order) == ("replicated", 4, None)
    assert "400 bytes of rows fit 25% of a rank's free memory (1,600 bytes)" in fits.describe()
    over = plan_rank_tables("auto", counts, 101, 3, TWO, "cpu")
    assert (over.mode, over.replicated) == ("sharded", 0) and "exceed" in over.reason
    alone = plan_rank_tables("auto", counts, 201, 3, TWO, "cpu")
    assert alone.mode == "sharded" and "so does a rank's shard (402 bytes)" in alone.reason


SHAPE = ExchangeShape(17, torch.float32, 35)


def _timed(seconds_of):
    """A measure that times each mode's exchanges as `seconds_of` says, by their collectives, and
    records what it was asked to time."""
    asked = []

    def measure(ranks, exchanges):
        asked.append(exchanges)
        kinds = {kind for kind, _, _ in exchanges}
        return seconds_of["hybrid" if kinds == {"all_gather", "all_to_all"} else
                          "replicated" if kinds == {"all_gather"} else "sharded"]
    return measure, asked


def test_auto_takes_another_mode_only_where_its_measured_exchanges_take_under_half_the_first_ones():
    # 10 entries a batch on 4 rows over 2 batches: 5 a rank a step; rows 2 and 0 are hot
    counts = torch.tensor([5, 0, 9, 6])
    close, asked = _timed({"replicated": 1e-3, "sharded": 0.6e-3, "hybrid": 0.9e-3})
    tables = plan_rank_tables("auto", counts, 8, 2, TWO, "cpu", budget=1000, shape=SHAPE, measure=close)
    assert tables.mode == "replicated"
    assert "measured: replicated 1 ms, sharded 0.6 ms, hybrid 0.9 ms" in tables.reason
    entries = 20 // (2 * 2)
    assert asked[0] == [("all_gather", (entries,), torch.int64), ("all_gather", (entries, 35), torch.float32)]
    assert asked[1][1] == ("all_to_all", (2 * 3, 17), torch.float32)       # ceil(5 / 2) per owner
    far, _ = _timed({"replicated": 1e-3, "sharded": 0.4e-3, "hybrid": 0.3e-3})
    tables = plan_rank_tables("auto", counts, 8, 2, TWO, "cpu", budget=1000, shape=SHAPE, measure=far)
    assert (tables.mode, tables.replicated, tables.order.tolist()[:3]) == ("hybrid", 3, [2, 3, 0])
    # rows that fit only sharded: nothing to weigh, nothing measured
    alone, asked = _timed({"replicated": 1.0, "sharded": 1.0, "hybrid": 1.0})
    assert plan_rank_tables("auto", counts, 8, 2, TWO, "cpu", budget=16, shape=SHAPE, measure=alone).mode == "sharded"
    assert asked == []


def test_hybrid_replicates_the_rows_read_about_once_a_batch_first_in_its_order():
    counts = torch.tensor([5, 0, 9, 1, 3])
    tables = plan_rank_tables("hybrid", counts, 8, 3, TWO, "cpu")
    assert tables.replicated == 3 and tables.order.tolist() == [2, 0, 4, 3, 1]
    # a restored model has no counts: its rows are sharded
    assert plan_rank_tables("hybrid", None, 8, 3, TWO, "cpu", rows=5).mode == "sharded"
    with pytest.raises(OptionError, match="rank tables are one of auto, replicated, sharded, hybrid"):
        plan_rank_tables("mirrored", counts, 8, 3, TWO, "cpu")


def test_shares_cover_a_batch_once_and_predictions_come_back_in_order():
    three = [Ranks(rank, 3, torch.device("cpu"), "gloo") for rank in range(3)]
    for rows in (1, 2, 7, 4096):
        spans = [share(rows, ranks) for ranks in three]
        assert spans[0][0] == 0 and spans[-1][1] == rows and all(a[1] == b[0] for a, b in zip(spans, spans[1:]))
    # one rank: its predictions as they are
    local = torch.arange(5.0)
    assert torch.equal(whole_predictions(local, [3, 2], Ranks()), local)
