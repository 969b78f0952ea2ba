"""libFM's ALS and MCMC (alac.runtime.solvers.fm_coordinate), a field's coordinates stepped together:
equal to Rendle's one-coordinate-at-a-time loop in float64 (alac.runtime.solvers.fm_sequential, same
random draws); ALS without factors converges to ridge regression's closed form; MCMC without factors
and with a fixed prior samples the Gaussian posterior of Bayesian linear regression (its mean and
variances); bad data is refused with the row."""

import numpy as np
import pytest
import torch

from alac.data.dataset import DataSource, SparseDataset
from alac.errors import DataError, OptionError
from alac.runtime.solvers.fm_coordinate import CoordinateSettings, CoordinateSolver
from alac.runtime.solvers.fm_sequential import sequential_fit


def _ratings(n_rows=120, users=9, items=7, seed=0, k=2):
    """One-hot user and item fields (item ids after the users'), a third field of 3 values with
    real-valued x, and ratings from a planted low-rank model plus noise."""
    rng = np.random.default_rng(seed)
    user = rng.integers(0, users, n_rows)
    item = users + rng.integers(0, items, n_rows)
    third = users + items + rng.integers(0, 3, n_rows)
    x3 = rng.uniform(0.5, 1.5, n_rows)
    planted = rng.normal(0, 0.7, (users + items + 3, k))
    y = 3.0 + (planted[user] * planted[item]).sum(1) + 0.3 * x3 + rng.normal(0, 0.2, n_rows)
    indices = np.stack([user, item, third], 1).reshape(-1)
    values = np.stack([np.ones(n_rows), np.ones(n_rows), x3], 1).reshape(-1)
    fields = np.tile([0, 1, 2], n_rows)
    return SparseDataset(torch.arange(0, 3 * n_rows + 1, 3), torch.tensor(indices, dtype=torch.int32),
                         torch.tensor(values, dtype=torch.float32), torch.tensor(y, dtype=torch.float32),
                         users + items + 3, torch.tensor(fields, dtype=torch.int32), 3)


def _entries(data):
    return (data.entry_rows().numpy(), data.indices.long().numpy(), data.fields.long().numpy(),
            data.values.double().numpy(), data.labels.double().numpy())


@pytest.mark.parametrize("solver", ["als", "mcmc"])
def test_a_fields_coordinates_stepped_together_are_rendles_sequential_steps(solver):
    data = _ratings()
    settings = CoordinateSettings(solver=solver, k=3, iterations=6, burn_in=2, reg_w=0.1, reg_v=0.5, seed=4)
    parallel = CoordinateSolver(settings, data)
    for _ in range(settings.iterations):
        parallel.iterate()
    w0, w, v, alpha = sequential_fit(settings, *_entries(data), data.n_features)
    assert float(parallel.w0) == pytest.approx(w0, rel=1e-9, abs=1e-12)
    np.testing.assert_allclose(parallel.w.numpy(), w, rtol=1e-8, atol=1e-11)
    np.testing.assert_allclose(parallel.v.numpy(), v, rtol=1e-8, atol=1e-11)
    assert parallel.alpha == pytest.approx(alpha, rel=1e-8)
    # the caches are still those of the coordinates
    np.testing.assert_allclose(parallel.e.numpy(), (data.labels.double() - parallel.predict(data)).numpy(), atol=1e-10)


def test_als_without_factors_converges_to_ridge_regressions_closed_form():
    data = _ratings()
    reg = 0.3
    solver = CoordinateSolver(CoordinateSettings(solver="als", k=0, iterations=1, reg_w=reg, burn_in=0), data)
    # the bias and each one-hot field's weights are nearly collinear: coordinate descent creeps along them
    for _ in range(3000):
        solver.iterate()
    design = np.zeros((data.n_rows, data.n_features + 1))
    rows, features, _, values, y = _entries(data)
    design[:, -1] = 1.0
    design[rows, features] = values
    penalty = np.diag([reg] * data.n_features + [0.0])     # the bias is not regularized
    closed = np.linalg.solve(design.T @ design + penalty, design.T @ y)
    np.testing.assert_allclose(solver.w.numpy(), closed[:-1], atol=1e-7)
    assert float(solver.w0) == pytest.approx(closed[-1], abs=1e-7)


def test_mcmc_with_a_fixed_prior_samples_bayesian_linear_regressions_posterior():
    """Noise precision 1, prior N(0, 1) on every w, flat on w0: the posterior is N(A^-1 X'y, A^-1) with
    A = X'X + diag(1, ..., 1, 0); the chain's mean and variances after burn-in match it."""
    data = _ratings(n_rows=60, users=4, items=3)
    solver = CoordinateSolver(CoordinateSettings(solver="mcmc", k=0, iterations=1, burn_in=0, draw_hypers=False,
                                                 initial_precision=1.0, seed=1), data)
    rows, features, _, values, y = _entries(data)
    design = np.zeros((data.n_rows, data.n_features + 1))
    design[:, -1] = 1.0
    design[rows, features] = values
    precision = design.T @ design + np.diag([1.0] * data.n_features + [0.0])
    covariance = np.linalg.inv(precision)
    mean = covariance @ design.T @ y
    draws = []
    for iteration in range(6000):
        solver.iterate()
        if iteration >= 500:
            draws.append(np.append(solver.w.numpy(), float(solver.w0)))
    draws = np.array(draws)
    # the bias and the one-hot fields' weights are correlated and mix slowly: the chain's Monte Carlo
    # error by batch means (50 batches), the means within 4 of it, variances within 20 %
    batches = draws.reshape(50, -1, draws.shape[1]).mean(1)
    error = batches.std(0, ddof=1) / np.sqrt(50)
    assert np.all(np.abs(draws.mean(0) - mean) < 4 * error)
    assert np.all(error < 0.2 * np.sqrt(np.diag(covariance)))      # and the test can tell
    np.testing.assert_allclose(draws.var(0), np.diag(covariance), rtol=0.2)


def test_data_the_field_steps_cannot_take_are_refused_with_the_row():
    data = _ratings(n_rows=5)
    twice = SparseDataset(data.indptr, data.indices, data.values, data.labels, data.n_features,
                          torch.tensor([0, 0, 2] + [0, 1, 2] * 4, dtype=torch.int32), 3,
                          DataSource("ratings.ffm", "libffm", row_lines=torch.arange(1, 6)))
    with pytest.raises(DataError, match="ratings.ffm: line 1: field 0 has 2 entries"):
        CoordinateSolver(CoordinateSettings(), twice)
    without = SparseDataset(data.indptr, data.indices, data.values, data.labels, data.n_features)
    with pytest.raises(DataError, match="need every entry's field"):
        CoordinateSolver(CoordinateSettings(), without)
    with pytest.raises(OptionError, match="ALS fits the squared loss"):
        CoordinateSettings(solver="als", task="classification")
