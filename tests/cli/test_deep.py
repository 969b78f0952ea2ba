"""`alac train --model deepfm|wide_deep` (alac.cli.deep): trains from files and the synthetic set,
writes a checkpoint that loads without running code and predicts as the trained model did, and refuses
data without fields in one line."""

import json
import pickle

import pytest
import torch

from alac import metrics
from alac.cli.commands import main
from alac.data import write_libsvm
from alac.data.split import split
from alac.data.synthetic import criteo_like
from alac.errors import OptionError
from alac.train.deep import DeepTrainer

SMALL = ["--k", "4", "--hidden", "8", "--batch-size", "256", "--device", "cpu"]


def test_the_synthetic_set_trains_and_the_checkpoint_predicts_its_test_metrics(tmp_path, capsys):
    assert main(["train", "--model", "deepfm", "--synthetic", "3000", "--epochs", "2", *SMALL,
                 "--out", str(tmp_path)]) == 0
    output = capsys.readouterr().out
    assert "epoch   1" in output and "deepfm: synthetic Criteo-shaped" in output
    final = json.loads((tmp_path / "metrics.json").read_text())
    assert {"valid_logloss", "valid_auc", "test_logloss", "test_auc"} <= set(final)
    assert (tmp_path / "history.csv").read_text().startswith("epoch,")
    trainer = DeepTrainer.load(tmp_path / "model.pt", device="cpu")
    _, _, test = split(criteo_like(3000, seed=0, device="cpu"), (0.8, 0.1, 0.1), seed=0)
    probability = trainer.predict(test)
    assert float(metrics.auc(probability, test.labels > 0.5)) == pytest.approx(final["test_auc"], abs=1e-6)
    assert final["epochs"] == 2 and final["stopped_because"] is None       # the wide models' keys too
    # export: the network's tensors, no text form
    assert main(["export", "--model-dir", str(tmp_path), "--numpy", str(tmp_path / "deep.npz")]) == 0
    archive = __import__("numpy").load(tmp_path / "deep.npz")
    state = trainer.network.state_dict()
    assert sorted(archive.files) == sorted(name.replace(".", "/") for name in state)
    for name, value in state.items():
        assert (archive[name.replace(".", "/")] == value.cpu().numpy()).all()
    assert main(["export", "--model-dir", str(tmp_path), "--readable", str(tmp_path / "m.txt")]) == 2
    assert "has no text form of one weight per feature: export its tensors with --numpy" in capsys.readouterr().err


def test_one_hot_libsvm_rows_take_fields_by_position_and_rows_without_fields_are_refused(tmp_path, capsys):
    data = criteo_like(1500, n_fields=5, seed=2, device="cpu")
    write_libsvm(data, tmp_path / "train.txt")
    assert main(["train", "--model", "wide_deep", "--train", str(tmp_path / "train.txt"), "--fields-by-position",
                 "--epochs", "1", *SMALL]) == 0
    capsys.readouterr()
    assert main(["train", "--model", "wide_deep", "--train", str(tmp_path / "train.txt"), "--epochs", "1",
                 *SMALL]) == 2
    error = capsys.readouterr().err
    assert error.startswith("alac: error:") and "no field ids" in error and len(error.strip().splitlines()) == 1
    assert main(["train", "--model", "deepfm", "--hidden", "8,x", "--device", "cpu"]) == 2
    assert "--hidden takes integers" in capsys.readouterr().err
    assert main(["train", "--model", "deepfm", "--featindex", str(tmp_path / "absent.txt"), *SMALL]) == 2
    assert "no field index file there" in capsys.readouterr().err


def test_a_checkpoint_that_is_not_one_is_refused_without_running_it(tmp_path):
    class Runs:
        def __reduce__(self):
            return (print, ("ran",))

    (tmp_path / "model.pt").write_bytes(pickle.dumps({"settings": Runs()}))
    with pytest.raises(OptionError, match="not a deep model checkpoint"):
        DeepTrainer.load(tmp_path / "model.pt")
    torch.save({"settings": {}}, tmp_path / "other.pt")
    with pytest.raises(OptionError, match="other.pt: not a deep model checkpoint"):
        DeepTrainer.load(tmp_path / "other.pt")


@pytest.mark.parametrize("extras, message", [
    ({"data_options": {"format": "table", "table": {"label": "x"}}}, "a damaged table encoding"),
    ({"field_of": "zzz"}, "its field map is a str, not a 1-D integer tensor"),
    ({"field_of": torch.ones(3)}, "its field map is a Tensor, not a 1-D integer tensor"),
    ("zzz", "its extras are a str"),
])
def test_a_deep_checkpoint_with_malformed_extras_is_one_clear_error(tmp_path, capsys, extras, message):
    assert main(["train", "--model", "deepfm", "--synthetic", "800", "--epochs", "1", *SMALL,
                 "--out", str(tmp_path / "run")]) == 0
    saved = torch.load(tmp_path / "run" / "model.pt", weights_only=True)
    saved["extras"] = extras
    torch.save(saved, tmp_path / "run" / "model.pt")
    capsys.readouterr()
    (tmp_path / "data.svm").write_text("1 1:1\n")
    assert main(["predict", "--model-dir", str(tmp_path / "run"), "--data", str(tmp_path / "data.svm"),
                 "--output", str(tmp_path / "p.txt")]) == 2
    error = capsys.readouterr().err
    assert f"model.pt: a damaged deep model checkpoint: {message}" in error and error.count("\n") == 1, error


