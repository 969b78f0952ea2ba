"""Data-parallel flow training: two gloo ranks on the CPU (the reference backend) against two plain
Trainers, each trained on one rank's share from the same start, their changes added or averaged by
hand; one rank against Trainer itself."""

import dataclasses
import math

import numpy as np
import pytest
import torch

from alac.data.synthetic import criteo_like
from alac.errors import OptionError
from alac.models import zoo_model
from alac.plan import Plan
from alac.runtime.movement.block_store import DiskBlocks, synthetic_pieces, write_block_store
from alac.runtime.movement.layout import LayoutOptions
from alac.runtime.ranks.distributed import Ranks, init_ranks
from alac.sklearn.linear import LogisticRegression
from alac.train import checkpoint
from alac.train.data_parallel import DataParallelTrainer
from alac.train.trainer import Trainer
from tests.two_ranks import gloo_group, spawned

PLAN = Plan(batch_size=64, chunk_size=16)
OPTIONS = dict(lr=0.5, plan=PLAN, backend="reference", device="cpu", seed=1)
# a budget of a third of a share's layout (32 kB): each rank streams its share in blocks
STREAMED = {**OPTIONS, "plan": Plan(batch_size=64, chunk_size=16, memory_budget=12_000)}
# (model, aggregation, sync_every, optimizer)
CASES = [("lr", "adding", None, "sgd"), ("fm", "averaging", None, "sgd"), ("fm", "adding", None, "adagrad"),
         ("lr", "adding", 8, "sgd"), ("fm", "rows", None, "sgd"), ("lr", "rows", None, "adagrad"),
         ("lr", "sequential", None, "sgd")]


def _model(name):
    return zoo_model("fm", k=4) if name == "fm" else zoo_model("lr")


def _data():
    data = criteo_like(2000, n_fields=6, seed=2, device="cpu")
    return data.take(torch.arange(1600)), data.take(torch.arange(1600, 2000))


def _held_out():
    _, valid = _data()
    return valid.to_scipy(), valid.labels.numpy()


def _run_rank(rank, world, store, out):
    with gloo_group(rank, world, store):
        train, valid = _data()
        results = []
        for name, aggregation, sync_every, optimizer in CASES:
            trainer = DataParallelTrainer(_model(name), ranks=init_ranks(), sync_every=sync_every,
                                          aggregation=aggregation, optimizer=optimizer, epochs=1, **OPTIONS)
            history = trainer.fit(train, valid)
            results.append({"params": trainer.parameters(), "history": history, "first_line": trainer.describe(),
                            "order": trainer.feature_order})
        # each rank handed its own half, as DistributedSampler hands DDP ranks theirs
        own = DataParallelTrainer(_model("lr"), ranks=init_ranks(), aggregation="adding", rows="own", epochs=1,
                                  **OPTIONS)
        own.fit(train.take(torch.arange(800 * rank, 800 * rank + 800)), valid)
        mismatched = DataParallelTrainer(_model("lr"), ranks=init_ranks(), rows="own", epochs=1, **OPTIONS)
        wider = dataclasses.replace(train, n_features=train.n_features + rank)
        try:
            mismatched.fit(wider)
            refused = None
        except OptionError as error:
            refused = str(error)
        results.append({"params": own.parameters(), "first_line": own.describe(), "refused": refused})
        streamed = DataParallelTrainer(_model("lr"), ranks=init_ranks(), aggregation="adding", epochs=1, **STREAMED)
        streamed.fit(train)
        results.append({"params": streamed.parameters(), "order": streamed.feature_order,
                        "streamed": type(streamed.train_layout).__name__})
        blocks = DataParallelTrainer(_model("lr"), ranks=init_ranks(), aggregation="adding", epochs=1, **OPTIONS)
        store = DiskBlocks(f"{out}/blocks")
        blocks.fit(store)
        results.append({"params": blocks.parameters(), "blocks": blocks.train_layout.block_order(0, 1)})
        store.close()
        resumed = checkpoint.load(f"{out}/one.alac", _model("lr"), backend="reference", device="cpu",
                                  ranks=init_ranks())
        resumed.fit(train, epochs=1)
        results.append({"params": resumed.parameters(), "epoch": resumed.epoch, "kind": type(resumed).__name__})
        # the estimator under several ranks: each fits its share of the rows
        X, y = train.to_scipy(), train.labels.numpy()
        estimator = LogisticRegression(learning_rate=0.5, epochs=3, optimizer="sgd", early_stopping=False,
                                       backend="reference", random_state=1).fit(X, y)
        results.append({"coef": estimator.coef_, "accuracy": estimator.score(*_held_out())})
        torch.save(results, f"{out}/{rank}.pt")


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory):
    out = tmp_path_factory.mktemp("ranks")
    # a checkpoint written by one process, for the ranks to resume
    train, _ = _data()
    one = Trainer(_model("lr"), epochs=1, **OPTIONS)
    one.fit(train)
    checkpoint.save(one, out / "one.alac", {"model": "lr", "arguments": {}})
    _store(out).close()
    return spawned(_run_rank, out)


