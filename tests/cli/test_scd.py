"""`alac train --solver scd` (alac.cli.scd) and the SCD solvers on the shared data: the optimum
of L2-regularized logistic regression the data README gives, LIBLINEAR's SVM, clear errors."""

import json

import numpy as np
import pytest
import torch

from alac import metrics
from alac.cli.commands import main
from alac.data import load_libsvm
from alac.runtime.solvers.scd import ScdSolver, with_constant_feature


def test_logistic_regression_by_scd_reaches_the_a9a_optimum(shared_data, tmp_path, capsys):
    """The data README: a9a -> a9a.t at lambda = 1 (summed loss; 1/N of the mean): test AUC 0.9022,
    logloss 0.3241, accuracy 0.8497."""
    folder = shared_data / "a9a"
    out = tmp_path / "run"
    assert main(["train", "--model", "lr", "--solver", "scd", "--train", str(folder / "a9a"), "--test",
                 str(folder / "a9a.t"), "--valid-split", "0", "--epochs", "100", "--tol", "1e-7", "--out",
                 str(out)]) == 0
    printed = capsys.readouterr().out
    assert printed.startswith("alac: lr by stochastic coordinate descent (dual logistic") and "epoch 1: gap" in printed
    final = json.loads((out / "metrics.json").read_text())
    assert final["duality_gap"] <= 1e-7 and final["stopped_because"] == "tol"
    assert final["test_auc"] == pytest.approx(0.9022, abs=0.001)
    assert final["test_logloss"] == pytest.approx(0.3241, abs=0.001)
    assert final["test_accuracy"] == pytest.approx(0.8497, abs=0.002)
    history = (out / "history.csv").read_text().splitlines()
    assert history[0] == "epoch,gamma,gap,in_flight,seconds,undone" and len(history) == final["epochs"] + 1
    weights = np.load(out / "weights.npy", allow_pickle=False)
    assert weights.shape == (124,)        # 123 features and the intercept
    # the checkpoint is the zoo model's: alac predict reads it and scores the test rows as training did
    assert main(["predict", "--model-dir", str(out), "--data", str(folder / "a9a.t"), "--output",
                 str(tmp_path / "predictions.txt"), "--backend", "reference"]) == 0
    predicted = torch.from_numpy(np.loadtxt(tmp_path / "predictions.txt"))
    test = load_libsvm(folder / "a9a.t", n_features=123)
    # float32 scores against training's float64 ones: a few near-equal pairs may swap (1e-6 of the AUC on an H200)
    assert metrics.auc(predicted, test.labels > 0) == pytest.approx(final["test_auc"], abs=1e-5)
    assert metrics.logloss(predicted, test.labels > 0) == pytest.approx(final["test_logloss"], abs=1e-5)


def _split_w8a(shared_data):
    data = load_libsvm(shared_data / "w8a" / "w8a")
    rows = torch.arange(data.n_rows)
    return data.take(rows[rows % 5 != 4]), data.take(rows[rows % 5 == 4])


def _test_auc(solver, test):
    test = with_constant_feature(test)
    matrix = torch.sparse_csr_tensor(test.indptr, test.indices.long(), test.values.double(),
                                     (test.n_rows, test.n_features))
    return metrics.auc(matrix @ solver.coef_.cpu(), test.labels > 0)


def test_dual_logistic_reaches_the_w8a_optimum(shared_data):
    train, test = _split_w8a(shared_data)
    solver = ScdSolver(with_constant_feature(train), "dual", "logistic", l2=1 / train.n_rows).fit(200, 1e-8)
    assert solver.history[-1]["gap"] <= 1e-8
    assert _test_auc(solver, test) == pytest.approx(0.9546, abs=0.001)


@pytest.mark.filterwarnings("ignore:Liblinear failed to converge")
def test_the_dual_svm_reaches_liblinears_test_auc_on_a9a(shared_data):
    from sklearn.svm import LinearSVC

    folder = shared_data / "a9a"
    train, test = (load_libsvm(folder / name, n_features=123) for name in ("a9a", "a9a.t"))
    solver = ScdSolver(with_constant_feature(train), "dual", "hinge", l2=1 / train.n_rows).fit(300, 1e-6)
    dense = [torch.sparse_csr_tensor(d.indptr, d.indices.long(), torch.ones(d.indices.numel()),
                                     (d.n_rows, 123)).to_dense().numpy() for d in (train, test)]
    theirs = LinearSVC(C=1.0, loss="hinge", dual=True, tol=1e-8, max_iter=100_000, random_state=0)
    theirs.fit(dense[0], train.labels.numpy())
    expected = metrics.auc(torch.from_numpy(theirs.decision_function(dense[1])), test.labels > 0)
    assert _test_auc(solver, test) == pytest.approx(expected, abs=0.001)


@pytest.mark.parametrize("options,message", [
    (["--model", "fm"], "fits the linear models lr, lsvm, lsr, not fm"),
    (["--model", "lr", "--l1", "0.01"], "takes --l2 > 0 and no --l1"),
    (["--model", "lsvm", "--l2", "0"], "takes --l2 > 0 and no --l1"),
    (["--model", "lsr", "--tol", "0"], "--tol > 0"),
])
def test_what_scd_cannot_fit_is_refused_before_reading_data(options, message, capsys):
    assert main(["train", *options, "--solver", "scd", "--train", "/nonexistent/file.svm"]) == 2
    assert message in capsys.readouterr().err


def test_least_squares_on_fewer_rows_than_features_solves_the_dual(shared_data, capsys):
    news = shared_data / "20news"
    assert main(["train", "--model", "lsr", "--solver", "scd", "--train", str(news / "20news.binary.train.svm"),
                 "--normalize", "--valid-split", "0", "--epochs", "60", "--tol", "1e-6"]) == 0
    printed = capsys.readouterr().out
    assert "(dual squared, lambda" in printed.splitlines()[0]
    assert json.loads(printed.splitlines()[-1])["duality_gap"] <= 1e-6


def test_virtual_workers_and_their_aggregation_are_options_of_the_command_line(tmp_path, capsys):
    """--scd-workers K: CoCoA's K virtual workers in one process (--scd-aggregation: how their changes
    combine); the plane search takes least squares to the gap, said in the first line."""
    from alac.cli.commands import main

    assert main(["train", "--model", "lsr", "--solver", "scd", "--synthetic", "2000", "--backend", "reference",
                 "--l2", "0.01", "--epochs", "300", "--tol", "1e-6", "--scd-workers", "4", "--out",
                 str(tmp_path / "run")]) == 0
    out = capsys.readouterr().out
    assert "4 virtual workers each stepping its share of the rows (CoCoA, subspace aggregation)" in out
    final = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert final["stopped_because"] == "tol" and final["duality_gap"] <= 1e-6
    assert main(["train", "--model", "lr", "--solver", "scd", "--synthetic", "2000", "--backend", "reference",
                 "--scd-workers", "2", "--scd-aggregation", "subspace"]) == 2
    assert "subspace aggregation searches the squared loss's objective" in capsys.readouterr().err
