"""Checkpoints hold data, never code: a crafted file is refused before anything in it runs."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from alac.data.synthetic import criteo_like
from alac.models import zoo_model
from alac.plan import Plan
from alac.train import checkpoint
from alac.train.checkpoint import CheckpointError
from alac.train.trainer import Trainer


def _saved(tmp_path, spec=None):
    trainer = Trainer(zoo_model("lr"), lr=1.0, plan=Plan(chunk_size=16, batch_size=256), backend="reference",
                      device="cpu")
    trainer.fit(criteo_like(500, device="cpu"), epochs=1)
    path = tmp_path / "model.alac"
    checkpoint.save(trainer, path, spec or {"model": "lr", "arguments": {}})
    return path


def _alac(*args, cwd=None):
    environment = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    return subprocess.run([sys.executable, "-m", "alac", *args], capture_output=True, text=True, env=environment,
                          cwd=cwd)


class _RunsCode:
    """Unpickling this calls os.system: what a crafted checkpoint would do."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


def test_a_pickle_that_would_run_code_is_refused_and_nothing_runs(tmp_path):
    marker = tmp_path / "ran"
    payload = torch.load(_saved(tmp_path), weights_only=True)
    payload["history"] = [_RunsCode(marker)]
    torch.save(payload, tmp_path / "evil.alac")
    with pytest.raises(CheckpointError) as error:
        checkpoint.read(tmp_path / "evil.alac")
    assert "refused" in str(error.value) and "\n" not in str(error.value)
    assert not marker.exists()
    result = _alac("predict", "--model-dir", str(tmp_path / "evil.alac"), "--data", "x.svm",
                   "--output", str(tmp_path / "p.txt"))
    assert result.returncode == 2 and result.stderr.count("\n") == 1 and "refused" in result.stderr
    assert not marker.exists()


def _model_file(tmp_path, marker):
    """A user model file that leaves a marker each time it is executed."""
    path = tmp_path / "my_lr.py"
    path.write_text(textwrap.dedent(f"""
        from pathlib import Path
        from alac.models.lr import LogisticRegression as MODEL
        Path({str(marker)!r}).write_text("ran")
        DEFAULT_LR = 1.0
    """))
    return path


def test_a_checkpoint_never_runs_the_file_it_names(tmp_path, shared_data):
    marker = tmp_path / "ran"
    model_file = _model_file(tmp_path, marker)
    out = tmp_path / "run"
    a9a = str(shared_data / "a9a/a9a")
    result = _alac("train", "--model", str(model_file), "--train", a9a, "--epochs", "1", "--backend", "reference",
                   "--out", str(out))
    assert result.returncode == 0, result.stderr
    assert marker.exists()       # the user named the file on the command line: it ran
    marker.unlink()
    result = _alac("predict", "--model-dir", str(out), "--data", a9a, "--output", str(tmp_path / "p.txt"),
                   "--backend", "reference")
    assert result.returncode == 2 and result.stderr.count("\n") == 1
    assert f"pass --model {model_file}" in result.stderr and not marker.exists()
    result = _alac("predict", "--model-dir", str(out), "--model", str(model_file), "--data", a9a,
                   "--output", str(tmp_path / "p.txt"), "--backend", "reference")
    assert result.returncode == 0, result.stderr
    assert len((tmp_path / "p.txt").read_text().splitlines()) == 32561


def test_a_model_name_that_is_a_path_is_never_opened(tmp_path):
    """A crafted checkpoint puts a file path where the zoo name belongs: it is an unknown zoo model."""
    marker = tmp_path / "ran"
    model_file = _model_file(tmp_path, marker)
    path = _saved(tmp_path, {"model": str(model_file), "arguments": {}})
    result = _alac("export", "--model-dir", str(path), "--numpy", str(tmp_path / "m.npz"))
    assert result.returncode == 2 and "unknown model" in result.stderr and not marker.exists()


def test_a_checkpoint_missing_a_key_is_a_clear_error(tmp_path):
    payload = torch.load(_saved(tmp_path), weights_only=True)
    del payload["params"], payload["feature_order"]
    torch.save(payload, tmp_path / "partial.alac")
    with pytest.raises(CheckpointError, match=r"damaged checkpoint: no params, feature_order$"):
        checkpoint.read(tmp_path / "partial.alac")
    payload = torch.load(_saved(tmp_path), weights_only=True)
    payload["plan"]["chunk_size"] = 7
    torch.save(payload, tmp_path / "bad_plan.alac")
    with pytest.raises(CheckpointError, match="damaged checkpoint .*chunk_size must be a power of two"):
        checkpoint.load(tmp_path / "bad_plan.alac", zoo_model("lr"), backend="reference")


@pytest.mark.parametrize("options, message", [
    ({"format": "table", "table": {"label": "x"}}, "a damaged table encoding \\(KeyError: 'fields'\\)"),
    ({"format": "table"}, "a table, but not how it was encoded"),
    ({"format": "libsvm", "zero_based": "yes"}, "zero_based = 'yes', not true, false or null"),
    ({"format": "criteo", "hash_bits": -3}, "hash_bits = -3, not a positive integer"),
    ({"format": "libsvm", "run": "rm -rf"}, "an unknown entry 'run'"),
    ({"format": "jpeg"}, "format = 'jpeg', not one of"),
])
def test_a_checkpoint_with_malformed_data_options_is_one_clear_error(tmp_path, options, message):
    """How predict would read new files comes from the checkpoint: a damaged record is refused when
    it is read, for `alac predict` as one line, not as a KeyError in a loader."""
    payload = torch.load(_saved(tmp_path), weights_only=True)
    payload["data_options"] = options
    torch.save(payload, tmp_path / "edited.alac")
    with pytest.raises(CheckpointError, match=f"edited.alac: damaged checkpoint: .*{message}"):
        checkpoint.read(tmp_path / "edited.alac")
    if "table" not in options:
        return      # the command line's one line, shown once
    (tmp_path / "data.svm").write_text("1 1:1\n")
    result = _alac("predict", "--model-dir", str(tmp_path / "edited.alac"), "--data", str(tmp_path / "data.svm"),
                   "--output", str(tmp_path / "p.txt"), "--backend", "reference")
    assert result.returncode == 2 and "damaged checkpoint" in result.stderr, result.stderr
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr


def test_a_checkpoint_written_before_the_runtime_moved_into_packages_loads_and_predicts_as_then():
    """fixtures/fm-79f9101.alac: FM k = 4 trained on fixtures/small.svm and saved by alac at 79f9101
    (one flat runtime folder); checkpoints hold data only, so it loads and predicts the same."""
    import numpy as np

    from alac.data import load_libsvm_files

    fixtures = Path(__file__).with_name("fixtures")
    (data,) = load_libsvm_files([fixtures / "small.svm"], n_features=300)
    trainer = checkpoint.load(fixtures / "fm-79f9101.alac", zoo_model("fm", k=4), backend="reference", device="cpu")
    expected = np.load(fixtures / "fm-79f9101-predictions.npy")
    np.testing.assert_allclose(trainer.predict(data).numpy(), expected, rtol=1e-6, atol=1e-7)
    trainer.fit(data, epochs=1)      # and trains on
    assert trainer.epoch == 3
