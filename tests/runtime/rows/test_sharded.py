"""Row-wise sharded tables: two gloo ranks on the CPU train with each rank holding only its share of
the rows (or the hot rows replicated and its share of the cold ones), against the replicated
data-parallel trainer (every row on every rank, changes all-reduced) with the same aggregation and
segments; one rank against a plain Trainer; the all-to-all routing against the rows asked for."""

import dataclasses

import pytest
import torch

import alac.train.trainer
from alac.data.synthetic import criteo_like
from alac.errors import OptionError
from alac.models import zoo_model
from alac.plan import Plan
from alac.runtime.execution import state as state_module
from alac.runtime.planning.planner import layout_bytes
from alac.runtime.ranks.distributed import Ranks, init_ranks
from alac.runtime.rows import sharded as sharded_rows
from alac.runtime.rows.sharded import RowShards, ShardSnapshot, expected_rows, segment_batches
from alac.train.data_parallel import DataParallelTrainer
from alac.train.trainer import QUEUE_SECONDS, Trainer, TrainingDiverged
from tests.two_ranks import gloo_group, spawned

# the generated kernels: compiled on a GPU, Triton's interpreter without one
KERNELS = "triton" if torch.cuda.is_available() else "interpret"

PLAN = Plan(batch_size=64, chunk_size=16, hot_size=8)
OPTIONS = dict(lr=0.5, plan=PLAN, backend="reference", device="cpu", seed=1)
# (model, aggregation, sync_every, optimizer)
CASES = [("lr", "adding", None, "sgd"), ("fm", "rows", None, "adagrad"), ("fm", "sequential", 8, "sgd"),
         ("lr", "averaging", 4, "ftrl"),
         # every batch: PICASSO's hybrid, the hot rows all-reduced and the cold ones moved by all-to-alls per batch
         ("fm", "sequential", 1, "adagrad")]


def _model(name):
    return zoo_model("fm", k=4) if name == "fm" else zoo_model("lr")


def _data(rows=2000):
    data = criteo_like(rows, n_fields=6, seed=2, device="cpu")
    cut = rows * 4 // 5
    return data.take(torch.arange(cut)), data.take(torch.arange(cut, rows))


