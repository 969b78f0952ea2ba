"""The default optimizer "auto": the race's choice against each arm trained alone."""

import math

import numpy as np
import pytest

from alac.cli.data import TrainingData, with_validation_split
from alac.cli.train import parse_arguments, train_model
from alac.models import zoo_module
from alac.train.race import Arm, race


class _History:
    def __init__(self, losses):
        self.history = [{"valid_logloss": loss} for loss in losses]

    @staticmethod
    def monitored(record):
        return record["valid_logloss"]


def test_race_keeps_the_lowest_validation_loss_and_a_diverged_arm_loses():
    arms = (Arm("adagrad", 0.2, 0.0), Arm("sgd", 2.0, 0.0))
    lines = []
    histories = {"adagrad": ([0.5, 0.3, 0.4], None), "sgd": ([0.6, 0.31], None)}
    assert race(arms, lambda arm: (_History(histories[arm.optimizer][0]), None), lines.append) == 0
    assert lines[-1].startswith("optimizer auto: kept adagrad lr 0.2 l2 0 (best validation loss adagrad 0.3, sgd 0.31")
    # the lower loss of a diverged arm (its restored parameters) does not win
    histories = {"adagrad": [0.5, 0.3], "sgd": [0.2, math.inf]}
    diverged = {"adagrad": None, "sgd": RuntimeError("diverged")}
    assert race(arms, lambda arm: (_History(histories[arm.optimizer]), diverged[arm.optimizer])) == 0


@pytest.mark.parametrize("argv, expected", [
    ([], ("adagrad", 0.2, 0.0, "sgd", 2.0, 0.0)),
    (["--l2", "0.001"], ("adagrad", 0.2, 0.001, "sgd", 2.0, 0.001)),
])
def test_lr_arms(argv, expected):
    args = parse_arguments(zoo_module("lr"), argv)
    assert tuple(v for arm in args.race for v in (arm.optimizer, arm.lr, arm.l2)) == expected


def test_fm_arms_drop_the_default_l2_for_sgd_and_a_given_rate_trains_adagrad_alone():
    args = parse_arguments(zoo_module("fm"), [])
    assert [(arm.optimizer, arm.lr, arm.l2) for arm in args.race] == [("adagrad", 0.2, 0.01), ("sgd", 0.5, 0.0)]
    args = parse_arguments(zoo_module("fm"), ["--loss", "squared"])
    assert args.race[1] == Arm("sgd", 0.05, 0.0)
    args = parse_arguments(zoo_module("fm"), ["--lr", "0.1"])
    assert args.race is None and (args.optimizer, args.lr, args.l2) == ("adagrad", 0.1, 0.01)
    args = parse_arguments(zoo_module("fm"), ["--optimizer", "sgd"])
    assert args.race is None and (args.optimizer, args.lr, args.l2) == ("sgd", 0.5, 0.01)


def _train(data, argv):
    module = zoo_module("lr")
    args = parse_arguments(module, [*argv, "--backend", "reference", "--epochs", "30"])
    trainer, final, diverged = train_model(args, module, with_validation_split(TrainingData(data, None, None), args))
    return args, trainer, final


def test_the_kept_model_is_the_winning_arm_trained_alone(shared_data):
    """On ipinyou (rare features) the race keeps SGD; its model is the one `--optimizer sgd` trains
    with the winner's settings, and its validation loss is the lower of the two arms trained alone."""
    from alac.data import load_libsvm_files

    (data,) = load_libsvm_files([shared_data / "ipinyou/train.fm.txt"])
    args, trainer, _ = _train(data, [])
    assert (args.optimizer, args.lr, args.l2) == ("sgd", 2.0, 0.0)
    alone = {name: _train(data, ["--optimizer", name, "--l2", "0"])[1] for name in ("adagrad", "sgd")}
    best = {name: min(r["valid_logloss"] for r in t.history) for name, t in alone.items()}
    assert best["sgd"] < best["adagrad"]
    kept, sgd = trainer.parameters()[0]["w"], alone["sgd"].parameters()[0]["w"]
    # bit for bit on a CPU; the reference's scatter-adds on a GPU sum in another order every run
    np.testing.assert_allclose(kept, sgd, rtol=1e-4, atol=1e-6)


def test_estimator_race_records_the_winner_and_refits_to_the_same_model():
    from alac.sklearn.linear import FMClassifier

    rng = np.random.default_rng(0)
    X = (rng.random((3000, 40)) < 0.1).astype(np.float32)
    y = (X[:, :5].sum(1) + rng.normal(0, 0.5, 3000) > 0.5).astype(int)
    auto = FMClassifier(backend="reference", epochs=20, random_state=0).fit(X, y)
    assert auto.optimizer_ in ("adagrad", "sgd")
    assert auto.alpha_ == (0.0 if auto.optimizer_ == "sgd" else 0.01)
    named = FMClassifier(backend="reference", epochs=20, random_state=0, optimizer=auto.optimizer_,
                         learning_rate=auto.learning_rate_, alpha=auto.alpha_).fit(X, y)
    np.testing.assert_allclose(auto.coef_, named.coef_, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(auto.predict_proba(X), named.predict_proba(X), rtol=1e-4, atol=1e-6)


def test_the_default_l2_is_in_units_of_the_training_values_and_a_given_one_is_kept():
    """FM's default L2 (0.01) times the rows' mean |value|: on rows of values 0.25 a default run is
    the run of --l2 0.0025, in the CLI's race arms and the estimator alike; one-hot rows keep 0.01."""
    import dataclasses

    import torch

    from alac.cli.train import scale_default_l2
    from alac.data.synthetic import criteo_like
    from alac.sklearn.linear import FMRegressor

    module = zoo_module("fm")
    data = criteo_like(600, n_fields=4, seed=1, device="cpu")
    quarter = dataclasses.replace(data, values=torch.full((data.nnz,), 0.25))
    argv = ["--backend", "reference", "--epochs", "2", "--optimizer", "adagrad"]

    def fit(rows, extra):
        args = parse_arguments(module, [*argv, *extra])
        trainer, *_ = train_model(args, module, with_validation_split(TrainingData(rows, None, None), args))
        return args, trainer.parameters()[0]["v"]

    default, v = fit(quarter, [])
    given, explicit = fit(quarter, ["--l2", "0.0025"])
    assert default.l2 == pytest.approx(0.0025) and given.l2 == 0.0025
    # bit for bit on a CPU; a GPU's scatter-adds sum in another order every run
    np.testing.assert_allclose(v, explicit, rtol=1e-4, atol=1e-6)
    assert fit(quarter, ["--l2", "0.01"])[0].l2 == 0.01
    assert fit(data, [])[0].l2 == 0.01
    raced = parse_arguments(module, [])
    scale_default_l2(raced, module, quarter)
    assert [arm.l2 for arm in raced.race] == [pytest.approx(0.0025), 0.0]
    X = np.full((300, 6), 0.25, dtype=np.float32) * (np.random.default_rng(0).random((300, 6)) < 0.5)
    y = X.sum(1)
    estimator = FMRegressor(backend="reference", epochs=1, optimizer="adagrad", early_stopping=False).fit(X, y)
    assert estimator.alpha_ == pytest.approx(0.0025)
    assert FMRegressor(backend="reference", epochs=1, optimizer="adagrad", alpha=0.01,
                       early_stopping=False).fit(X, y).alpha_ == 0.01
