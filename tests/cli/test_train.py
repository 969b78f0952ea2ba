"""alac train end to end: the a9a acceptance figures, FM on real data, errors."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]


def run_model(model, *args, env=None, check=True):
    environment = dict(os.environ, **(env or {}))
    environment.pop("TRITON_INTERPRET", None)
    result = subprocess.run([sys.executable, "-m", "alac", "train", "--model", model, *args], capture_output=True,
                            text=True, env=environment, cwd=ROOT)
    if check:
        assert result.returncode == 0, result.stderr
    return result


def final_metrics(result):
    return json.loads(result.stdout.strip().splitlines()[-1])


# The interpreter is CI's way to run the generated kernels (newest Triton). On the GPU machine the
# compiled kernels are tested instead: its Triton 3.6 interpreter fails under NumPy 2.5 (it converts
# a 1-element array to an index with int(), which NumPy 2.5 refuses).
BACKENDS = ["reference"] + (["triton"] if torch.cuda.is_available() else ["interpret"])


@pytest.mark.parametrize("backend", BACKENDS)
def test_lr_on_a9a_reaches_the_target(shared_data, backend):
    # the interpreter (a program at a time) trains the generated kernels for 4 epochs with AdaGrad; the
    # reference trains the defaults (the auto race) until early stopping ends it
    interpreted = backend == "interpret"
    result = run_model("lr", "--train", str(shared_data / "a9a/a9a"), "--test", str(shared_data / "a9a/a9a.t"),
                       "--backend", backend, *(["--optimizer", "adagrad", "--epochs", "4"] if interpreted else []))
    metrics = final_metrics(result)
    assert metrics["test_auc"] >= 0.900 and metrics["test_accuracy"] >= 0.845, result.stdout
    epochs = [line for line in result.stdout.splitlines() if line.startswith("epoch")]
    if interpreted:
        assert len(epochs) == 4
    else:
        assert 5 < len(epochs) < 100 and "early stopping (patience)" in result.stdout


@pytest.mark.parametrize("data, options", [
    ("ipinyou/{}.fm.txt", []),
    ("20news/20news.binary.{}.svm", ["--normalize"]),
])
def test_fm_trains_on_real_data_without_diverging(shared_data, data, options):
    train, test = (str(shared_data / data.format(split)) for split in ("train", "test"))
    metrics = final_metrics(run_model("fm", "--train", train, "--test", test, "--backend", "reference",
                                      "--optimizer", "adagrad", "--epochs", "8", *options))
    scores = {k: v for k, v in metrics.items() if k.startswith(("valid_", "test_"))}
    assert scores and all(torch.isfinite(torch.tensor(v)) for v in scores.values())
    assert metrics["test_logloss"] < 0.7


@pytest.mark.parametrize("model", ["lsvm", "lsr", "poisson"])
def test_other_models_run_on_synthetic_data(model):
    metrics = final_metrics(run_model(model, "--synthetic", "3000", "--epochs", "2", "--backend", "reference"))
    scores = {k: v for k, v in metrics.items() if k.startswith(("valid_", "test_"))}
    assert scores and all(torch.isfinite(torch.tensor(v)) for v in scores.values())
    assert metrics["epochs"] == 2 and metrics["stopped_because"] is None


def test_lr_learns_the_synthetic_planted_model():
    metrics = final_metrics(run_model("lr", "--synthetic", "20000", "--epochs", "3", "--backend", "reference"))
    # the planted model's Bayes AUC is above 0.8; 16k rows and 3 epochs reach about 0.70
    assert metrics["test_auc"] > 0.65


def test_bad_file_is_a_clear_error(tmp_path):
    bad = tmp_path / "bad.svm"
    bad.write_text("1 1:1\n-1 2:x\n")
    result = run_model("lr", "--train", str(bad), "--backend", "reference", check=False)
    assert result.returncode == 2 and "line 2" in result.stderr and "Traceback" not in result.stderr


def test_multiclass_labels_are_a_clear_error(tmp_path):
    data = tmp_path / "three.svm"
    data.write_text("1 1:1\n2 2:1\n3 1:1\n")
    result = run_model("lr", "--train", str(data), "--backend", "reference", check=False)
    assert result.returncode == 2 and "two label values" in result.stderr


def test_async_mode_on_a9a(shared_data):
    result = run_model("lr", "--train", str(shared_data / "a9a/a9a"), "--test", str(shared_data / "a9a/a9a.t"),
                       "--backend", "reference", "--mode", "async", "--chunk-size", "128")
    metrics = final_metrics(result)
    assert metrics["test_auc"] >= 0.900 and metrics["test_accuracy"] >= 0.845, result.stdout


def test_async_hot_segment_options():
    """--hot-size and --flush-every reach the plan, and the async hot-segment kernels train."""
    result = run_model("lr", "--synthetic", "3000", "--epochs", "3", "--mode", "async", "--hot-size", "20",
                       "--flush-every", "2", "--chunk-size", "32", "--backend", BACKENDS[-1], "--optimizer", "sgd")
    assert "hot_size=20" in result.stdout and "flush_every=2" in result.stdout, result.stdout
    losses = [float(line.split("train loss")[1].split()[0]) for line in result.stdout.splitlines()
              if line.startswith("epoch")]
    assert len(losses) == 3 and losses[-1] < losses[0], result.stdout


def test_ftrl_with_l1_on_a9a_is_sparse_and_accurate(shared_data):
    # the data README's reference: test AUC 0.9022
    result = run_model("lr", "--train", str(shared_data / "a9a/a9a"), "--test", str(shared_data / "a9a/a9a.t"),
                       "--backend", "reference", "--optimizer", "ftrl", "--lr", "1", "--l1", "0.02",
                       "--beta", "1", "--epochs", "12")
    metrics = final_metrics(result)
    assert metrics["test_auc"] >= 0.9022 - 0.003 and metrics["zero_share"] > 0.1, result.stdout
    assert "exactly-zero weights" in result.stdout


@pytest.mark.gpu      # 20 s on CI's two cores: run with the GPU suite
def test_ftrl_with_l1_on_20news_is_sparse_and_accurate(shared_data):
    # the data README's reference (rows L2-normalised): test AUC 0.9678
    result = run_model("lr", "--train", str(shared_data / "20news/20news.binary.train.svm"),
                       "--test", str(shared_data / "20news/20news.binary.test.svm"), "--normalize",
                       "--backend", "reference", "--optimizer", "ftrl", "--lr", "30", "--l1", "0.003", "--beta", "1",
                       "--batch-size", "32", "--epochs", "12", "--early-stopping", "none")
    metrics = final_metrics(result)
    assert metrics["test_auc"] >= 0.9678 - 0.003 and metrics["zero_share"] > 0.2, result.stdout


@pytest.mark.gpu      # 28 s on CI's two cores: run with the GPU suite
def test_fm_with_defaults_beats_ridge_on_movielens(shared_data):
    """FM regression on user and movie ids with `alac train`'s defaults against scikit-learn's Ridge on
    the same one-hot ids (alpha chosen on validation rows, as benchmarks/defaults.py does): the
    interactions must pay. A random 90/10 split, seed 0."""
    from alac.models import zoo_module
    from benchmarks.defaults import load_sets, ridge_baseline, train_once

    train, test = load_sets(shared_data, ["ml-latest-small"])["ml-latest-small"]
    final, _, epochs, _, diverged, _ = train_once(zoo_module("fm"), ["--loss", "squared"], train, test, "reference")
    ridge = ridge_baseline(train, test)
    assert not diverged and final["rmse"] < ridge["rmse"] - 0.005, (final, ridge, epochs)