def _run_rank(rank, world, store, out):
    with gloo_group(rank, world, store):
        ranks = init_ranks()
        shards = RowShards(ranks, 11, torch.device("cpu"))
        table = (shards.owned.double() * 10).view(-1, 1).repeat(1, 2)
        asked = torch.tensor([0, 3, 4, 9, 10]) if rank == 0 else torch.tensor([1, 2, 3])
        gathered, route = shards.gather(asked, table)
        home, changes = shards.scatter(route, torch.ones(asked.numel(), 2) * (rank + 1))
        cold = RowShards(ranks, 11, torch.device("cpu"), first=3)
        results = {"gathered": gathered, "owned": shards.owned, "home": home, "changes": changes, "cases": [],
                   "cold_owned": cold.owned, "counts": (shards.count, cold.count),
                   "cold_of_local": cold.global_ids(torch.tensor([2, 0])).tolist()}
        train, valid = _data()
        for name, aggregation, sync_every, optimizer in CASES:
            runs = {}
            for tables in ("replicated", "sharded", "hybrid"):
                trainer = DataParallelTrainer(_model(name), ranks=ranks, sync_every=sync_every, tables=tables,
                                              aggregation=aggregation, optimizer=optimizer, epochs=2, **OPTIONS)
                history = trainer.fit(train, valid)
                runs[tables] = {"params": trainer.parameters(), "history": history,
                                "first_line": trainer.describe()}
                if tables != "replicated":
                    runs[tables]["rows_held"] = trainer.executor.table.shape[0] + trainer.executor.hot_table.shape[0]
                    runs[tables]["rows"] = trainer.executor.shards.n_rows
            results["cases"].append(runs)
        # rows over the GPU budget for them, tables left to choose: hybrid, segments sized to the room left
        budget = layout_bytes(train.take(torch.arange(800)), PLAN.chunk_size) + 1_250_000
        auto = DataParallelTrainer(_model("fm"), ranks=ranks, optimizer="adagrad", epochs=1,
                                   **{**OPTIONS, "plan": dataclasses.replace(PLAN, memory_budget=budget)})
        auto.fit(train, valid)
        hybrid = DataParallelTrainer(_model("fm"), ranks=ranks, tables="hybrid", sync_every=auto.sync_every,
                                     optimizer="adagrad", epochs=1, **OPTIONS)
        hybrid.fit(train, valid)
        fits = DataParallelTrainer(_model("lr"), ranks=ranks, epochs=1, **OPTIONS)
        fits.fit(train)
        # epochs measured apart: one rank's 1 ms would queue many more than the other's 200 ms
        results["group_size"] = fits._group_size(True, 50, 1e-3 if rank == 0 else 0.2)
        # hot sizes chosen by each rank from its own rows: the ranks train the smallest (the hot rows'
        # all-reduce is one tensor), as a plan of that size does
        results["uneven_hot"] = {}
        for hot_size in ((8, 8), (8, 11)):
            trainer = DataParallelTrainer(_model("fm"), ranks=ranks, tables="hybrid", optimizer="adagrad", epochs=1,
                                          **{**OPTIONS, "plan": dataclasses.replace(PLAN, hot_size=hot_size[rank])})
            trainer.fit(train, valid)
            results["uneven_hot"][hot_size] = (trainer.plan.hot_size, trainer.executor.hot, trainer.parameters())
        # tables past DRAW_ROWS: each rank draws only its own rows (counter-based), as the replicated draw
        state_module.DRAW_ROWS = sharded_rows.DRAW_ROWS = 8
        results["counter_drawn"] = {}
        for tables in ("replicated", "hybrid"):
            trainer = DataParallelTrainer(_model("fm"), ranks=ranks, tables=tables, optimizer="adagrad", epochs=1,
                                          **OPTIONS)
            trainer.fit(train, valid)
            results["counter_drawn"][tables] = trainer.parameters()
        # host memory for a snapshot on rank 1 only: neither rank snapshots, and a divergence ends both
        if rank == 1:
            alac.train.trainer.available_bytes = lambda device: 1000
        diverging = DataParallelTrainer(_model("fm"), ranks=ranks, tables="hybrid", optimizer="sgd", epochs=3,
                                        aggregation="adding",
                                        **{**OPTIONS, "lr": 1e4})
        try:
            diverging.fit(train)
            results["unsnapshotted"] = "trained"
        except TrainingDiverged as error:
            results["unsnapshotted"] = str(error)
        results["auto"] = {"tables": auto.tables, "sync_every": auto.sync_every, "lines": auto.placement.lines(),
                           "params": auto.parameters(), "hybrid": hybrid.parameters(),
                           "fits": (fits.tables, fits.placement.lines())}
        torch.save(results, f"{out}/{rank}.pt")


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory):
    out = tmp_path_factory.mktemp("sharded")
    return spawned(_run_rank, out)



def _close(actual, expected, rel, absolute, name):
    """pytest.approx(expected, rel, abs)'s check of a table's values, vectorized (approx over a table's
    rows took about ten seconds a test)."""
    actual = torch.as_tensor(actual, dtype=torch.float64)
    expected = torch.as_tensor(expected, dtype=torch.float64)
    assert actual.shape == expected.shape, name
    assert bool(((actual - expected).abs() <= torch.clamp(rel * expected.abs(), min=absolute)).all()), name

def test_ranks_snapshot_together_or_not_at_all(two_ranks):
    """One rank without the host memory for its shard's snapshot: no rank snapshots (a restore is
    collective), and the divergence ends both ranks' fits alike, their last parameters kept."""
    for rank in two_ranks:
        assert "too large to snapshot in host memory: its last parameters are kept" in rank["unsnapshotted"]


def test_a_snapshot_counts_the_shards_of_every_rank_on_the_host(monkeypatch):
    trainer = DataParallelTrainer(zoo_model("fm", k=4), ranks=Ranks(), tables="hybrid", epochs=1, **OPTIONS)
    trainer.fit(_data()[0])
    held = trainer.executor.held_bytes()
    assert held == (trainer.executor.table.numel() + trainer.executor.hot_table.numel()) * 4
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")
    monkeypatch.setattr(alac.train.trainer, "available_bytes", lambda device: 2 * 4 * held)
    assert isinstance(trainer._checkpoint_in_memory()[0], ShardSnapshot)
    monkeypatch.setattr(alac.train.trainer, "available_bytes", lambda device: 2 * 4 * held - 2)
    assert trainer._checkpoint_in_memory() is None


