"""benchmarks/scd.py: its webspam-shaped set has the stated shape (unit rows, power-law columns), and
a tiny run writes every arm's figures with the keys the results keep."""

import json
import sys

import pytest
import torch

from benchmarks import scd
from benchmarks.scd_tables import scd_comparisons


def test_the_webspam_shaped_set_has_unit_rows_and_power_law_columns():
    data = scd.webspam_like(2000, 5000, 30, 1.0, seed=0)
    assert data.n_rows == 2000 and data.n_features == 5000
    norms = torch.zeros(2000).index_add_(0, torch.arange(2000).repeat_interleave(data.indptr.diff()), data.values ** 2)
    torch.testing.assert_close(norms, torch.ones(2000))
    counts = torch.bincount(data.indices.long(), minlength=5000).sort(descending=True).values.double()
    # Zipf 1: the most frequent column is far above the median one, and ranks fall off as 1/rank
    assert counts[0] > 50 * counts[2500].clamp_min(1) and counts[9] / counts[99] == pytest.approx(10, rel=0.5)


def test_time_to_gap_takes_the_first_time_at_or_below_each_threshold():
    reached = scd.time_to_gap([(1.0, 1e-2), (2.0, 5e-4), (3.0, 2e-6), (4.0, 1e-9)])
    assert reached == {"0.001": 2.0, "0.0001": 3.0, "1e-05": 3.0, "1e-06": 4.0, "1e-07": 4.0, "1e-08": 4.0}
    assert scd.time_to_gap([(1.0, 1e-2)])["0.001"] is None


def test_a_tiny_run_writes_every_arms_figures(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["scd.py", "--device", "cpu", "--rows", "800", "--columns", "1600",
                                      "--nnz-per-row", "10", "--epochs", "3", "--parts", "webspam,workers",
                                      "--out", str(tmp_path)])
    # Snap ML's library sets the process's floating-point flags (flush to zero): not in a test process
    monkeypatch.setattr(scd, "snapml_arms", lambda *args: ([], "snapml: left out of the smoke run"))
    scd.main()
    result = json.loads((tmp_path / "scd.json").read_text())
    names = [a["name"] for a in result["arms"]]
    assert names[:6] == ["alac", "alac_dual", "alac_plane", "alac_dual_plane", "sequential", "sklearn_ridge"]
    assert "primal_K8_adaptive" in names and "dual_K2_subspace" in names
    for arm in result["arms"]:
        assert {"name", "epochs", "seconds", "gap", "time_to_gap"} <= set(arm)
        assert len(arm["gap"]) == (arm["epochs"] if isinstance(arm["epochs"], int) else len(arm["epochs"]))
    report = (tmp_path / "scd.md").read_text()
    device = torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"   # the machine's, as recorded
    assert report.startswith(f"SCD ({device}") and "Not run: snapml: left out of the smoke run." in report
    assert "| form | averaging, K = 2/4/8 | adaptive, K = 2/4/8 | subspace, K = 2/4/8 |" in report


def test_the_criteo_shaped_dual_set_has_its_row_lengths_and_skewed_ids():
    data = scd.criteo_dual_like(3000, 10_000, 25, 39, seed=0, device="cpu", block_rows=256)
    lengths = data.indptr.diff()
    assert int(lengths.min()) >= 25 and int(lengths.max()) <= 39 and data.values is None
    assert bool((data.indices >= 0).all()) and bool((data.indices < 10_000).all())
    counts = torch.bincount(data.indices.long(), minlength=10_000).sort(descending=True).values
    assert counts[0] > 100 * counts[5000].clamp_min(1)
    assert 0.2 < float(data.labels.mean()) < 0.8       # labels from the planted model, both classes


def test_any_range_of_the_criteo_shaped_rows_is_made_alone_as_in_the_whole_set():
    whole = scd.criteo_dual_like(3000, 10_000, 25, 39, seed=1, device="cpu", block_rows=256)
    part = scd.criteo_dual_like(700, 10_000, 25, 39, seed=1, device="cpu", first_row=1150, block_rows=256)
    rows = whole.take(torch.arange(1150, 1850))
    assert torch.equal(part.indptr, rows.indptr) and torch.equal(part.indices, rows.indices)
    assert torch.equal(part.labels, rows.labels)