def _store(folder):
    """A block store of the training rows on disk, in blocks of a few batches."""
    pieces = synthetic_pieces(1600, 800, n_fields=6, seed=2, device="cpu")
    return write_block_store(folder / "blocks", pieces, LayoutOptions(chunk_size=16), PLAN.chunks_per_batch, 8_000,
                             device="cpu")


def _by_hand(name, aggregation, optimizer, order, options=OPTIONS):
    """The two shares' epochs from one start, each by a plain Trainer in the ranks' feature order."""
    train, _ = _data()
    start = Trainer(_model(name), epochs=0, optimizer=optimizer, **options)
    start.feature_order = order
    start.fit(train)
    initial, _ = start.parameters()
    changes, counts = [], []
    for rows in torch.arange(train.n_rows).tensor_split(2):
        alone = Trainer(_model(name), epochs=1, optimizer=optimizer, **options)
        alone.feature_order = order
        alone.fit(train.take(rows))
        params, _ = alone.parameters()
        changes.append({k: params[k] - initial[k] for k in params})
        # the share's occurrences of every feature, in the user's ids as parameters() gives them
        layout = alone.train_layout
        frequency = layout.host.frequency if hasattr(layout, "host") else layout.frequency
        count = torch.empty(frequency.numel(), dtype=torch.float32)
        count[order.long()] = frequency.float()
        counts.append(count)
    if aggregation == "sequential":
        # sequential SGD's change on a quadratic model of curvature 1/4, each sample's step lr / B
        q = 1 - OPTIONS["lr"] / PLAN.batch_size * 0.25
        reached = sum(1 - q ** c for c in counts)
        factor = torch.where(reached > 0, (1 - q ** (counts[0] + counts[1])) / reached.clamp_min(1e-30), 1.0).numpy()
        return {k: initial[k] + (changes[0][k] + changes[1][k]) * factor.reshape(-1, *[1] * (initial[k].ndim - 1))
                for k in initial}
    if aggregation == "rows":
        # each row's changes over the shares that changed it (by the first param's rows)
        first = next(iter(initial))
        moved = [np.abs(c[first]).reshape(len(c[first]), -1).max(axis=1) > 0 for c in changes]
        movers = np.maximum(moved[0].astype(np.float32) + moved[1], 1)
        return {k: initial[k] + (changes[0][k] + changes[1][k]) / movers.reshape(-1, *[1] * (initial[k].ndim - 1))
                for k in initial}
    scale = 1.0 if aggregation == "adding" else 0.5
    return {k: initial[k] + scale * (changes[0][k] + changes[1][k]) for k in initial}


