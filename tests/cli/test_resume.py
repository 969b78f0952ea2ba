"""`alac train --resume DIR` (alac.cli.resume): a run continued from its output folder ends bit for bit where
one uninterrupted run of as many epochs ends, for the SGD models (early stopping across the break, the
race's choice kept), coordinate descent and the field models; a resume on other data, with options that
would change the run, or of a run with nothing left to do is refused in one line."""

import csv
import json

import numpy as np
import pytest
import torch

from alac.cli.commands import main


@pytest.fixture(autouse=True)
def _on_the_cpu(monkeypatch):
    """Bit for bit where training is deterministic: on the CPU (a GPU's atomic additions and reductions
    round in another order from run to run; test_a_resume_on_a_gpu_goes_on_where_the_run_stopped)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)


def _history(folder):
    with open(folder / "history.csv") as handle:
        return [{k: v for k, v in row.items() if k not in ("seconds", "rows_per_s", "valid_seconds")}
                for row in csv.DictReader(handle)]


def _same_runs(first, second, checkpoint="model.alac"):
    one, two = (torch.load(folder / checkpoint, weights_only=True) for folder in (first, second))
    assert _history(first) == _history(second)
    assert json.loads((first / "metrics.json").read_text()) == json.loads((second / "metrics.json").read_text())
    return one, two


def _equal_tensors(one, two):
    assert one.keys() == two.keys()
    for name in one:
        assert torch.equal(one[name], two[name]), name


SGD = ["train", "--model", "lr", "--synthetic", "3000", "--optimizer", "sgd", "--lr", "2", "--patience", "2",
       "--backend", "reference"]


def test_an_sgd_run_resumed_across_early_stopping_ends_as_one_run(tmp_path, capsys):
    """Uninterrupted: early stopping ends the run at epoch 9, keeping epoch 7. Broken after epoch 8 (its
    checkpoint holds epoch 7's parameters and epoch 8's to continue from), the resume stops at the same
    epoch with the same parameters: patience counts across the break."""
    whole, part = tmp_path / "whole", tmp_path / "part"
    assert main([*SGD, "--epochs", "30", "--out", str(whole)]) == 0
    assert main([*SGD, "--epochs", "8", "--out", str(part)]) == 0
    saved = torch.load(part / "model.alac", weights_only=True)
    assert saved["epoch"] == 7 and saved["last"]["epoch"] == 8 and saved["training"]["best_epoch"] == 7
    capsys.readouterr()
    assert main(["train", "--resume", str(part), "--epochs", "30"]) == 0
    output = capsys.readouterr().out
    assert "resuming lr after epoch 8" in output and "stopped after epoch 9: early stopping (patience)" in output
    one, two = _same_runs(whole, part)
    for part_name in ("params", "globals", "states"):
        _equal_tensors(one[part_name], two[part_name])
    assert one["epoch"] == two["epoch"] == 7 and one["batches_done"] == two["batches_done"]
    # the run stopped early: there is nothing left to continue
    assert main(["train", "--resume", str(part), "--epochs", "40"]) == 2
    assert "stopped after epoch 9 by early stopping (patience): there is nothing to continue" in capsys.readouterr().err


def test_a_raced_run_resumes_with_the_optimizer_the_race_kept(tmp_path, capsys):
    common = ["train", "--model", "lr", "--synthetic", "2000", "--backend", "reference", "--early-stopping", "none"]
    whole, part = tmp_path / "whole", tmp_path / "part"
    assert main([*common, "--epochs", "4", "--valid-split", "0.1", "--out", str(whole)]) == 0
    capsys.readouterr()
    assert main([*common, "--epochs", "2", "--out", str(part)]) == 0
    assert main(["train", "--resume", str(part), "--epochs", "4", "--out", str(tmp_path / "more")]) == 0
    output = capsys.readouterr().out
    assert "optimizer auto" not in output.split("resuming")[1]          # no second race
    one, two = _same_runs(whole, tmp_path / "more")
    _equal_tensors(one["params"], two["params"])
    assert (part / "model.alac").is_file() and _history(part) != _history(tmp_path / "more")


def test_a_resume_is_refused_on_other_data_with_other_options_or_with_nothing_to_do(tmp_path, capsys):
    data = tmp_path / "train.svm"
    data.write_text("".join(f"{1 if i % 3 else -1} {1 + i % 7}:1 {8 + i % 5}:1\n" for i in range(300)))
    out = tmp_path / "run"
    assert main(["train", "--model", "lr", "--train", str(data), "--epochs", "3", "--early-stopping", "none",
                 "--backend", "reference", "--out", str(out)]) == 0
    capsys.readouterr()
    cases = [(["--epochs", "3"], "has trained 3 epochs, its --epochs 3: nothing to resume; give --epochs above 3"),
             (["--epochs", "5", "--lr", "0.1"], "--lr 0.1: a resume continues a run as it was made"),
             (["--resume", str(tmp_path)], "no checkpoint to resume there")]
    for extra, message in cases:
        assert main(["train", "--resume", str(out), *extra]) == 2
        error = capsys.readouterr().err
        assert message in error and error.count("\n") == 1, error
    data.write_text(data.read_text() + "1 3:1\n")
    assert main(["train", "--resume", str(out), "--epochs", "5"]) == 2
    assert "whose content has changed since: a resume continues on the same data" in capsys.readouterr().err


def test_coordinate_descent_resumed_ends_as_one_run(tmp_path):
    common = ["train", "--model", "lsr", "--solver", "scd", "--synthetic", "1500", "--l2", "0.01", "--tol", "1e-14",
              "--backend", "reference"]
    whole, part = tmp_path / "whole", tmp_path / "part"
    assert main([*common, "--epochs", "6", "--out", str(whole)]) == 0
    assert main([*common, "--epochs", "3", "--out", str(part)]) == 0
    assert main(["train", "--resume", str(part), "--epochs", "6"]) == 0
    assert _history(whole) == _history(part)
    np.testing.assert_array_equal(np.load(whole / "weights.npy"), np.load(part / "weights.npy"))
    one, two = (torch.load(folder / "model.alac", weights_only=True)["scd"] for folder in (whole, part))
    assert one["epochs"] == two["epochs"] == 6 and torch.equal(one["coordinates"], two["coordinates"])


def test_a_field_model_resumed_ends_as_one_run(tmp_path):
    common = ["train", "--model", "deepfm", "--synthetic", "2000", "--k", "4", "--hidden", "8", "--batch-size", "256",
              "--device", "cpu", "--patience", "5"]
    whole, part = tmp_path / "whole", tmp_path / "part"
    assert main([*common, "--epochs", "4", "--out", str(whole)]) == 0
    assert main([*common, "--epochs", "2", "--out", str(part)]) == 0
    assert main(["train", "--resume", str(part), "--epochs", "4"]) == 0
    one, two = _same_runs(whole, part, "model.pt")
    _equal_tensors(one["weights"], two["weights"])


def test_a_checkpoint_loaded_in_python_predicts_its_best_epoch_and_fits_on_as_the_run_would(tmp_path):
    """checkpoint.load keeps early stopping's settings (it used to drop them: epoch 10 kept where the
    uninterrupted run kept 9) and its next fit goes on from the last epoch, not the kept one."""
    from alac.data.split import split
    from alac.data.synthetic import criteo_like
    from alac.models import zoo_model
    from alac.train import checkpoint

    whole, part = tmp_path / "whole", tmp_path / "part"
    assert main([*SGD, "--epochs", "30", "--out", str(whole)]) == 0
    assert main([*SGD, "--epochs", "8", "--out", str(part)]) == 0
    train, valid, test = split(criteo_like(3000, seed=0), (0.8, 0.1, 0.1), seed=0)
    trainer = checkpoint.load(part / "model.alac", zoo_model("lr"), backend="reference")
    assert trainer.early_stopping == "patience" and trainer.patience == 2 and trainer.epoch == 7
    expected = json.loads((part / "metrics.json").read_text())["test_logloss"]
    assert trainer.evaluate(test)["logloss"] == pytest.approx(expected, abs=1e-6)
    trainer.fit(train, valid, epochs=22, report=test)
    uninterrupted = torch.load(whole / "model.alac", weights_only=True)
    assert trainer.epoch == uninterrupted["epoch"] == 7 and trainer.stopped_because == "early stopping (patience)"
    _equal_tensors({k: v.cpu() for k, v in trainer.executor.state.params.items()}, uninterrupted["params"])


@pytest.mark.gpu
def test_a_resume_on_a_gpu_goes_on_where_the_run_stopped(tmp_path, monkeypatch):
    """The generated kernels on a GPU: the resumed run's epochs are the uninterrupted run's, to the
    rounding of the atomic additions."""
    monkeypatch.undo()
    common = ["train", "--model", "fm", "--synthetic", "20000", "--optimizer", "adagrad", "--early-stopping", "none"]
    whole, part = tmp_path / "whole", tmp_path / "part"
    assert main([*common, "--epochs", "4", "--out", str(whole)]) == 0
    assert main([*common, "--epochs", "2", "--out", str(part)]) == 0
    assert main(["train", "--resume", str(part), "--epochs", "4"]) == 0
    for one, two in zip(_history(whole), _history(part)):
        assert one["epoch"] == two["epoch"]
        assert float(one["valid_logloss"]) == pytest.approx(float(two["valid_logloss"]), rel=1e-4)