def test_the_comparisons_state_epochs_drift_and_time_ratios():
    def arm(name, gaps, times):
        return {"name": name, "data": "webspam_like", "l2": 1e-3, "gap": gaps, "drift": 1e-7,
                "drift_after_30_epochs": 2e-7, "time_to_gap": scd.time_to_gap(list(zip(times, gaps)))}

    arms = [arm("alac", [1e-2, 1e-5, 1e-9], [1.0, 2.0, 3.0]), arm("sequential", [1e-3, 1e-6, 1e-8, 1e-9], [1, 2, 3, 4]),
            arm("alac_wild", [1e-3, 5e-6], [1.0, 2.0]), arm("snapml_primal", [1e-4, 1e-7], [4.0, 8.0])]
    [line] = scd_comparisons(arms)
    assert line.startswith("lambda 0.001: epochs to 1e-8: alac 3, sequential 3; alac's drift |A beta - w| / |w| "
                           "1.0e-07 (2.0e-07 after 30 epochs)")
    assert "the wild control's last gap 5.0e-06" in line
    assert ("Snap ML (its faster form) time / alac's (its faster form) at gap "
            "0.001: 2.0x, 0.0001: 2.0x, 1e-05: 4.0x, 1e-06: 2.7x") in line


def test_a_tiny_criteo_part_solves_the_same_problem_in_both_forms(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["scd.py", "--device", "cpu", "--parts", "criteo", "--criteo-rows", "600",
                                      "--criteo-columns", "300", "--criteo-problems",
                                      "primal:logistic,dual:logistic,dual:squared:0.01", "--epochs", "300",
                                      "--out", str(tmp_path)])
    scd.main()
    arms = json.loads((tmp_path / "scd.json").read_text())["arms"]
    assert [a["name"] for a in arms] == ["alac_primal_logistic", "alac_dual_logistic", "alac_dual_squared"]
    assert [a["l2"] for a in arms] == [1 / 600, 1 / 600, 0.01]
    for arm in arms:
        assert arm["gap"][-1] <= 1e-6 and arm["floor_seconds"] > 0 and len(arm["epoch_seconds"]) == arm["epochs"]
    report = (tmp_path / "scd.md").read_text()
    assert "criteo_like alac_primal_logistic, lambda 0.00167 (600 x 300" in report


@pytest.mark.skipif(not torch.cuda.is_available(), reason="the flat kernels are timed on a GPU")
def test_the_flat_floor_kernels_read_and_add_at_every_entry():
    from benchmarks import scd_floor

    index = torch.tensor([3, 3, 0, 7] * 1000, dtype=torch.int32, device="cuda")
    floors = scd_floor.flat_floors(index, 8)
    assert floors["hottest_share"] == 0.5 and floors["gather_ms"] > 0 and floors["uniform_add_ms"] > 0
    shared = torch.zeros(8, dtype=torch.float64, device="cuda")
    scd_floor._add[(4,)](index, shared, index.numel(), BLOCK=scd_floor.BLOCK)
    # the kernel adds the literal 1e-12 as a float32 constant
    addend = float(torch.tensor(1e-12, dtype=torch.float32))
    expected = torch.tensor([1000.0, 0, 0, 2000, 0, 0, 0, 1000], dtype=torch.float64) * addend
    torch.testing.assert_close(shared.cpu(), expected, rtol=1e-9, atol=0)
    out = torch.empty(4, dtype=torch.float64, device="cuda")
    scd_floor._gather[(4,)](index, torch.arange(8.0, dtype=torch.float64, device="cuda"), out, index.numel(),
                            BLOCK=scd_floor.BLOCK)
    # program p sums the gathered values (here the ids themselves) of entries p * BLOCK .. (p + 1) * BLOCK
    expected = torch.stack([index[p * scd_floor.BLOCK:(p + 1) * scd_floor.BLOCK].double().sum() for p in range(4)])
    assert expected.tolist() == [3328, 3328, 3328, 3016]
    torch.testing.assert_close(out, expected)
