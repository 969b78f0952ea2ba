"""`torchrun -m alac train` on two CPU ranks (gloo): the run's first line, and its checkpoint read by
one process, which scores the test rows as the two ranks did."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from alac import metrics
from alac.cli.train import CHECKPOINT_NAME
from alac.data.split import split
from alac.data.synthetic import criteo_like
from alac.models import zoo_model
from alac.train import checkpoint

ROOT = Path(__file__).resolve().parents[2]


def _train_on_two_ranks(folder, *options, backend=("--backend", "reference")):
    """`torchrun --nproc-per-node 2 -m alac train --backend reference ...` run in folder; its result,
    checked to have succeeded. No GPU for the ranks: gloo and the reference backend, as in CI (a field
    model's tables: --tables reference, among the options, backend ())."""
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", "-m", "alac",
               "train", *backend, *options]
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600, cwd=folder)
    assert result.returncode == 0, result.stderr[-2000:]
    return result


FIRST_LINES = {
    "replicated": "alac: 2 ranks (gloo, this one rank 0 on cpu) train, each its share of the rows; parameters and "
                  "optimizer state synchronised every 4 batches by an all-reduce of their changes (each row's sum "
                  "scaled to sequential SGD's change on a quadratic model)",
    "hybrid": "alac: 2 ranks (gloo, this one rank 0 on cpu) train, each its share of the rows; the tables sharded "
              "row-wise over the ranks, each segment's rows gathered from their owners and their changes sent back "
              "every 4 batches by all-to-alls (each row's sum scaled to sequential SGD's change on a quadratic "
              "model); the hot segment replicated, its changes all-reduced"}


@pytest.mark.parametrize("tables", ["replicated", "hybrid"])
def test_two_ranks_train_and_one_rank_resumes_their_checkpoint(tmp_path, tables):
    """The first rank writes the outputs alone (hybrid tables: of the whole state every rank assembled)."""
    out = tmp_path / "run"
    result = _train_on_two_ranks(tmp_path, "--model", "lr", "--synthetic", "3000", "--epochs", "2", "--optimizer",
                                 "sgd", "--lr", "0.5", "--sync-every", "4", "--rank-tables", tables, "--hot-size", "16",
                                 "--out", str(out))
    lines = result.stdout.splitlines()
    assert lines[0] == FIRST_LINES[tables]
    assert sum(line.startswith("wrote ") for line in lines) == 1          # the first rank writes, alone
    final = json.loads((out / "metrics.json").read_text())
    # one process resumes the two ranks' checkpoint: the CLI's synthetic test rows, scored the same
    _, _, test = split(criteo_like(3000, seed=0), (0.8, 0.1, 0.1), seed=0)
    trainer = checkpoint.load(out / CHECKPOINT_NAME, zoo_model("lr"), backend="reference", device="cpu")
    assert trainer.epoch == 2
    assert trainer.evaluate(test)["logloss"] == pytest.approx(final["test_logloss"], abs=1e-6)
    trainer.fit(test, epochs=1)                                             # and trains on
    assert trainer.epoch == 3


def test_two_ranks_solve_by_coordinate_descent_as_two_virtual_workers(tmp_path):
    import numpy as np

    from alac.runtime.solvers.scd import ScdSolver, with_constant_feature

    out = tmp_path / "run"
    result = _train_on_two_ranks(tmp_path, "--model", "lsr", "--solver", "scd", "--synthetic", "2000", "--l2", "0.01",
                                 "--epochs", "200", "--tol", "1e-6", "--out", str(out))
    first = result.stdout.splitlines()[0]
    assert "2 ranks (gloo, this one rank 0 on cpu) each stepping its share of the rows (CoCoA, subspace" in first
    final = json.loads((out / "metrics.json").read_text())
    assert final["duality_gap"] <= 1e-6 and final["stopped_because"] == "tol"
    # the virtual workers of one process: the same problem (the CLI's synthetic training rows), the same steps
    train, _, _ = split(criteo_like(2000, seed=0), (0.8, 0.1, 0.1), seed=0)
    virtual = ScdSolver(with_constant_feature(train), "dual", "squared", l2=0.01, backend="sequential",
                        workers=2, aggregation="subspace").fit(200, 1e-6)
    assert virtual.epochs == final["epochs"]
    np.testing.assert_allclose(np.load(out / "weights.npy"), virtual.coef_.numpy(), rtol=1e-7, atol=1e-10)


def test_a_deep_model_trains_on_two_ranks_as_one_process(tmp_path):
    """`torchrun -m alac train --model deepfm`: the tables' rows over the ranks (hybrid: some on both,
    the others sharded; tests/nn/test_ranked.py trains each mode), the MLP's gradients averaged, each
    rank --batch-size rows of every step (DDP's convention); the run ends where one process on the same
    batches (twice the rows) does, and its
    checkpoint, whole, scores the test rows in one process as the ranks did."""
    tables = "hybrid"
    from alac.cli.deep import main as deep_main
    from alac.train.deep import DeepTrainer

    options = ["--model", "deepfm", "--synthetic", "2000", "--epochs", "2", "--hidden", "16", "--tables", "reference"]
    result = _train_on_two_ranks(tmp_path, *options, "--batch-size", "128", "--rank-tables", tables,
                                 "--out", str(tmp_path / "ranks"), backend=())
    lines = result.stdout.splitlines()
    assert "2 ranks (gloo, this one rank 0 on cpu), 256 rows a step (128 on each)" in lines[0]
    assert lines[1].startswith(f"tables {tables} (as asked")
    assert sum(line.startswith("wrote ") for line in lines) == 1
    ranks = json.loads((tmp_path / "ranks" / "metrics.json").read_text())
    assert deep_main([*options, "--batch-size", "256", "--device", "cpu", "--out", str(tmp_path / "one")]) == 0
    one = json.loads((tmp_path / "one" / "metrics.json").read_text())
    assert ranks["epochs"] == one["epochs"] == 2
    for key in ("valid_logloss", "test_logloss", "test_auc"):
        assert ranks[key] == pytest.approx(one[key], abs=1e-5)
    _, _, test = split(criteo_like(2000, seed=0, device="cpu"), (0.8, 0.1, 0.1), seed=0)    # as the run's --device cpu
    trainer = DeepTrainer.load(tmp_path / "ranks" / "model.pt", device="cpu")
    probability = trainer.predict(test)
    assert float(metrics.logloss(probability, test.labels > 0.5)) == pytest.approx(ranks["test_logloss"], abs=1e-6)
    # and one process continues the two ranks' run from it, to a third epoch
    from alac.cli.commands import main

    assert main(["train", "--resume", str(tmp_path / "ranks"), "--epochs", "3", "--device", "cpu"]) == 0
    assert json.loads((tmp_path / "ranks" / "metrics.json").read_text())["epochs"] == 3
