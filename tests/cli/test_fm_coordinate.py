"""`alac train --model fm --solver als|mcmc` (alac.cli.fm_coordinate): planted ratings learned beyond a
constant's error, the checkpoint scoring the test rows in `alac predict` as training did (a probit
model's too: the same ranking), MCMC on MovieLens better than the SGD FM's defaults, clear errors."""

import json

import numpy as np
import pytest
import torch

from alac import metrics
from alac.cli.commands import main
from alac.data.synthetic import criteo_like, ratings_like


def _ratings_csv(path, rows, first_row=0):
    """Planted ratings (rows first_row ..) as a CSV table user,item,rating; their SparseDataset."""
    data = ratings_like(rows, n_users=80, n_items=40, k=3, noise_std=0.3, seed=1, device="cpu", first_row=first_row)
    ids = data.indices.long().view(-1, 2)
    table = np.column_stack([ids[:, 0].numpy(), ids[:, 1].numpy(), data.labels.numpy()])
    np.savetxt(path, table, fmt=["%d", "%d", "%.6f"], delimiter=",", header="user,item,rating", comments="")
    return data


def test_mcmc_learns_planted_ratings_and_its_checkpoint_predicts_as_training_scored(tmp_path, capsys):
    truth = _ratings_csv(tmp_path / "train.csv", 4000)
    test = _ratings_csv(tmp_path / "test.csv", 1000, first_row=4000)      # the same planted model's later rows
    out = tmp_path / "run"
    assert main(["train", "--model", "fm", "--loss", "squared", "--solver", "mcmc", "--k", "4", "--epochs", "40",
                 "--train", str(tmp_path / "train.csv"), "--test", str(tmp_path / "test.csv"), "--label", "rating",
                 "--fields", "user,item", "--valid-split", "0", "--out", str(out)]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed[0].startswith("alac: fm (k = 4) by MCMC (8 burn-in sweeps) on ")
    assert printed[1].startswith("  epoch 1 train_rmse ") and " samples 0" in printed[1]
    final = json.loads((out / "metrics.json").read_text())
    assert final["samples"] == 32 and final["epochs"] == 40
    # the constant's error is the labels' spread; the noise's 0.3 is the floor
    assert 0.3 < final["test_rmse"] < 0.6 * float(truth.labels.std())
    assert main(["predict", "--model-dir", str(out), "--data", str(tmp_path / "test.csv"), "--output",
                 str(tmp_path / "predicted.txt"), "--backend", "reference"]) == 0
    predicted = torch.from_numpy(np.loadtxt(tmp_path / "predicted.txt"))
    assert float(metrics.rmse(predicted, test.labels.double())) == pytest.approx(final["test_rmse"], abs=1e-5)
    # the chain is not in the checkpoint: a resume is refused, the outputs kept
    capsys.readouterr()
    assert main(["train", "--resume", str(out), "--epochs", "60"]) == 2
    assert "an MCMC run is not continued" in capsys.readouterr().err
    assert json.loads((out / "metrics.json").read_text()) == final


def test_probit_mcmc_classifies_and_its_logistic_checkpoint_ranks_alike(tmp_path):
    out = tmp_path / "run"
    assert main(["train", "--model", "fm", "--solver", "mcmc", "--k", "2", "--epochs", "20", "--synthetic", "3000",
                 "--out", str(out)]) == 0
    final = json.loads((out / "metrics.json").read_text())
    assert final["test_auc"] > 0.6
    from alac.data.libsvm import write_libsvm
    from alac.data.split import split

    # the run's test rows: --synthetic's set split as alac train splits it
    _, _, test = split(criteo_like(3000, seed=0, device="cpu"), (0.8, 0.1, 0.1), seed=0)
    write_libsvm(test, tmp_path / "test.svm")
    assert main(["predict", "--model-dir", str(out), "--data", str(tmp_path / "test.svm"), "--output",
                 str(tmp_path / "predicted.txt"), "--backend", "reference"]) == 0
    probability = torch.from_numpy(np.loadtxt(tmp_path / "predicted.txt"))
    assert float(metrics.auc(probability, test.labels > 0.5)) == pytest.approx(final["test_auc"], abs=1e-4)


def test_mcmc_on_movielens_beats_the_sgd_fms_defaults(shared_data, tmp_path):
    """benchmarks/defaults.py: the SGD FM's defaults reach test RMSE 0.866 on the 90/10 split."""
    from alac.data.split import split
    from alac.data.table import load_table
    from alac.runtime.solvers.fm_coordinate import CoordinateSettings, CoordinateSolver

    ratings = load_table(shared_data / "ml-latest-small/ratings.csv", label="rating", fields="userId,movieId")
    train, test = split(ratings, (0.9, 0.1), seed=0)
    solver = CoordinateSolver(CoordinateSettings(solver="mcmc", k=8, iterations=60, burn_in=12), train,
                              ratings.n_features)
    for _ in range(60):
        solver.iterate()
    rmse = float(metrics.rmse(solver.predict(test, solver.coordinates()), test.labels.double()))
    assert rmse < 0.860


@pytest.mark.parametrize("options, message", [
    (["--model", "lr", "--solver", "mcmc"], "fits the factorization machine (--model fm), not lr"),
    (["--model", "fm", "--solver", "als"], "--solver als fits the squared loss"),
    (["--model", "fm", "--solver", "mcmc", "--l2", "0.1"], "draws its priors' precisions: leave out --l2"),
    (["--model", "fm", "--solver", "mcmc", "--epochs", "5", "--burn-in", "5"], "--burn-in is at least 0 and below"),
])
def test_what_the_coordinate_solvers_cannot_fit_is_refused_before_the_data(options, message, capsys):
    assert main(["train", *options, "--train", "no-such-file.svm"]) == 2
    assert message in capsys.readouterr().err


def test_classes_of_any_two_values_are_mapped_and_more_are_refused(tmp_path, capsys):
    # the label a user effect: the larger value (7), the positive class, for the first 15 users
    rows = ["user,item,label"] + [f"{u},{i},{7 if u < 15 else 2}" for u in range(30) for i in range(10)]
    (tmp_path / "two.csv").write_text("\n".join(rows) + "\n")
    assert main(["train", "--model", "fm", "--solver", "mcmc", "--k", "2", "--epochs", "5", "--train",
                 str(tmp_path / "two.csv"), "--label", "label", "--fields", "user,item"]) == 0
    assert json.loads(capsys.readouterr().out.splitlines()[-1])["valid_auc"] > 0.95
    (tmp_path / "three.csv").write_text("\n".join(rows + ["1,1,9"]) + "\n")
    assert main(["train", "--model", "fm", "--solver", "mcmc", "--epochs", "5", "--train", str(tmp_path / "three.csv"),
                 "--label", "label", "--fields", "user,item"]) == 2
    assert "a binary classifier needs two label values" in capsys.readouterr().err