def test_rows_reach_their_readers_and_changes_their_owners(two_ranks):
    first, second = two_ranks
    assert first["owned"].tolist() == [0, 2, 4, 6, 8, 10] and second["owned"].tolist() == [1, 3, 5, 7, 9]
    # each rank gets the rows it asked for, in its order, from whichever rank owns them
    assert first["gathered"][:, 0].tolist() == [0.0, 30.0, 40.0, 90.0, 100.0]
    assert second["gathered"][:, 1].tolist() == [10.0, 20.0, 30.0]
    # owners receive (local index, change) of their rows from every rank, rank 0's first
    assert first["home"].tolist() == [0, 2, 5, 1] and first["changes"][:, 0].tolist() == [1, 1, 1, 2]
    assert second["home"].tolist() == [1, 4, 0, 1] and second["changes"][:, 0].tolist() == [1, 1, 2, 2]
    # rows below `first` (replicated hot rows) are nobody's
    assert first["cold_owned"].tolist() == [3, 5, 7, 9] and second["cold_owned"].tolist() == [4, 6, 8, 10]
    # the owned rows are computed, not kept: their count, and local indices' global ids
    assert first["counts"] == (6, 4) and second["counts"] == (5, 4)
    assert first["cold_of_local"] == [7, 3] and second["cold_of_local"] == [8, 4]


def test_ranks_drawing_only_their_rows_train_as_one_drawing_the_whole_table(two_ranks):
    for rank in two_ranks:
        replicated, hybrid = rank["counter_drawn"]["replicated"], rank["counter_drawn"]["hybrid"]
        for name, values in replicated[0].items():
            _close(hybrid[0][name], values, 1e-5, 1e-6, name)


@pytest.mark.parametrize("tables", ["sharded", "hybrid"])
@pytest.mark.parametrize("case", range(len(CASES)))
def test_sharded_tables_train_as_replicated_ones(two_ranks, case, tables):
    """The same params, losses and validation metrics as the replicated trainer, with each rank holding
    about half of the rows (and the hybrid the 8 hot rows besides)."""
    for rank in two_ranks:
        runs = rank["cases"][case]
        replicated, sharded = runs["replicated"], runs[tables]
        for name, values in replicated["params"][0].items():
            _close(sharded["params"][0][name], values, 1e-5, 1e-6, name)
        for name, value in replicated["params"][1].items():
            assert sharded["params"][1][name] == pytest.approx(value, rel=1e-5, abs=1e-6), name
        for a, b in zip(replicated["history"], sharded["history"]):
            assert b["train_loss"] == pytest.approx(a["train_loss"], rel=1e-5)
            assert b["valid_logloss"] == pytest.approx(a["valid_logloss"], rel=1e-5)
        hot = PLAN.hot_size if tables == "hybrid" else 0
        assert sharded["rows_held"] <= hot + (sharded["rows"] - hot) // 2 + 1
        assert "sharded row-wise" in sharded["first_line"]
        assert ("hot segment replicated" in sharded["first_line"]) == (tables == "hybrid")
    # both ranks end with the same model
    for name, values in two_ranks[0]["cases"][case][tables]["params"][0].items():
        assert torch.equal(torch.as_tensor(two_ranks[1]["cases"][case][tables]["params"][0][name]),
                           torch.as_tensor(values))


@pytest.mark.parametrize(("backend", "tables", "counter_drawn"),
                         [("reference", "sharded", False), (KERNELS, "hybrid", False), ("reference", "hybrid", True)])
