"""The hot-row profiler: FAE's estimator against exact counts over seeded trials, and the threshold
search against the budget it must fit."""

import numpy as np
import pytest
import torch

from alac.errors import OptionError
from alac.runtime.rows.profiler import (
    ALWAYS_HOT_BYTES,
    access_counts,
    estimate_hot_rows,
    threshold_for_budget,
)


def _zipf_counts(rows, samples, skew, seed):
    """Access counts of a table whose rows are drawn Zipf(skew)-distributed, in a shuffled id order."""
    generator = np.random.default_rng(seed)
    weights = 1.0 / np.arange(1, rows + 1) ** skew
    counts = generator.poisson(samples * weights / weights.sum())
    return torch.from_numpy(generator.permutation(counts))


@pytest.mark.parametrize(("skew", "hot_share"), [(1.05, 0.12), (1.2, 0.2), (1.5, 0.35)])
def test_the_upper_estimate_bounds_the_hot_rows_within_ten_percent(skew, hot_share):
    """In at least 99 of 100 seeded trials (the estimator's random chunks) the 99.9 % upper estimate
    is at least the exact hot count and within +10 % of it (the cutoff makes hot_share of the rows hot)."""
    rows, samples = 200_000, 5_000_000
    counts = _zipf_counts(rows, samples, skew, 1)
    cutoff = float(np.quantile(counts.numpy(), 1 - hot_share))
    exact = int((counts >= cutoff).sum())
    good = 0
    for trial in range(100):
        estimate = estimate_hot_rows(counts, cutoff, seed=trial)
        assert not estimate.exact and estimate.lower <= estimate.rows <= estimate.upper
        good += exact <= estimate.upper <= 1.10 * exact
    assert good >= 99


def test_small_tables_are_counted_exactly():
    counts = torch.tensor([5, 0, 3, 9, 1])
    assert estimate_hot_rows(counts, 3) == estimate_hot_rows(counts, 3.0)
    estimate = estimate_hot_rows(counts, 3)
    assert estimate.exact and estimate.rows == estimate.upper == estimate.lower == 3


def test_a_sample_counts_about_its_share():
    indices = torch.randint(0, 50, (200_000,), generator=torch.Generator().manual_seed(0))
    full, sampled = access_counts(indices, 60), access_counts(indices, 60, sample=0.1, seed=1)
    assert int(full.sum()) == 200_000 and full[50:].sum() == 0
    assert int(sampled.sum()) == pytest.approx(20_000, rel=0.03)
    with pytest.raises(OptionError, match=r"\(0, 1\]"):
        access_counts(indices, 60, sample=0.0)


def test_the_threshold_search_fills_the_budget_and_no_more():
    """Two large tables and one under 1 MB (always hot): the upper estimates at the threshold fit the
    budget, the exact hot rows are within them, and a threshold 10 % lower would not fit."""
    samples, row_bytes = 5_000_000, 136
    tables = [_zipf_counts(300_000, samples, 1.1, 1), _zipf_counts(150_000, samples, 1.3, 2),
              _zipf_counts(5_000, samples, 1.0, 3)]
    assert len(tables[2]) * row_bytes < ALWAYS_HOT_BYTES
    budget = 12 << 20
    plan = threshold_for_budget(tables, row_bytes, budget, samples)
    assert plan.hot_bytes <= budget and plan.hot_rows[2] == 5_000
    cutoff = plan.threshold * samples
    for counts, hot in zip(tables[:2], plan.hot_rows[:2]):
        assert int((counts >= cutoff).sum()) <= hot
    lower = threshold_for_budget(tables, row_bytes, 10 * budget, samples)
    assert lower.threshold < plan.threshold and lower.hot_bytes > budget
    # a threshold 10 % lower makes more rows hot than the budget holds (the search is tight)
    exact_lower = sum(int((counts >= 0.9 * cutoff).sum()) for counts in tables[:2]) + 5_000
    assert exact_lower * row_bytes > 0.95 * budget
    with pytest.raises(OptionError, match="under 1 MB"):
        threshold_for_budget(tables, row_bytes, 1000, samples)


def test_hot_inputs_touch_only_hot_features():
    """FAE's input classifier: a row is hot only if every feature it touches is; the two sets of rows
    partition the data in row order."""
    from alac.data.arrays import from_csr_arrays
    from alac.runtime.rows.profiler import HotPlan, classify_inputs, hot_features

    tables = [torch.tensor([9, 1, 4]), torch.tensor([0, 7, 7, 2]), torch.tensor([1, 1])]
    plan = HotPlan(threshold=0.5, cutoff=4, hot_rows=(2, 2, 2), always_hot=(False, False, True), hot_bytes=6,
                   budget_bytes=6)
    hot = hot_features(tables, plan)
    assert hot.tolist() == [True, False, True, False, True, True, False, True, True]
    indptr = np.array([0, 2, 4, 4, 7, 8])
    indices = np.array([0, 2, 0, 1, 4, 5, 7, 6], dtype=np.int32)   # row 1 touches feature 1 (cold), row 4 feature 6
    data = from_csr_arrays(indptr, indices, np.ones(8, np.float32), np.zeros(5, np.float32), 9)
    hot_rows, cold_rows = classify_inputs(data, hot)
    assert hot_rows.tolist() == [0, 2, 3] and cold_rows.tolist() == [1, 4]
