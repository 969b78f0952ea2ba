import numpy as np
import pytest
import torch
from sklearn import metrics as sk

from alac import metrics


@pytest.mark.parametrize("seed", range(4))
def test_metrics_match_scikit_learn(seed):
    generator = np.random.default_rng(seed)
    y = generator.random(500) < 0.3
    # coarse scores, so that many are tied
    p = np.round(np.clip(generator.random(500) * 0.6 + 0.4 * y, 0.001, 0.999), 1 + seed % 2)
    t_p, t_y = torch.from_numpy(p), torch.from_numpy(y)
    assert metrics.auc(t_p, t_y) == pytest.approx(sk.roc_auc_score(y, p), abs=1e-12)
    # alac clips probabilities to [1e-7, 1 - 1e-7] (the float32 scale), scikit-learn to float64 eps
    assert metrics.logloss(t_p, t_y) == pytest.approx(sk.log_loss(y, np.clip(p, 1e-7, 1 - 1e-7)), rel=1e-9)
    assert metrics.accuracy(t_p > 0.5, t_y) == pytest.approx(sk.accuracy_score(y, p > 0.5))
    target = generator.normal(size=500)
    assert metrics.rmse(t_p, torch.from_numpy(target)) == pytest.approx(
        np.sqrt(sk.mean_squared_error(target, p)), rel=1e-12)


def test_auc_of_one_class_is_nan():
    assert np.isnan(metrics.auc(torch.rand(5), torch.ones(5, dtype=torch.bool)))