def test_one_rank_of_sharded_tables_is_a_plain_trainer(backend, tables, counter_drawn, monkeypatch):
    if counter_drawn:
        # tables past DRAW_ROWS: each rank draws only its rows, the plain trainer the whole table
        monkeypatch.setattr(state_module, "DRAW_ROWS", 8)
        monkeypatch.setattr(sharded_rows, "DRAW_ROWS", 8)
    # the interpreter runs a program at a time: a smaller set and one epoch keep its case within seconds
    train, valid = _data(320 if backend == "interpret" else 2000)
    device = "cuda" if backend == "triton" else "cpu"
    options = {**OPTIONS, "backend": backend, "device": device, "optimizer": "adagrad",
               "epochs": 1 if backend == "interpret" else 2}
    plain = Trainer(zoo_model("fm", k=4), **options)
    plain_history = plain.fit(train, valid)
    sharded = DataParallelTrainer(zoo_model("fm", k=4), ranks=Ranks(), tables=tables, aggregation="adding",
                                  **options)
    history = sharded.fit(train, valid)
    for name, values in plain.parameters()[0].items():
        _close(sharded.parameters()[0][name], values, 1e-5, 1e-6, name)
    assert [r["valid_logloss"] for r in history] == pytest.approx([r["valid_logloss"] for r in plain_history],
                                                                  rel=1e-5)


def test_sharded_tables_refuse_a_streaming_budget():
    trainer = DataParallelTrainer(zoo_model("lr"), ranks=Ranks(), tables="sharded",
                                  **{**OPTIONS, "plan": Plan(batch_size=64, chunk_size=16, memory_budget=12_000)})
    with pytest.raises(OptionError, match="sharded tables train resident shares of the rows: this rank's share"):
        trainer.fit(_data()[0])
    with pytest.raises(OptionError, match="tables are one of auto, replicated, sharded, hybrid"):
        DataParallelTrainer(zoo_model("lr"), ranks=Ranks(), tables="split", **OPTIONS)


def test_a_segment_whose_rows_do_not_fit_is_refused_before_it_trains(monkeypatch):
    import alac.runtime.rows.sharded as sharded_rows

    train, _ = _data()
    trainer = DataParallelTrainer(zoo_model("fm", k=4), ranks=Ranks(), tables="sharded", epochs=1, **OPTIONS)
    trainer.initialize_model(train)
    before = trainer.executor.table.clone()
    monkeypatch.setattr(sharded_rows, "available_bytes", lambda device: 10_000)
    with pytest.raises(OptionError, match=r"a segment touches [\d,]+ parameter rows here, .* synchronise more often"):
        trainer.fit(train)
    assert torch.equal(trainer.executor.table, before)



def test_a_whole_state_set_on_sharded_tables_predicts_as_it_did():
    """A state from elsewhere (a plain Trainer's, as a checkpoint's would be) shared out over sharded
    tables before they were initialized: the same predictions, the same whole state read back."""
    train, valid = _data()
    plain = Trainer(zoo_model("fm", k=4), epochs=1, **OPTIONS)
    plain.fit(train)
    sharded = DataParallelTrainer(zoo_model("fm", k=4), ranks=Ranks(), tables="hybrid", epochs=1, **OPTIONS)
    sharded.feature_order = plain.feature_order  # its rows' order, which a checkpoint keeps beside them
    sharded.prepare(train)
    sharded.executor.state = plain.executor.state.clone()
    assert torch.equal(sharded.predict(valid), plain.predict(valid))
    for name, values in plain.executor.state.params.items():
        assert torch.equal(sharded.executor.state.params[name], values), name


def test_rows_over_the_budget_choose_hybrid_tables_with_segments_that_fit(two_ranks):
    for rank in two_ranks:
        auto = rank["auto"]
        assert auto["tables"] == "hybrid"
        # 800 rows a rank in batches of 64: 13 batches an epoch, cut into segments
        assert 1 <= auto["sync_every"] < 13
        assert auto["lines"][0].startswith("placement = hybrid tables over 2 ranks: ")
        assert auto["lines"][1].startswith(f"sync every = {auto['sync_every']} batches")
        for name, values in auto["hybrid"][0].items():
            _close(auto["params"][0][name], values, 1e-6, 1e-7, name)
        # rows that fit are replicated, the measured reason given
        tables, lines = auto["fits"]
        assert tables == "replicated"
        assert any(line.startswith("tables = replicated over 2 ranks: every row fits") for line in lines)