def test_alac_predict_reads_a_new_file_as_the_training_file_was_read(tmp_path, capsys):
    data = criteo_like(1200, n_fields=5, seed=3, device="cpu")
    train, test = split(data, (0.8, 0.2), seed=1)
    write_libsvm(train, tmp_path / "train.txt")
    write_libsvm(test, tmp_path / "test.txt")
    assert main(["train", "--model", "ffm", "--train", str(tmp_path / "train.txt"), "--test",
                 str(tmp_path / "test.txt"), "--fields-by-position", "--epochs", "2", *SMALL,
                 "--out", str(tmp_path / "model")]) == 0
    final = json.loads((tmp_path / "model" / "metrics.json").read_text())
    assert main(["predict", "--model-dir", str(tmp_path / "model"), "--data", str(tmp_path / "test.txt"),
                 "--output", str(tmp_path / "predictions.txt")]) == 0
    assert "predictions (probability)" in capsys.readouterr().err
    predictions = torch.tensor([float(line) for line in (tmp_path / "predictions.txt").read_text().split()])
    assert predictions.numel() == test.n_rows
    # the test metrics alac train printed are those of these predictions
    assert float(metrics.auc(predictions, test.labels > 0.5)) == pytest.approx(final["test_auc"], abs=1e-6)


def test_dlrm_trains_on_a_tables_numeric_columns_as_dense_features(tmp_path, capsys):
    generator = torch.Generator().manual_seed(0)
    rows = 800
    colour, shape, size = (torch.randint(0, n, (rows,), generator=generator) for n in (5, 4, 1))
    size = torch.randn(rows, generator=generator)
    labels = (torch.rand(rows, generator=generator) < torch.sigmoid(2 * size + (colour == 1).float())).int()
    lines = ["label,colour,shape,size"] + [f"{int(y)},c{int(c)},s{int(s)},{float(z):.4f}"
                                           for y, c, s, z in zip(labels, colour, shape, size)]
    (tmp_path / "train.csv").write_text("\n".join(lines) + "\n")
    table = ["--format", "table", "--label", "label", "--numeric", "size", "--numeric-mode", "value"]
    assert main(["train", "--model", "dlrm", "--train", str(tmp_path / "train.csv"), *table, "--dense-fields", "2",
                 "--epochs", "2", *SMALL, "--out", str(tmp_path / "model")]) == 0
    assert main(["predict", "--model-dir", str(tmp_path / "model"), "--data", str(tmp_path / "train.csv"),
                 "--output", str(tmp_path / "predictions.txt")]) == 0
    assert len((tmp_path / "predictions.txt").read_text().split()) == rows
    capsys.readouterr()
    assert main(["train", "--model", "dlrm", "--train", str(tmp_path / "train.csv"), *table, *SMALL]) == 2
    assert "dlrm needs dense features" in capsys.readouterr().err


def test_the_field_models_are_named_alike_everywhere_and_inspect_points_to_alac_train(capsys):
    from alac.models import FIELD_MODELS
    from alac.train.deep import DEEP_MODELS

    assert sorted(DEEP_MODELS) == sorted(FIELD_MODELS)
    assert main(["inspect", "--model", "dlrm"]) == 2
    assert "field model" in capsys.readouterr().err


def test_interleaving_from_the_command_line_trains_the_same_steps(tmp_path, capsys):
    """--micro-batches and --side-stream (PICASSO's D- and K-interleaving) schedule a step, not change
    it: the run ends where the plain one does."""
    runs = {}
    for name, options in (("plain", []), ("interleaved", ["--micro-batches", "3", "--side-stream"])):
        assert main(["train", "--model", "deepfm", "--synthetic", "1500", "--epochs", "2", *SMALL, *options,
                     "--out", str(tmp_path / name)]) == 0
        runs[name] = json.loads((tmp_path / name / "metrics.json").read_text())
    for key in ("valid_logloss", "test_logloss", "test_auc"):
        assert runs["interleaved"][key] == pytest.approx(runs["plain"][key], abs=1e-5)


def test_tables_over_the_gpu_budget_train_from_host_memory_to_the_same_model(tmp_path, capsys):
    """--gpu-memory below the tables' size: the rows in host memory, the most read cached (the run says
    so), the same steps as with every row on the device."""
    runs = {}
    for name, options in (("device", []), ("host", ["--gpu-memory", "6.2MB"])):
        assert main(["train", "--model", "deepfm", "--synthetic", "1500", "--epochs", "2", *SMALL, "--batch-size",
                     "64", *options, "--out", str(tmp_path / name)]) == 0
        runs[name] = json.loads((tmp_path / name / "metrics.json").read_text())
        if options:
            assert "tables in host memory, " in capsys.readouterr().out
    for key in ("valid_logloss", "test_logloss", "test_auc"):
        assert runs["host"][key] == pytest.approx(runs["device"][key], abs=1e-5)
    assert main(["train", "--model", "deepfm", "--synthetic", "1500", *SMALL, "--gpu-memory", "400KB"]) == 2
    assert "cannot hold the host tables' cache" in capsys.readouterr().err
