"""benchmarks/report.py: where results go."""

import json

from benchmarks import report


def test_a_run_on_a_cpu_never_overwrites_the_committed_gpu_figures(tmp_path, monkeypatch):
    monkeypatch.setattr(report.tempfile, "gettempdir", lambda: str(tmp_path))
    report.write("smoke", {"environment": {"device": "cpu"}, "arms": []}, "table")
    assert json.loads((tmp_path / "alac-results" / "smoke.json").read_text())["environment"]["device"] == "cpu"
    assert not (report.RESULTS / "smoke.json").exists()
    assert report.result_folders(None, "NVIDIA H100 80GB HBM3") == [report.RESULTS]
    assert report.result_folders(tmp_path / "out", "cpu") == [tmp_path / "out"]
