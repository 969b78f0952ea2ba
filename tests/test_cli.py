import json
import subprocess
import sys

from alac.cli import main


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
    dumped = list(tmp_path.glob("alac_fm_*.py"))
    assert len(dumped) == 1 and dumped[0].read_text() in out
    compile(dumped[0].read_text(), str(dumped[0]), "exec")


def test_inspect_prints_the_source_that_runs(capsys):
    from alac.codegen.kernels import generate_kernels
    from alac.ir.pipeline import lower
    from alac.plan import Plan
    from alac.zoo import build_model, load_model_file

    assert main(["inspect", "--model", "lr", "--kernels", "stage", "--chunk-size", "64"]) == 0
    out = capsys.readouterr().out
    plan = Plan(chunk_size=64, batch_size=1024, kernels="stage")
    generated = generate_kernels(lower(build_model(load_model_file("lr"))), plan)
    assert generated.source in out
    assert [spec.stages for spec in generated.train] == [("aggregate",), ("loss",), ("apply",), ("update",)]


def test_inspect_unknown_model(capsys):
    assert main(["inspect", "--model", "nope"]) == 2
    assert "unknown model 'nope'" in capsys.readouterr().err


def test_inspect_with_data_prints_the_plan_and_its_reasons(shared_data, capsys):
    assert main(["inspect", "--model", "lr", "--data", str(shared_data / "ipinyou/train.fm.txt"), "--mode",
                 "async", "--chunk-size", "32"]) == 0
    out = capsys.readouterr().out
    assert "#   rows: 26,773" in out and "# plan chunk_size = 32" in out and "# plan hot_size =" in out
    assert "semantics=async" in out and "one persistent" in out and "def alac_lr_" in out