def test_ranks_given_different_hot_sizes_train_the_smallest(two_ranks):
    """benchmarks/distributed.py's placement run: each rank's hot size from its own rows (657 to 678
    rows) hung the hot rows' all-reduce."""
    for rank in two_ranks:
        even, uneven = rank["uneven_hot"][(8, 8)], rank["uneven_hot"][(8, 11)]
        assert uneven[:2] == even[:2] == (8, 8)
        for name, values in even[2][0].items():
            assert (uneven[2][0][name] == values).all(), name
        assert uneven[2][1] == even[2][1]


def test_ranks_queue_as_many_epochs_whatever_each_measured(two_ranks):
    """A group's end holds collectives (sharded tables' finiteness check): ranks that queued groups of
    different sizes would wait in different collectives."""
    first, second = two_ranks
    assert first["group_size"] == second["group_size"] == max(1, int(QUEUE_SECONDS / 0.2))


def test_expected_rows_and_segment_batches_against_closed_forms():
    # uniform over N rows: N (1 - (1 - 1/N)^e) distinct rows among e edges
    frequency = torch.full((1000,), 7)
    assert expected_rows(frequency, 500) == pytest.approx(1000 * (1 - (1 - 1 / 1000) ** 500), rel=1e-9)
    # one row takes every edge: one row, however many edges
    assert expected_rows(torch.tensor([5, 0, 0]), 10_000) == pytest.approx(1.0)
    # segments of b batches of 100 edges hold 1.25 x expected rows + 10 fixed within 400 rows
    found = segment_batches(frequency, 100, 50, 400, fixed_rows=10)
    assert 10 + 1.25 * expected_rows(frequency, found * 100) <= 400 < 10 + 1.25 * expected_rows(frequency,
                                                                                             (found + 1) * 100)
    assert segment_batches(frequency, 100, 50, 100) == 0      # one batch's rows do not fit
    assert segment_batches(frequency, 100, 3, 10_000) == 3    # the whole epoch fits



@pytest.mark.parametrize("lr", [3.0, 1e4])
def test_sharded_tables_keep_the_best_epoch_and_recover_from_divergence_as_a_plain_trainer(lr):
    """Early stopping (lr 3: validation loss rises in epoch 3, epoch 2's model kept) and the divergence
    guard (lr 1e4: NaN in epoch 1, the initial model restored) from each rank's own snapshots."""
    train, valid = _data()
    options = {**OPTIONS, "lr": lr, "optimizer": "sgd", "epochs": 8, "early_stopping": "patience", "patience": 1}
    runs = [Trainer(zoo_model("fm", k=4), **options),
            DataParallelTrainer(zoo_model("fm", k=4), ranks=Ranks(), tables="hybrid", aggregation="adding", **options)]
    outcomes = []
    for trainer in runs:
        try:
            trainer.fit(train, valid)
            outcomes.append(("stopped", trainer.best_epoch))
        except TrainingDiverged:
            outcomes.append(("diverged", trainer.epoch))
    assert outcomes[0] == outcomes[1] == (("stopped", 2) if lr == 3.0 else ("diverged", 0))
    assert isinstance(runs[1]._checkpoint_in_memory()[0], ShardSnapshot)
    for name, values in runs[0].parameters()[0].items():
        _close(runs[1].parameters()[0][name], values, 1e-5, 1e-6, name)


def test_the_training_and_validation_layouts_share_their_per_row_scratch():
    """Each layout gets its own re-pointed edge ids, but the rows' slots and touched marks are one pair
    for the feature space: validating adds no per-row tensors (gigabytes on billions of rows)."""
    train, valid = _data()
    sharded = DataParallelTrainer(zoo_model("lr"), ranks=Ranks(), tables="sharded", epochs=1, **OPTIONS)
    sharded.fit(train, valid)
    (train_layout, train_edges, *train_rows), (valid_layout, valid_edges, *valid_rows) = sharded.executor._scratch
    assert train_layout is not valid_layout and train_edges is not valid_edges
    assert all(ours is theirs for ours, theirs in zip(train_rows, valid_rows))
    assert (train_rows[0] == -1).all() and not train_rows[1].any()