@pytest.mark.parametrize("case", [0, 1, 2, 4, 5, 6])
def test_two_ranks_add_or_average_the_changes_of_their_shares(two_ranks, case):
    name, aggregation, _, optimizer = CASES[case]
    first, second = (rank[case] for rank in two_ranks)
    expected = _by_hand(name, aggregation, optimizer, first["order"])
    for rank in (first, second):
        for key, value in expected.items():
            torch.testing.assert_close(torch.as_tensor(rank["params"][0][key]), torch.as_tensor(value),
                                       rtol=1e-5, atol=1e-6)
    # both ranks hold the same model and report the same losses
    assert first["history"] == second["history"] or all(
        a["valid_logloss"] == b["valid_logloss"] and a["train_loss"] == b["train_loss"]
        for a, b in zip(first["history"], second["history"]))


def test_frequent_synchronisations_keep_the_ranks_equal_and_learning(two_ranks):
    first, second = (rank[3] for rank in two_ranks)
    for key in first["params"][0]:
        torch.testing.assert_close(torch.as_tensor(first["params"][0][key]),
                                   torch.as_tensor(second["params"][0][key]), rtol=0, atol=0)
    assert first["history"][0]["valid_logloss"] < 0.69
    assert first["first_line"] == ("alac: 2 ranks (gloo, this one rank 0 on cpu) train, each its share of the rows; "
                                   "parameters and optimizer state synchronised every 8 batches by an all-reduce of "
                                   "their changes (their sum)")


def test_ranks_given_their_own_rows_train_as_ranks_given_the_whole_set(two_ranks):
    for index, rank in enumerate(two_ranks):
        whole, own = rank[0], rank[len(CASES)]
        for key, value in whole["params"][0].items():
            assert torch.equal(torch.as_tensor(own["params"][0][key]), torch.as_tensor(value)), key
        assert own["first_line"].startswith("alac: 2 ranks (gloo, this one rank ") and \
            " train, each its own rows; " in own["first_line"]
        # one feature space: ranks whose rows declare different ones stop together, before training
        n = _data()[0].n_features
        assert own["refused"] == (f"the ranks' own rows declare between {n:,} and {n + 1:,} features (this rank's: "
                                  f"{n + index:,}): every rank's rows must index one feature space")


@pytest.mark.parametrize("name", ["lr", "fm"])
def test_one_rank_is_the_trainer(name):
    train, valid = _data()
    one = DataParallelTrainer(_model(name), ranks=Ranks(), epochs=2, **OPTIONS)
    alone = Trainer(_model(name), epochs=2, **OPTIONS)
    assert [r["valid_logloss"] for r in one.fit(train, valid)] == [r["valid_logloss"] for r in alone.fit(train, valid)]
    for key, value in alone.parameters()[0].items():
        assert (one.parameters()[0][key] == value).all()
    assert one.describe() == "alac: 1 rank trains"


def test_bad_options_are_refused():
    with pytest.raises(OptionError, match="aggregation"):
        DataParallelTrainer(_model("lr"), ranks=Ranks(), aggregation="median", **OPTIONS)
    with pytest.raises(OptionError, match="sync_every"):
        DataParallelTrainer(_model("lr"), ranks=Ranks(), sync_every=0, **OPTIONS)
    with pytest.raises(OptionError, match="sequential combination needs"):
        DataParallelTrainer(_model("lr"), ranks=Ranks(world=2), **{**OPTIONS, "lr": 4096.0})


def test_an_estimator_fits_over_the_ranks_as_over_one(two_ranks):
    first, second = (rank[len(CASES) + 4] for rank in two_ranks)
    np.testing.assert_array_equal(first["coef"], second["coef"])
    X, y = _held_out()
    alone = LogisticRegression(learning_rate=0.5, epochs=3, optimizer="sgd", early_stopping=False,
                               backend="reference", random_state=1).fit(*_train_arrays())
    # two ranks' three epochs on half the rows each: as accurate as one process's on all of them, within 0.02
    assert first["accuracy"] == pytest.approx(alone.score(X, y), abs=0.02) and first["accuracy"] > 0.6


def _train_arrays():
    train, _ = _data()
    return train.to_scipy(), train.labels.numpy()


def test_a_checkpoint_of_one_process_resumes_on_two_ranks(two_ranks):
    first, second = (rank[len(CASES) + 3] for rank in two_ranks)
    assert first["kind"] == "DataParallelTrainer" and first["epoch"] == second["epoch"] == 2
    for key, value in first["params"][0].items():
        np.testing.assert_array_equal(value, second["params"][0][key])


