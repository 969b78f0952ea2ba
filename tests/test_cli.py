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
