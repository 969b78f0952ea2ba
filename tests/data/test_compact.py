"""Feature spaces that follow the ids the data uses (alac.data.compact): a file with a few huge ids
trains in memory of its rows, not of its largest id, and predictions and exports speak its ids."""

import json

import numpy as np
import pytest
import torch

from alac.cli.commands import main
from alac.data import load_libsvm, load_libsvm_files
from alac.data.compact import compact_feature_ids
from alac.data.field_map import from_positions
from alac.train import checkpoint


def test_a_sparse_space_is_renumbered_densely_and_a_dense_one_is_left_alone(tmp_path):
    (tmp_path / "a.svm").write_text("1 3:1 100000000:2\n-1 5:1\n")
    (tmp_path / "b.svm").write_text("1 7:1 3:1\n")
    (a, b), renumbered = compact_feature_ids(load_libsvm_files([tmp_path / "a.svm", tmp_path / "b.svm"]))
    assert renumbered and a.n_features == b.n_features == 4
    assert a.feature_ids.tolist() == [2, 4, 6, 99999999]          # 0-based ids of the files' 1-based ones
    assert a.original_ids().tolist() == [2, 99999999, 4] and b.original_ids().tolist() == [6, 2]
    assert a.values.tolist() == [1, 2, 1]
    # another numbering: ids the space has not (the file's 8) go one past it, for the caller to leave out
    (tmp_path / "c.svm").write_text("0 8:1 5:1\n")
    c = load_libsvm(tmp_path / "c.svm").in_space_of(a.feature_ids)
    assert c.indices.tolist() == [4, 1] and c.n_features == 5
    dense = load_libsvm_files([tmp_path / "b.svm"])
    assert compact_feature_ids(dense) == (dense, False)


def test_a_file_with_an_id_of_a_hundred_million_trains_predicts_and_exports_its_ids(tmp_path, capsys):
    """Three lines used to take 5.2 GB and 33 s before training (tables of 10^8 rows)."""
    (tmp_path / "train.svm").write_text("1 3:1 100000000:1\n-1 5:1\n1 3:1 7:1\n")
    (tmp_path / "new.svm").write_text("1 100000000:1\n0 9:1 5:1\n")
    out = tmp_path / "run"
    assert main(["train", "--model", "lr", "--train", str(tmp_path / "train.svm"), "--optimizer", "adagrad",
                 "--epochs", "3", "--early-stopping", "none", "--backend", "reference", "--out", str(out)]) == 0
    assert "ids renumbered densely: the 4 used of 100,000,000" in capsys.readouterr().out
    saved = checkpoint.read(out / "model.alac")
    assert saved["feature_order"].numel() == 4 and saved["params"]["w"].numel() == 4
    assert saved["feature_ids"].tolist() == [2, 4, 6, 99999999]
    assert main(["export", "--model-dir", str(out), "--readable", str(tmp_path / "m.txt"), "--numpy",
                 str(tmp_path / "m.npz")]) == 0
    lines = (tmp_path / "m.txt").read_text().splitlines()
    weights = {int(line.split()[0]): float(line.split()[1]) for line in lines if not line.startswith("#")}
    assert sorted(weights) == [3, 5, 7, 100000000]
    # both files in the training file's 1-based ids, each saying so
    assert "ids 1-based" in lines[0] and "feature ids as in the training files (1-based)" in capsys.readouterr().out
    archive = np.load(tmp_path / "m.npz")
    assert archive["feature_id"].tolist() == [3, 5, 7, 100000000] and int(archive["id_base"]) == 1
    np.testing.assert_allclose(archive["w"], [weights[i] for i in archive["feature_id"]], rtol=1e-6)
    assert main(["predict", "--model-dir", str(out), "--data", str(tmp_path / "new.svm"), "--output",
                 str(tmp_path / "p.txt"), "--backend", "reference"]) == 0
    assert "1 entries of" in capsys.readouterr().err          # feature 9: never trained, ignored
    trainer = checkpoint.load(out / "model.alac", __import__("alac.models").models.zoo_model("lr"),
                              backend="reference")
    b = float(saved["globals"]["b"])
    expected = torch.sigmoid(torch.tensor([weights[100000000] + b, weights[5] + b]))
    np.testing.assert_allclose(np.loadtxt(tmp_path / "p.txt"), expected.numpy(), rtol=1e-5)
    assert trainer.n_features == 4


def test_fields_by_position_of_a_renumbered_set_apply_to_a_file_of_the_original_ids(tmp_path):
    (tmp_path / "t.svm").write_text("1 5:1 2000000:1\n0 6:1 2000001:1\n")
    (train,), renumbered = compact_feature_ids([load_libsvm(tmp_path / "t.svm")])
    fields = from_positions(train)
    assert renumbered and fields.feature_ids is not None
    (tmp_path / "p.svm").write_text("1 6:1 2000000:1\n0 7:1 2000001:1\n")
    applied = fields.apply(load_libsvm(tmp_path / "p.svm"), unlisted_ok=True)
    assert applied.fields.tolist() == [0, 1, -1, 1]


@pytest.mark.parametrize("model, options", [("ffm", []), ("deepfm", ["--hash-bits", "16"])])
def test_field_models_train_on_a_criteo_file_with_defaults(tmp_path, shared_data, capsys, model, options):
    """FFM was refused (95.5 GiB of field tables for 2^20 ids a field); with 16 hash bits FFM and DeepFM
    diverged (validation logloss 9.5 and 13.6)."""
    path = shared_data / "criteo-tiny/train.txt"
    out = tmp_path / "run"
    assert main(["train", "--model", model, "--train", str(path), *options, "--epochs", "2", "--device", "cpu",
                 "--out", str(out)]) == 0
    output = capsys.readouterr().out
    assert "ids renumbered densely" in output
    assert json.loads((out / "metrics.json").read_text())["valid_logloss"] < 0.6
    assert main(["predict", "--model-dir", str(out), "--data", str(path), "--output", str(tmp_path / "p.txt")]) == 0
    predictions = np.loadtxt(tmp_path / "p.txt")
    assert predictions.shape == (1000,) and ((predictions > 0) & (predictions < 1)).all()