def test_the_sequential_factor_is_sequential_sgd_on_a_quadratic():
    """SGD with steps eta on f(x) = h/2 (x - 1)^2 from 0: n0 steps on one rank, n1 on another, their
    changes summed and scaled, against n0 + n1 steps in turn."""
    from alac.train.data_parallel import sequential_factor

    eta, h = 0.01, 0.5
    log_q = math.log1p(-eta * h)
    for n0, n1 in ((1, 0), (3, 5), (400, 900), (10_000, 20_000)):
        def steps(n):
            x = 0.0
            for _ in range(n):
                x -= eta * h * (x - 1)
            return x
        summed = steps(n0) + steps(n1)
        reached = torch.tensor([-math.expm1(n0 * log_q) - math.expm1(n1 * log_q)], dtype=torch.float64)
        factor = sequential_factor(torch.tensor([float(n0 + n1)], dtype=torch.float64), reached, log_q)
        assert float(summed * factor) == pytest.approx(steps(n0 + n1), rel=1e-9)


def test_the_sequential_factors_in_pieces_equal_them_at_once(monkeypatch):
    """Each row's factor from its occurrences (the closed form of sequential_factor), whether the rows
    are taken at once or 7 at a time."""
    import alac.train.data_parallel
    from alac.train.data_parallel import sequential_factor

    train = _data()[0]
    trainer = DataParallelTrainer(_model("lr"), ranks=Ranks(), aggregation="sequential", **OPTIONS)
    trainer.prepare(train)
    whole = trainer._sequential_rows(0.5).clone()
    occurrences = trainer.train_layout.frequency.float() * 0.5
    log_q = trainer._log_q()
    expected = sequential_factor(occurrences, -torch.expm1(occurrences * log_q), log_q)
    torch.testing.assert_close(whole, expected, rtol=0, atol=0)
    monkeypatch.setattr(alac.train.data_parallel, "SEQUENTIAL_PIECE", 7)
    trainer._terms = None
    assert trainer.train_layout.n_features > 7
    torch.testing.assert_close(trainer._sequential_rows(0.5), whole, rtol=0, atol=0)


def test_shares_over_the_gpu_budget_stream_and_add_up_as_streamed_shares_do(two_ranks):
    first, second = (rank[len(CASES) + 1] for rank in two_ranks)
    assert first["streamed"] == "StreamedLayout"
    expected = _by_hand("lr", "adding", "sgd", first["order"], STREAMED)
    for rank in (first, second):
        for key, value in expected.items():
            torch.testing.assert_close(torch.as_tensor(rank["params"][0][key]), torch.as_tensor(value),
                                       rtol=1e-5, atol=1e-6)


def test_a_block_store_on_disk_trains_each_rank_its_part_of_the_blocks(two_ranks, tmp_path):
    first, second = (rank[len(CASES) + 2] for rank in two_ranks)
    assert sorted(first["blocks"] + second["blocks"]) == list(range(len(first["blocks"]) + len(second["blocks"])))
    assert set(first["blocks"]).isdisjoint(second["blocks"]) and len(first["blocks"]) > 1
    # by hand: each part's epoch by a plain Trainer from the same start, the changes added
    store = _store(tmp_path)
    start = Trainer(_model("lr"), epochs=0, **OPTIONS)
    start.fit(store)
    initial, _ = start.parameters()
    expected = dict(initial)
    for rank in range(2):
        alone = Trainer(_model("lr"), epochs=1, **OPTIONS)
        alone.prepare(store)
        alone.train_layout.take_part(rank, 2)
        alone.fit(store)
        params, _ = alone.parameters()
        expected = {k: expected[k] + params[k] - initial[k] for k in expected}
    store.close()
    for rank in (first, second):
        for key, value in expected.items():
            torch.testing.assert_close(torch.as_tensor(rank["params"][0][key]), torch.as_tensor(value),
                                       rtol=1e-5, atol=1e-6)
