import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from alac.cli.commands import main

ROOT = Path(__file__).resolve().parents[2]


def test_data_stats_prints_the_statistics(shared_data, capsys):
    assert main(["data", "stats", str(shared_data / "ipinyou/train.fm.txt"), "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    assert "26,773" in out and "428,368" in out and "mean 16.00, max 16" in out and "fixed width 16" in out
    assert "133,464 declared" in out and "top 0.1%" in out


def test_data_stats_json_on_a_written_file(tmp_path, capsys):
    path = tmp_path / "small.svm"
    path.write_text("1 1:1 3:2\n-1 2:1\n")
    assert main(["data", "stats", str(path), "--json", "--device", "cpu", "--chunk-size", "4"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["stats"]["rows"] == 2 and report["stats"]["nnz"] == 3 and report["format"] == "libsvm"
    assert report["stats"]["padding_overhead"] == (4 * 2 - 3) / 3


def test_data_stats_synthetic(capsys):
    assert main(["data", "stats", "--synthetic", "2000", "--device", "cpu"]) == 0
    assert "78,000" in capsys.readouterr().out


@pytest.mark.parametrize("share", [1.0, 0.25])
def test_data_stats_runs_faes_estimator_for_a_hot_budget(share, capsys):
    """--hot-budget: the hot rows the estimator's threshold makes (counted here from the data set's
    own ids) are within its 99.9 % interval, fit the budget, and the hot-input share is the share of
    rows whose every feature is hot."""
    from alac.data.synthetic import criteo_like

    budget = 200_000
    assert main(["data", "stats", "--synthetic", "20000", "--device", "cpu", "--json", "--hot-budget", str(budget),
                 "--sample", str(share)]) == 0
    fae = json.loads(capsys.readouterr().out)["fae"]
    data = criteo_like(20000, seed=0, device="cpu")
    counts = torch.bincount(data.indices.long(), minlength=data.n_features)
    assert fae["counted_every_access"] == int((counts >= fae["threshold"] * data.n_rows).sum())
    assert fae["lower"] <= fae["counted"] <= fae["upper"] and fae["upper"] * 8 <= budget
    if share == 1.0:
        hot = counts >= fae["threshold"] * data.n_rows
        rows_all_hot = [bool(hot[data.indices[a:b].long()].all()) for a, b in zip(data.indptr[:-1], data.indptr[1:])]
        assert fae["counted"] == int(hot.sum()) and fae["hot_inputs"] == pytest.approx(sum(rows_all_hot) / data.n_rows)
    else:
        assert fae["counted"] < fae["counted_every_access"]


def test_data_stats_refuses_a_sample_outside_zero_to_one(capsys):
    with pytest.raises(SystemExit) as stop:
        main(["data", "stats", "--synthetic", "100", "--hot-budget", "1MB", "--sample", "1.5"])
    assert stop.value.code == 2
    assert "--sample: must be in (0, 1], got 1.5" in capsys.readouterr().err


def test_bad_file_gives_a_clear_error_not_a_traceback(tmp_path):
    path = tmp_path / "bad.svm"
    path.write_text("1 1:1\n1 2:zz\n")
    result = subprocess.run([sys.executable, "-m", "alac", "data", "stats", str(path)],
                            capture_output=True, text=True)
    assert result.returncode == 2
    assert result.stderr.startswith("alac: error:") and "line 2" in result.stderr and "2:zz" in result.stderr
    assert "Traceback" not in result.stderr


def test_inspect_shows_gradients_plan_and_source(capsys, tmp_path):
    assert main(["inspect", "--model", "fm", "--dump", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "grad    grad_v[k] = 2*d_v2x2*v*x**2 + d_vx*x + l2_v*v" in out
    assert "# plan: semantics=sync kernels=fused" in out and "aggregate + loss + apply ; update" in out
    assert "@triton.jit" in out and "def alac_fm_" in out
    dumped = list(tmp_path.glob("alac_fm_*_sync_grid_edges_resident_prefetch.py"))
    assert len(dumped) == 1
    source, runner = dumped[0].read_text().split('\n\nif __name__ == "__main__":')
    assert source in out and "alac.cli.standalone import main" in runner
    compile(dumped[0].read_text(), str(dumped[0]), "exec")


def test_a_dumped_module_runs_and_times_its_own_kernels_edits_included(tmp_path, capsys):
    """`alac inspect --dump` writes a module that trains with its own kernels when run (on the GPU, or
    under the interpreter): an edit to it (the loss doubled where it is summed) shows in what it prints."""
    pytest.importorskip("triton")
    interpret = {} if torch.cuda.is_available() else {"TRITON_INTERPRET": "1"}
    assert main(["inspect", "--model", "lr", "--dump", str(tmp_path)]) == 0
    capsys.readouterr()
    path = next(tmp_path.glob("alac_lr_*.py"))

    def losses():
        result = subprocess.run([sys.executable, str(path), "--rows", "600", "--epochs", "2"], capture_output=True,
                                text=True, env={**os.environ, **interpret, "PYTHONPATH": str(ROOT)})
        assert result.returncode == 0, result.stderr
        return [float(x) for x in re.findall(r"epoch \d: +[\d.]+ ms  training loss ([\d.]+)", result.stdout)]

    first = losses()
    assert len(first) == 2 and first[1] < first[0] < 0.7
    total = "tl.atomic_add(loss_sum_ptr, tl.sum(loss_rows, axis=0)"
    assert total in path.read_text()
    path.write_text(path.read_text().replace(total, "tl.atomic_add(loss_sum_ptr, 2.0 * tl.sum(loss_rows, axis=0)"))
    assert losses() == pytest.approx([2 * loss for loss in first], rel=1e-6)


def test_inspect_prints_the_source_that_runs(capsys):
    from alac.codegen.kernels import generate_kernels
    from alac.ir.pipeline import lower
    from alac.models import zoo_model
    from alac.plan import Plan

    assert main(["inspect", "--model", "lr", "--kernels", "stage", "--chunk-size", "64"]) == 0
    out = capsys.readouterr().out
    plan = Plan(chunk_size=64, batch_size=1024, kernels="stage")
    generated = generate_kernels(lower(zoo_model("lr")), plan)
    assert generated.source in out
    # the default sync plan: one epoch kernel runs every stage kernel's body, batch after batch
    assert [(spec.role, spec.stages) for spec in generated.train] == [("epoch", ("aggregate", "loss", "apply",
                                                                                 "update"))]
    assert "def aggregate_chunk(" in out and "def loss_chunk(" in out and "def apply_chunk(" in out


def test_inspect_unknown_model(capsys):
    assert main(["inspect", "--model", "nope"]) == 2
    assert "unknown model 'nope'" in capsys.readouterr().err


def test_inspect_with_data_prints_the_plan_and_its_reasons(shared_data, capsys):
    assert main(["inspect", "--model", "lr", "--data", str(shared_data / "ipinyou/train.fm.txt"), "--mode",
                 "async", "--chunk-size", "32"]) == 0
    out = capsys.readouterr().out
    assert "#   rows: 26,773" in out and "# plan chunk_size = 32" in out and "# plan hot_size =" in out
    assert "semantics=async" in out and "one persistent" in out and "def alac_lr_" in out
    # the roofline: every non-zero an edge of the epoch, each reading and changing LR's one float
    nnz = next(line for line in out.splitlines() if line.startswith("#   non-zeros: ")).split(": ")[1]
    roofline = next(line for line in out.splitlines() if line.startswith("# roofline: "))
    assert roofline.startswith(f"# roofline: {nnz} edges an epoch") and "reading and changing 1 float (w 1)" in roofline
    assert ("floor (one flat pass of these accesses," in roofline) == torch.cuda.is_available()
    # a sync epoch's: the same accesses and two grid barriers a batch
    assert main(["inspect", "--model", "lr", "--data", str(shared_data / "ipinyou/train.fm.txt"), "--mode",
                 "sync"]) == 0
    roofline = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("# roofline: "))
    assert roofline.startswith(f"# roofline: {nnz} edges an epoch") and " grid barriers" in roofline
    assert ("floor (one flat pass of these accesses and barriers," in roofline) == torch.cuda.is_available()


def test_inspect_counts_each_kernels_registers_without_a_gpu(tmp_path):
    """--registers compiles the kernels for sm_90a with the data's tiles (ptxas, no GPU): FM's epoch kernel
    holds more per thread than LR's, and the predict kernels fewer than the training ones."""
    path = tmp_path / "small.svm"
    path.write_text("".join(f"{i % 2} {i % 7 + 1}:1 {i % 5 + 10}:1 {i % 3 + 20}:1\n" for i in range(200)))
    found = {}
    for model in ("lr", "fm"):
        result = _run_alac("inspect", "--model", model, "--data", str(path), "--registers")
        assert result.returncode == 0, result.stderr[-2000:]
        line = r"^# registers \(sm_90a, C = \d+, S = \d+, \d+ warps\): alac_\w+?_(epoch|predict): (\d+) registers"
        found[model] = {kind: int(n) for kind, n in re.findall(line, result.stdout, re.M)}
    assert found["lr"]["predict"] < found["lr"]["epoch"] < found["fm"]["epoch"] <= 255
    assert "--registers needs --data" in _run_alac("inspect", "--model", "lr", "--registers").stderr


def _run_alac(*args, env_extra=None):
    import os
    environment = dict(os.environ)
    environment.pop("TRITON_INTERPRET", None)
    environment.update(env_extra or {})
    return subprocess.run([sys.executable, "-m", "alac", *args], capture_output=True, text=True, env=environment)


def test_train_then_predict_on_a9a_without_a_gpu(shared_data, tmp_path):
    import numpy as np
    from sklearn.metrics import roc_auc_score

    from alac.data import load_libsvm

    out = tmp_path / "run"
    result = _run_alac("train", "--model", "lr", "--train", str(shared_data / "a9a/a9a"), "--test",
                       str(shared_data / "a9a/a9a.t"), "--backend", "reference", "--out", str(out), "--plot")
    assert result.returncode == 0, result.stderr
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["test_auc"] >= 0.900
    history = (out / "history.csv").read_text().splitlines()
    # early stopping on 10 % of the training rows ends well before the 100 epochs at most
    assert history[0].startswith("epoch,") and "valid_logloss" in history[0] and 5 < len(history) < 100
    assert (out / "loss.png").stat().st_size > 10_000 and (out / "model.alac").is_file()
    predictions_path = tmp_path / "predictions.txt"
    # predict and export in this process (the training above ran the command as a shell does)
    assert main(["predict", "--model-dir", str(out), "--data", str(shared_data / "a9a/a9a.t"),
                 "--output", str(predictions_path), "--backend", "reference"]) == 0
    predictions = np.loadtxt(predictions_path)
    labels = load_libsvm(shared_data / "a9a/a9a.t", n_features=123).labels.numpy() > 0
    assert predictions.shape == (16281,)
    # the file holds 9 significant digits: rounding may tie or untie a few pairs of predictions
    assert abs(roc_auc_score(labels, predictions) - metrics["test_auc"]) < 1e-5
    assert main(["export", "--model-dir", str(out), "--readable", str(tmp_path / "model.txt"),
                 "--numpy", str(tmp_path / "model.npz")]) == 0
    lines = (tmp_path / "model.txt").read_text().splitlines()
    assert "ids 1-based" in lines[0] and lines[2] == "# id w"
    weights = np.load(tmp_path / "model.npz")["w"]
    first = lines[3].split()
    assert float(first[1]) == pytest.approx(weights[int(first[0]) - 1], rel=1e-6)


def test_plot_has_labelled_axes_and_a_curve_per_split(tmp_path):
    from alac.cli.plot import plot_history

    history = [{"epoch": e, "train_loss": 1 / e, "seconds": 0.1, "valid_logloss": 1.1 / e, "test_logloss": 1.2 / e}
               for e in range(1, 5)]
    figure = plot_history(history, tmp_path / "loss.png", "title")
    assert (tmp_path / "loss.png").is_file()
    for axis in figure.axes:
        assert axis.get_xlabel() in ("epoch", "training wall time (s)") and axis.get_ylabel() == "loss"
        labels = [line.get_label() for line in axis.get_lines()]
        assert labels == ["train loss (running, per epoch)", "validation logloss", "test logloss"]


def test_cli_errors_are_clear(tmp_path, capsys):
    """One line and status 2 (in this process: an exception that escaped would fail the test, as a
    traceback would show in a shell; test_bad_file_gives_a_clear_error_not_a_traceback runs the command)."""
    def status(*args):
        try:
            return main(list(args))
        except SystemExit as stop:      # argparse's errors
            return stop.code

    assert status("train", "--model", "nope", "--train", "x.svm") == 2
    assert "unknown model 'nope'" in capsys.readouterr().err
    assert status("train", "--model", "lr", "--train", str(tmp_path / "missing.svm"), "--backend", "reference") == 2
    assert "file not found" in capsys.readouterr().err
    assert status("predict", "--model-dir", str(tmp_path), "--data", "x", "--output", str(tmp_path / "y")) == 2
    assert "no checkpoint there" in capsys.readouterr().err
    assert status("train", "--model", "lr", "--optimizer", "lbfgs") == 2
    assert "invalid choice: 'lbfgs'" in capsys.readouterr().err


def _small_svm(tmp_path):
    path = tmp_path / "small.svm"
    path.write_text("".join(f"{1 if i % 3 else -1} {1 + i % 7}:1 {8 + i % 5}:1\n" for i in range(200)))
    return path


def _criteo(tmp_path):
    path = tmp_path / "criteo.txt"
    path.write_text("1\t5\t\t-1\t0\t3\t100\t\t\t\t\t\t\t7\t68fd1e64\t\tFB936136" + "\t" * 23 + "\n")
    return path


@pytest.mark.parametrize("options, message", [
    (["--train", "{folder}"], "is a directory, not a data file"),
    (["--train", "{svm}", "--batch-size", "0"], "argument --batch-size: must be at least 1, got 0"),
    (["--train", "{svm}", "--chunk-size", "7"], "chunk_size must be a power of two"),
    (["--train", "{criteo}", "--hash-bits", "40"], "hash_bits must be in 1..25"),
    (["--train", "{svm}", "--epochs", "0"], "argument --epochs: must be at least 1, got 0"),
    (["--train", "{svm}", "--epochs", "-1"], "argument --epochs: must be at least 1, got -1"),
    (["--train", "{svm}", "--out", "{file}"], "exists and is not a folder"),
    (["--train", "{svm}", "--out", "{file}/below"], "cannot make this folder"),
    (["--train", "{svm}", "--out", "/proc/alac-out"], "cannot make this folder"),
    (["--train", "{svm}", "--out", "{folder}/run"], "run/model.alac: is a folder"),
    (["--train", "{svm}", "--host-params", "v"], "placement names ['v'], not params of model 'lr'"),
    (["--train", "{svm}", "--host-params", "w", "--mode", "async"], "params in host memory (w) run sync plans only"),
])
def test_bad_options_are_one_line_before_any_training(tmp_path, options, message):
    (tmp_path / "run" / "model.alac").mkdir(parents=True)
    (tmp_path / "a_file").write_text("")
    places = {"folder": tmp_path, "svm": _small_svm(tmp_path), "criteo": _criteo(tmp_path), "file": tmp_path / "a_file"}
    result = _run_alac("train", "--model", "lr", "--backend", "reference", *[o.format(**places) for o in options])
    assert result.returncode == 2 and message in result.stderr, result.stderr
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert "epoch" not in result.stdout


def test_predict_checks_its_output_before_loading_anything(tmp_path):
    for output, message in ((tmp_path / "missing" / "p.txt", "does not exist"), (tmp_path, "is a folder")):
        result = _run_alac("predict", "--model-dir", str(tmp_path / "no-model"), "--data", "x", "--output", str(output))
        assert result.returncode == 2 and message in result.stderr and result.stderr.count("\n") == 1


def test_a_blow_up_stops_restores_and_saves_a_consistent_checkpoint(tmp_path):
    """--lr 1e6 on squared loss: the loss explodes; training stops with exit status 3, the last good
    parameters and their epoch count come back, and the checkpoint holds exactly those."""
    from alac.models import zoo_model
    from alac.train import checkpoint

    out = tmp_path / "run"
    result = _run_alac("train", "--model", "lsr", "--train", str(_small_svm(tmp_path)), "--lr", "1e6",
                       "--optimizer", "sgd", "--early-stopping", "none", "--backend", "reference", "--out", str(out))
    assert result.returncode == 3, result.stderr
    assert result.stderr.count("\n") == 1 and "training diverged in epoch" in result.stderr
    restored = re.search(r"(epoch (\d+)'s|the initial) parameters are restored", result.stderr)
    trainer = checkpoint.load(out / "model.alac", zoo_model("lsr"), backend="reference")
    # 200 rows, batches of 1,024: one batch per epoch
    assert restored and trainer.epoch == int(restored.group(2) or 0) == trainer.executor.batches_done
    assert [record["epoch"] for record in trainer.history] == list(range(1, trainer.epoch + 1))
    assert all(torch.isfinite(v).all() and float(v.abs().max()) < 1e4 for v in trainer.executor.state.params.values())


def test_a_table_trains_and_predicts_with_its_training_encoding(tmp_path):
    import numpy as np

    rows = ["user,item,rating"] + [f"u{i % 9},i{i % 13},{1 + (i % 9 + i % 13) % 5}" for i in range(400)]
    (tmp_path / "train.csv").write_text("\n".join(rows) + "\n")
    (tmp_path / "test.csv").write_text("item,user,rating\ni3,u4,3\nnew,u1,2\n")
    out = tmp_path / "run"
    result = _run_alac("train", "--model", "fm", "--loss", "squared", "--format", "table", "--train",
                       str(tmp_path / "train.csv"), "--label", "rating", "--fields", "user,item", "--backend",
                       "reference", "--out", str(out))
    assert result.returncode == 0, result.stderr
    result = _run_alac("predict", "--model-dir", str(out), "--data", str(tmp_path / "test.csv"), "--output",
                       str(tmp_path / "p.txt"), "--backend", "reference")
    assert result.returncode == 0, result.stderr
    predictions = np.loadtxt(tmp_path / "p.txt")
    assert predictions.shape == (2,) and np.isfinite(predictions).all() and 1 < predictions[0] < 5


def test_training_runs_without_triton(tmp_path):
    """The reference backend needs no Triton (it is optional off Linux); the Triton backends say so."""
    code = ("import sys; sys.modules['triton'] = None\nfrom alac.cli.commands import main\n"
            f"sys.exit(main(['train', '--model', 'lr', '--train', {str(_small_svm(tmp_path))!r}, '--epochs', '2', "
            "'--backend', sys.argv[1]]))")
    result = subprocess.run([sys.executable, "-c", code, "reference"], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    result = subprocess.run([sys.executable, "-c", code, "interpret"], capture_output=True, text=True)
    assert result.returncode == 2 and "Triton is not installed" in result.stderr


def test_params_in_host_memory_train_and_predict(tmp_path):
    """--host-params w: the checkpoint keeps the placement, and predictions equal the device run's."""
    out = {}
    for name, flags in (("device", []), ("host", ["--host-params", "w"])):
        out[name] = tmp_path / name
        result = _run_alac("train", "--model", "lr", "--train", str(_small_svm(tmp_path)), "--epochs", "3",
                           "--early-stopping", "none", "--mode", "sync", "--optimizer", "sgd", *flags,
                           "--out", str(out[name]))
        assert result.returncode == 0, result.stderr
    from alac.models import zoo_model
    from alac.train import checkpoint

    host = checkpoint.load(out["host"] / "model.alac", zoo_model("lr"), backend="reference")
    device = checkpoint.load(out["device"] / "model.alac", zoo_model("lr"), backend="reference")
    assert host.plan.host_params == ("w",) and device.plan.host_params == ()
    torch.testing.assert_close(host.executor.state.params["w"].cpu(), device.executor.state.params["w"].cpu(),
                               rtol=1e-5, atol=1e-6)


def test_train_streams_data_over_its_gpu_memory_budget():
    result = _run_alac("train", "--model", "lr", "--synthetic", "4000", "--backend", "reference", "--epochs", "2",
                       "--optimizer", "adagrad", "--gpu-memory", "40KB")
    assert result.returncode == 0, result.stderr
    assert re.search(r"training data streamed from pinned host memory: \d+ blocks", result.stdout), result.stdout
    bad = _run_alac("train", "--model", "lr", "--gpu-memory", "8XB")
    assert bad.returncode == 2 and "not a memory size (such as 8GB, 512MiB): '8XB'" in bad.stderr


def test_train_over_its_gpu_memory_budget_caches_the_rows_and_reports_hit_ratios(tmp_path):
    """The layout fits --gpu-memory, the FM's 1.46M rows do not: HybridHash, its forecast printed, the
    hit ratio of every batch written; inspect prints the same choice."""
    out = tmp_path / "run"
    result = _run_alac("train", "--model", "fm", "--synthetic", "4000", "--backend", "reference", "--epochs", "2",
                       "--optimizer", "adagrad", "--batch-size", "256", "--gpu-memory", "5MB",
                       "--param-mode", "hybrid_hash", "--out", str(out))
    assert result.returncode == 0, result.stderr
    assert re.search(r"placement: placement = hybrid_hash: 1,460,005 rows x 44 bytes", result.stdout), result.stdout
    assert re.search(r"placement: predicted [\d,]+ samples/s", result.stdout), result.stdout
    ratios = (out / "hit_ratio.csv").read_text().splitlines()
    assert ratios[0] == "batch,hit_ratio" and len(ratios) == 1 + 2 * 13    # 3,200 rows in batches of 256
    data = tmp_path / "many.svm"
    data.write_text("".join(f"{i % 2} {1 + i}:1 {100000 + i % 50}:1\n" for i in range(3000)))
    inspected = _run_alac("inspect", "--model", "fm", "--data", str(data), "--gpu-memory", "400KB",
                          "--param-mode", "hybrid_hash")
    assert inspected.returncode == 0, inspected.stderr
    assert "# placement placement = hybrid_hash: 100,049 rows x 36 bytes" in inspected.stdout, inspected.stdout
    assert "# placement hit ratio = " in inspected.stdout
    # FAE asked for: its hot rows (9,107) hold the 3,050 features the rows touch: every input is hot
    inspected = _run_alac("inspect", "--model", "fm", "--data", str(data), "--gpu-memory", "400KB",
                          "--param-mode", "fae")
    assert inspected.returncode == 0, inspected.stderr
    assert "# placement placement = fae: 100,049 rows x 36 bytes" in inspected.stdout, inspected.stdout
    assert "# placement fae hot inputs = 1.0000: the share of rows" in inspected.stdout, inspected.stdout


def test_train_out_of_core_streams_the_file_from_a_block_store_on_disk(tmp_path, capsys):
    """--out-of-core writes the training file to a cached block store and trains from disk; the store
    folder given as --train trains the same model; both learn what in-memory training learns."""
    from alac.data import write_libsvm
    from alac.data.synthetic import criteo_like

    data = criteo_like(4000, n_fields=8, seed=3, device="cpu")
    write_libsvm(data.take(torch.arange(3000)), tmp_path / "train.svm")
    write_libsvm(data.take(torch.arange(3000, 4000)), tmp_path / "valid.svm")
    common = ("train", "--model", "lr", "--train", str(tmp_path / "train.svm"), "--valid", str(tmp_path / "valid.svm"),
              "--backend", "reference", "--epochs", "2", "--optimizer", "adagrad", "--lr", "0.1")
    env = {"ALAC_CACHE_DIR": str(tmp_path / "cache")}
    streamed = _run_alac(*common, "--out-of-core", env_extra=env)
    assert streamed.returncode == 0, streamed.stderr
    store = re.search(r"training data streamed from a block store on disk \((.+)\): \d+ blocks", streamed.stdout)
    assert store, streamed.stdout
    again = _run_alac(*[store.group(1) if a == str(tmp_path / "train.svm") else a for a in common], env_extra=env)
    assert again.returncode == 0, again.stderr
    in_memory = _run_alac(*common, env_extra=env)
    final = [json.loads(run.stdout.strip().splitlines()[-1]) for run in (streamed, again, in_memory)]
    # the same store zstd-compressed (in this process: the test's own cache folder) trains the same model
    capsys.readouterr()
    assert main([*common, "--out-of-core", "--block-codec", "zstd"]) == 0
    compressed = capsys.readouterr().out
    assert re.search(r"\d+, zstd-compressed blocks", compressed), compressed
    assert final[0] == final[1] == json.loads(compressed.strip().splitlines()[-1])
    assert final[0]["valid_logloss"] == pytest.approx(final[2]["valid_logloss"], abs=0.01)
    assert final[0]["valid_auc"] == pytest.approx(final[2]["valid_auc"], abs=0.01)
    no_metrics = _run_alac("train", "--model", "lr", "--train", str(tmp_path / "train.svm"), "--out-of-core",
                           env_extra=env)
    assert no_metrics.returncode == 2 and "reports its metrics on --valid or --test" in no_metrics.stderr


def test_a_block_codec_without_out_of_core_is_refused_before_any_reading(tmp_path, capsys):
    assert main(["train", "--model", "lr", "--train", str(tmp_path / "absent.svm"), "--block-codec", "zstd"]) == 2
    assert "--block-codec compresses the block store --out-of-core writes" in capsys.readouterr().err


def test_train_reads_compressed_files_and_standard_input_as_the_plain_file(tmp_path, capsys, monkeypatch):
    """A gzip file and a bz2 stream piped to `--train -` train the model the plain file trains, and the
    run's first line says how each was read."""
    import bz2
    import gzip
    import io

    from alac.data import files

    plain = _small_svm(tmp_path)
    (tmp_path / "small.gz").write_bytes(gzip.compress(plain.read_bytes()))
    monkeypatch.setattr(files, "_stdin", None)
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(bz2.compress(plain.read_bytes()))))
    metrics = {}
    for name, train in (("plain", plain), ("gzip", tmp_path / "small.gz"), ("stdin", "-")):
        out = tmp_path / name
        assert main(["train", "--model", "lr", "--train", str(train), "--epochs", "3", "--optimizer", "sgd",
                     "--backend", "reference", "--out", str(out)]) == 0
        metrics[name] = json.loads((out / "metrics.json").read_text())
    out = capsys.readouterr().out
    assert "small.svm (libsvm, detected from its name)" in out
    assert "small.gz (libsvm, detected from its content, read through gzip)" in out
    assert "model lr on - (libsvm, detected from its content, read through bz2)" in out
    assert metrics["gzip"] == metrics["plain"] and metrics["stdin"] == metrics["plain"]


def test_a_csv_file_is_a_table_without_format_and_data_stats_reads_it(tmp_path, capsys):
    rows = ["user,item,rating"] + [f"u{i % 9},i{i % 13},{1 + (i % 9 + i % 13) % 5}" for i in range(300)]
    (tmp_path / "ratings.csv").write_text("\n".join(rows) + "\n")
    assert main(["data", "stats", str(tmp_path / "ratings.csv"), "--label", "rating"]) == 0
    captured = capsys.readouterr()
    assert "ratings.csv: read as table (detected from its name)" in captured.out
    assert re.search(r"format\s+table, label=rating, fields=2", captured.out)
    assert re.search(r"rows\s+300\b", captured.out)
    out = tmp_path / "run"
    assert main(["train", "--model", "fm", "--loss", "squared", "--train", str(tmp_path / "ratings.csv"),
                 "--label", "rating", "--epochs", "2", "--backend", "reference", "--out", str(out)]) == 0
    assert json.loads((out / "metrics.json").read_text())


def test_bench_runs_a_checkout_s_benchmarks_and_an_installed_alac_offers_none(tmp_path, capsys, monkeypatch):
    from alac.cli import commands

    assert main(["bench", "nosuch"]) == 2
    assert "this checkout has: " in capsys.readouterr().err and (commands.BENCHMARKS / "flow.py").is_file()
    monkeypatch.setattr(commands, "BENCHMARKS", tmp_path / "benchmarks")      # an installed package's
    with pytest.raises(SystemExit):
        main(["bench", "flow"])
    assert "invalid choice: 'bench'" in capsys.readouterr().err


def test_optional_dependencies_fail_early_with_the_extra_that_installs_them(tmp_path, monkeypatch, capsys):
    """Without matplotlib `--plot` stops before training; without scikit-learn `import alac.sklearn`
    is one ImportError line that names the extra."""
    import importlib

    from alac import optional

    real = importlib.import_module

    def missing(name, *args):
        if name in ("matplotlib", "sklearn"):
            raise ImportError(name)
        return real(name, *args)

    monkeypatch.setattr(optional.importlib, "import_module", missing)
    out = tmp_path / "run"
    assert main(["train", "--model", "lr", "--train", str(_small_svm(tmp_path)), "--backend", "reference",
                 "--out", str(out), "--plot"]) == 2
    captured = capsys.readouterr()
    assert "alac: error: --plot needs matplotlib: pip install 'matplotlib' (or 'alac[plot]')" in captured.err
    assert "epoch" not in captured.out and not (out / "model.alac").exists()
    with pytest.raises(ImportError, match=r"^alac.sklearn needs scikit-learn: pip install 'scikit-learn' "
                                          r"\(or 'alac\[sklearn\]'\)$"):
        optional.need("sklearn", "alac.sklearn")


def test_train_help_is_grouped_and_gives_every_option_a_help_and_its_default(capsys):
    """`alac train --help` without --model lists every zoo model's options (saying which models take
    them), in groups; every option says what it does, and every option with a default shows it."""
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    text = capsys.readouterr().out
    groups = re.findall(r"^(\w[^\n:]*):$", text, flags=re.MULTILINE)
    assert groups[1:] == ["data", "model", "optimizer and epochs",
                          "execution (how the kernels run and where rows live)", "several GPUs (under torchrun)",
                          "output"]
    for flag in ("--l2", "--k", "--loss", "--deterministic", "--replicas", "--programs"):
        assert re.search(rf"^  {flag}\b", text, flags=re.MULTILINE), flag
    assert re.search(r"--k K\s+\(fm\) factors per feature \(default: 8\)", text)
    # the field models' help: the same groups (their execution options are the step's)
    with pytest.raises(SystemExit):
        main(["train", "--model", "deepfm", "--help"])
    deep_groups = re.findall(r"^(\w[^\n:]*):$", capsys.readouterr().out, flags=re.MULTILINE)
    assert deep_groups[1:] == ["data", "model", "optimizer and epochs", "execution", "several GPUs (under torchrun)",
                               "output"]
    from alac.cli.deep import parser as deep_parser
    from alac.cli.parser import Parser
    from alac.cli.train import parser_for

    for parser in (parser_for(Parser(prog="alac train"), None), deep_parser()):
        for action in parser._actions:
            if action.option_strings and action.dest != "help":
                assert action.help, action.option_strings
                formatted = parser.formatter_class("alac")._get_help_string(action)
                if action.default is not None and action.default is not False and action.default != "":
                    assert "default" in formatted, action.option_strings
