"""benchmarks/deep_defaults.py: an arm records the losses its table shows; the summary takes the lr of
the lowest mean validation loss as tuned and compares the defaults' test AUC with its."""

import math

from alac.data.split import split
from alac.data.synthetic import criteo_like
from benchmarks.deep_defaults import RATES, report, run_arm, summary


def test_an_arm_records_its_lr_start_first_and_best_losses():
    train, valid, test = split(criteo_like(1500, n_fields=5, seed=4, device="cpu"), (0.8, 0.1, 0.1), seed=0)
    arm = run_arm("deepfm", None, train, valid, test, "cpu")
    share = float((train.labels > 0.5).float().mean())
    positive = (valid.labels > 0.5).double()
    base = float(-(positive * math.log(share) + (1 - positive) * math.log(1 - share)).mean())
    assert math.isclose(arm["base_valid_logloss"], base, rel_tol=1e-7)   # the share of positives in float32
    assert arm["default"] and arm["lr"] == 1 / 5          # the default: 1 / the five sparse fields
    assert arm["first_valid_logloss"] == arm["valid_logloss"][0]
    assert arm["best_valid_logloss"] == min(arm["valid_logloss"]) and arm["epochs"] == len(arm["valid_logloss"])
    assert 0 < arm["test_auc"] < 1 and not arm["diverged"]


def _arm(lr, valid, auc, default=False, diverged=False, seed=0):
    return {"data": "d", "model": "deepfm", "lr": lr, "default": default, "seed": seed, "diverged": diverged,
            "base_valid_logloss": 0.6, "best_valid_logloss": valid, "test_auc": auc}


def test_tuned_is_the_lr_of_the_lowest_mean_validation_loss_and_the_default_stands_in_for_its_own_lr():
    arms = [_arm(0.5, 0.50, 0.70, default=True), _arm(0.5, 0.52, 0.72, default=True, seed=1)]
    arms += [_arm(lr, 0.55, 0.60) for lr in RATES if lr not in (0.5, 0.1)]
    arms += [_arm(0.1, 0.505, 0.80, seed=0), _arm(0.1, 0.525, 0.78, diverged=True, seed=1)]
    (row,) = summary(arms)
    # lr 0.5's mean (0.51, the defaults' runs) beats 0.1's (0.515): tuned is the default itself
    assert row["tuned_lr"] == 0.5 and row["defaults_auc"] == row["tuned_auc"] == 0.71 and row["within_target"]
    assert row["oracle_auc"] == 0.79 and row["diverged_lrs"] == [0.1] and row["seeds"] == 2
    arms[-2]["best_valid_logloss"] = 0.40         # now 0.1 has the lowest mean: its AUC is 0.08 better
    (row,) = summary(arms)
    assert row["tuned_lr"] == 0.1 and not row["within_target"]
    text = report({"arms": arms + [{"data": "d", "model": "lr", "test_auc": 0.65}]})
    assert "| d (2 seeds) | deepfm | 0.5 | 0.7100 | 0.1 | 0.7900 | 0.7900 | no | 0.1 |" in text
    assert "The wide models' defaults on the same rows (test AUC): d lr 0.6500." in text
