"""benchmarks/deep_defaults.py: an arm records the losses its table shows, the base rate's beside them."""

import math

from alac.data.split import split
from alac.data.synthetic import criteo_like
from benchmarks.deep_defaults import report, run_arm


def test_an_arm_records_its_start_first_and_best_losses_and_the_report_shows_them():
    train, valid, test = split(criteo_like(1500, n_fields=5, seed=4, device="cpu"), (0.8, 0.1, 0.1), seed=0)
    arm = run_arm("deepfm", 0.05, train, valid, test, "cpu")
    share = float((train.labels > 0.5).float().mean())
    positive = (valid.labels > 0.5).double()
    base = float(-(positive * math.log(share) + (1 - positive) * math.log(1 - share)).mean())
    assert math.isclose(arm["base_valid_logloss"], base, rel_tol=1e-7)   # the share of positives in float32
    assert arm["first_valid_logloss"] == arm["valid_logloss"][0]
    assert arm["best_valid_logloss"] == min(arm["valid_logloss"]) and arm["epochs"] == len(arm["valid_logloss"])
    assert 0 < arm["test_auc"] < 1 and not arm["diverged"]
    text = report({"arms": [{"data": "synthetic", **arm}, {"data": "synthetic", **arm, "lr": 0.1, "diverged": True}]})
    best = f"{arm['best_valid_logloss']:.4f} / {arm['test_auc']:.4f}"
    assert "| lr 0.1 | lr 0.05 |" in text
    assert f"| synthetic | deepfm | {arm['base_valid_logloss']:.4f} | {best} † | {best} |" in text
