"""benchmarks/report.py: where results go."""

import json

import pytest

from benchmarks import report


def test_a_run_on_a_cpu_never_overwrites_the_committed_gpu_figures(tmp_path, monkeypatch):
    monkeypatch.setattr(report.tempfile, "gettempdir", lambda: str(tmp_path))
    report.write("smoke", {"environment": {"device": "cpu"}, "arms": []}, "table")
    assert json.loads((tmp_path / "alac-results" / "smoke.json").read_text())["environment"]["device"] == "cpu"
    assert not (report.RESULTS / "smoke.json").exists()
    assert report.result_folders(None, "NVIDIA H100 80GB HBM3") == [report.RESULTS]
    assert report.result_folders(tmp_path / "out", "cpu") == [tmp_path / "out"]


def test_runs_on_different_devices_do_not_merge(tmp_path):
    for name, device in (("a", "NVIDIA H100 80GB HBM3"), ("b", "cpu")):
        (tmp_path / f"{name}.json").write_text(json.dumps({"environment": {"device": device}, "arguments": {},
                                                           "arms": []}))
    with pytest.raises(SystemExit, match="fields.py --merge: runs on different devices"):
        report.merge([tmp_path / "a.json", tmp_path / "b.json"], "fields.py")


def test_merged_runs_keep_each_command_date_and_note(tmp_path):
    env = {"device": "NVIDIA H200"}
    (tmp_path / "a.json").write_text(json.dumps({"environment": {**env, "date": "d1"}, "arguments": {"parts": "flow"},
                                                 "command": "--parts flow", "note": "kept", "ranks": 4,
                                                 "arms": [{"name": "x"}]}))
    (tmp_path / "b.json").write_text(json.dumps({"environment": {**env, "date": "d2"}, "arguments": {"parts": "scd"},
                                                 "ranks": 4, "arms": [{"name": "y"}]}))
    merged = report.merge([tmp_path / "a.json", tmp_path / "b.json"], "distributed.py")
    assert [a["name"] for a in merged["arms"]] == ["x", "y"] and merged["ranks"] == 4
    assert merged["runs"] == [{"parts": "flow", "command": "--parts flow", "note": "kept", "date": "d1"},
                              {"parts": "scd", "date": "d2"}]
