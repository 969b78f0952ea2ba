"""The divergence guard (alac.train.divergence): runs whose loss went wrong stop with exit status 3 and the
best earlier parameters, whether the training loss or the validation loss shows it, in the wide and
the field models alike; learning rates that cannot learn are refused before anything is read."""

import json
import math

import numpy as np
import pytest
import torch

from alac.cli.commands import main
from alac.data.arrays import from_csr_arrays
from alac.errors import OptionError
from alac.models import zoo_model
from alac.plan import Plan
from alac.train import checkpoint
from alac.train.deep import DeepSettings
from alac.train.divergence import VALID_FACTOR, ValidationGuard, base_rate_loss
from alac.train.trainer import Trainer, TrainingDiverged


def test_the_validation_rule_against_its_closed_form():
    share = 0.25
    base = -(share * math.log(share) + (1 - share) * math.log(1 - share))
    assert base_rate_loss(True, torch.tensor([1.0, 0, 0, 0]), torch.tensor([1.0, 0, 0, 0])) == pytest.approx(base)
    assert base_rate_loss(False, torch.tensor([1.0, 3.0]), torch.tensor([0.0, 5.0])) == pytest.approx(math.sqrt(6.5))
    guard = ValidationGuard("valid_logloss", base=0.5, start=0.7)
    assert guard.check({"valid_logloss": 0.4}) is None                       # the first epoch: 0.4
    assert guard.check({"valid_logloss": 0.79}) is None                      # below the base rate's 2x, under 2 x 0.4
    assert "more than 2 times the first epoch's" in guard.check({"valid_logloss": 0.81})
    assert "that of predicting the base rate (0.5) and of the starting parameters (0.7)" in \
        guard.check({"valid_logloss": VALID_FACTOR * 0.7 + 1e-9})
    assert guard.check({"valid_logloss": math.nan}) == "validation logloss nan"
    assert guard.check({"train_loss": 9.0}) is None


def _mirrored(rows=512):
    """Training rows where feature 0 means positive and 1 negative; validation rows the other way round:
    the better the model learns, the worse its validation loss (the training loss stays low)."""
    first = np.arange(rows) % 2
    indices = np.stack([first, 2 + np.arange(rows) % 3], axis=1).ravel()
    indptr = np.arange(0, 2 * rows + 1, 2)
    train = from_csr_arrays(indptr, indices, None, np.where(first == 0, 1.0, -1.0), 5)
    valid = from_csr_arrays(indptr, indices, None, np.where(first == 0, -1.0, 1.0), 5)
    return train, valid


def test_a_rising_validation_loss_stops_the_run_and_brings_back_the_best_epoch():
    train, valid = _mirrored()
    options = dict(lr=0.3, plan=Plan(chunk_size=16, batch_size=64), backend="reference", device="cpu",
                   optimizer="sgd")
    trainer = Trainer(zoo_model("lr"), epochs=20, **options)
    with pytest.raises(TrainingDiverged, match=r"diverged in epoch \d+ \(validation logloss .*epoch 1's parameters "
                                               r"\(the lowest validation loss\) are restored"):
        trainer.fit(train, valid)
    assert trainer.stopped_because == "diverged" and trainer.epoch == 1 and len(trainer.history) == 1
    once = Trainer(zoo_model("lr"), epochs=1, **options)
    once.fit(train)
    for name, value in once.executor.state.params.items():
        assert torch.equal(trainer.executor.state.params[name], value)


def test_sgd_at_lr_100_on_a9a_exits_3_with_the_initial_parameters(tmp_path, shared_data, capsys):
    """It used to finish with exit 0 and test logloss 2.2-4.4 (the base rate's: 0.55)."""
    out = tmp_path / "run"
    status = main(["train", "--model", "lr", "--train", str(shared_data / "a9a/a9a"), "--test",
                   str(shared_data / "a9a/a9a.t"), "--optimizer", "sgd", "--lr", "100", "--backend", "reference",
                   "--epochs", "5", "--out", str(out)])
    error = capsys.readouterr().err
    assert status == 3 and "training diverged in epoch 1" in error and "smaller learning rate" in error
    assert "the initial parameters are restored" in error and error.count("\n") == 1
    assert json.loads((out / "metrics.json").read_text())["test_logloss"] == pytest.approx(math.log(2), abs=1e-6)
    assert checkpoint.read(out / "model.alac")["epoch"] == 0


def test_a_table_value_column_left_unscaled_diverges_and_says_to_scale_it(tmp_path, capsys):
    rows = [f"{i % 7},{i % 11},{1 + (i % 7 + i % 11) % 5},{1_500_000_000 + 977 * i}" for i in range(600)]
    (tmp_path / "r.csv").write_text("user,item,rating,time\n" + "\n".join(rows) + "\n")
    common = ["train", "--model", "fm", "--loss", "squared", "--format", "table", "--train", str(tmp_path / "r.csv"),
              "--label", "rating", "--numeric", "time", "--numeric-mode", "value", "--optimizer", "adagrad",
              "--backend", "reference", "--epochs", "3"]
    assert main([*common, "--numeric-scale", "none"]) == 3
    error = capsys.readouterr().err
    assert "training diverged in epoch 1" in error and "--numeric-scale standard" in error
    assert main(common) == 0
    output = capsys.readouterr().out
    assert "time (mean 1.50029e+09, deviation" in output and json.loads(output.splitlines()[-1])["valid_rmse"] < 2


@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf"])
@pytest.mark.parametrize("model, option", [("lr", "--lr"), ("deepfm", "--lr"), ("deepfm", "--dense-lr")])
def test_a_learning_rate_that_cannot_learn_is_refused_up_front(capsys, model, option, value):
    with pytest.raises(SystemExit) as exit:
        main(["train", "--model", model, f"{option}={value}", "--synthetic", "300"])
    assert exit.value.code == 2
    error = capsys.readouterr().err
    assert f"argument {option}: must be a finite number above 0" in error and error.count("\n") == 1


def test_the_python_api_refuses_them_too():
    with pytest.raises(OptionError, match="learning rate must be a finite number above 0, got 0"):
        Trainer(zoo_model("lr"), lr=0, backend="reference")
    with pytest.raises(OptionError, match="lr \\(where given\\) and dense_lr finite numbers > 0"):
        DeepSettings(lr=-1.0)


def test_a_field_model_whose_first_steps_blow_up_exits_3_with_its_initial_weights(tmp_path, shared_data, capsys):
    """DeepFM on the Criteo sample at AdaGrad's wide-model rate: its validation logloss jumps to twice
    the base rate's; the initial weights (the base rate) come back and are written."""
    out = tmp_path / "run"
    status = main(["train", "--model", "deepfm", "--train", str(shared_data / "criteo-tiny/train.txt"), "--lr", "0.2",
                   "--epochs", "3", "--device", "cpu", "--out", str(out)])
    error = capsys.readouterr().err
    assert status == 3 and "diverged in epoch 1 (validation logloss" in error, error
    assert "the initial weights are restored" in error
    assert (out / "model.pt").is_file()
