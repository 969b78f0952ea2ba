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


def _ratings(n_rows=120, users=9, items=7, seed=0, k=2, tags=5):
    """One-hot user and item fields (item ids after the users'), a one-hot third field of 3 values
    with real-valued x, a bag of 1-3 distinct tags of `tags` (field 3: it repeats in rows; none where
    tags is 0), and ratings from a planted low-rank model plus noise."""
    rng = np.random.default_rng(seed)
    user = rng.integers(0, users, n_rows)
    item = users + rng.integers(0, items, n_rows)
    third = users + items + rng.integers(0, 3, n_rows)
    x3 = rng.uniform(0.5, 1.5, n_rows)
    first_tag = users + items + 3
    planted = rng.normal(0, 0.7, (first_tag + tags, k))
    y = 3.0 + (planted[user] * planted[item]).sum(1) + 0.3 * x3 + rng.normal(0, 0.2, n_rows)
    indices, values, fields, indptr = [], [], [], [0]
    for i in range(n_rows):
        bag = first_tag + rng.choice(tags, rng.integers(1, 4), replace=False) if tags else []
        y[i] += 0.2 * len(bag)
        indices += [user[i], item[i], third[i], *bag]
        values += [1.0, 1.0, x3[i], *[1.0] * len(bag)]
        fields += [0, 1, 2, *[3] * len(bag)]
        indptr.append(len(indices))
    return SparseDataset(torch.tensor(indptr), torch.tensor(indices, dtype=torch.int32),
                         torch.tensor(values, dtype=torch.float32), torch.tensor(y, dtype=torch.float32),
                         first_tag + tags, torch.tensor(fields, dtype=torch.int32), 4 if tags else 3)


def _design(data):
    """The dense design matrix of a data set, a column of ones (the bias) last."""
    design = np.zeros((data.n_rows, data.n_features + 1))
    design[:, -1] = 1.0
    design[data.entry_rows().numpy(), data.indices.long().numpy()] = data.values.double().numpy()
    return design


DEVICES = ["cpu", "cuda"] if torch.cuda.is_available() else ["cpu"]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("solver", ["als", "mcmc"])
def test_a_blocks_coordinates_stepped_together_are_rendles_sequential_steps(solver, device):
    """On the GPU too: its normals are drawn on the CPU's generator for this comparison."""
    data = _ratings()
    settings = CoordinateSettings(solver=solver, k=3, iterations=6, burn_in=2, reg_w=0.1, reg_v=0.5, seed=4)
    parallel = CoordinateSolver(settings, data, device=device, generator_device="cpu")
    for _ in range(settings.iterations):
        parallel.iterate()
    w0, w, v, alpha = sequential_fit(settings, data)
    assert float(parallel.w0) == pytest.approx(w0, rel=1e-9, abs=1e-12)
    np.testing.assert_allclose(parallel.w.cpu().numpy(), w, rtol=1e-8, atol=1e-11)
    np.testing.assert_allclose(parallel.v.cpu().numpy(), v, rtol=1e-8, atol=1e-11)
    assert parallel.alpha == pytest.approx(alpha, rel=1e-8)
    # the caches are still those of the coordinates
    np.testing.assert_allclose(parallel.e.cpu().numpy(),
                               (data.labels.double() - parallel.predict(data).cpu()).numpy(), atol=1e-10)


def test_als_without_factors_converges_to_ridge_regressions_closed_form():
    data = _ratings()
    reg = 0.3
    solver = CoordinateSolver(CoordinateSettings(solver="als", k=0, iterations=1, reg_w=reg, burn_in=0), data)
    # the bias and each one-hot field's weights are nearly collinear: coordinate descent creeps along them
    for _ in range(3000):
        solver.iterate()
    design, y = _design(data), data.labels.double().numpy()
    penalty = np.diag([reg] * data.n_features + [0.0])     # the bias is not regularized
    closed = np.linalg.solve(design.T @ design + penalty, design.T @ y)
    np.testing.assert_allclose(solver.w.numpy(), closed[:-1], atol=1e-7)
    assert float(solver.w0) == pytest.approx(closed[-1], abs=1e-7)


def test_mcmc_with_a_fixed_prior_samples_bayesian_linear_regressions_posterior():
    """Noise precision 1, prior N(0, 1) on every w, flat on w0: the posterior is N(A^-1 X'y, A^-1) with
    A = X'X + diag(1, ..., 1, 0); the chain's mean and variances after burn-in match it."""
    data = _ratings(n_rows=60, users=4, items=3, tags=4)
    solver = CoordinateSolver(CoordinateSettings(solver="mcmc", k=0, iterations=1, burn_in=0, draw_hypers=False,
                                                 initial_precision=1.0, seed=1), data)
    design, y = _design(data), data.labels.double().numpy()
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


def test_a_repeating_fields_blocks_share_no_row_and_cover_its_features():
    from alac.runtime.solvers.fm_blocks import coordinate_blocks

    data = _ratings(n_rows=200, tags=12)
    blocks, priors = coordinate_blocks(data, "cpu", torch.float64)
    tags = [block for block in blocks if block.prior == 3]
    assert [block.prior for block in blocks][:3] == [0, 1, 2] and len(tags) >= 3     # rows hold up to 3 tags
    covered = torch.cat([block.features for block in tags]).sort().values
    assert torch.equal(covered, priors[3]) and torch.equal(priors[3], torch.arange(19, 31))
    for block in tags:
        assert block.rows.unique().numel() == block.rows.numel()      # a row at most once a block
        assert torch.equal(block.features[block.local], data.indices.long()[data.fields == 3][
            torch.isin(data.indices.long()[data.fields == 3], block.features)])


def test_features_in_two_fields_are_refused_with_the_row_and_data_without_fields_are_one_field():
    data = _ratings(n_rows=5, tags=0)
    # feature 0 is a user in line 1 and an item in line 2
    mixed = SparseDataset(torch.tensor([0, 2, 4]), torch.tensor([0, 5, 0, 6], dtype=torch.int32), None,
                          torch.tensor([1.0, 2.0]), 7, torch.tensor([0, 1, 1, 1], dtype=torch.int32), 2,
                          DataSource("ratings.ffm", "libffm", row_lines=torch.tensor([1, 2])))
    with pytest.raises(DataError, match=r"ratings.ffm: line 1: feature 0 comes in fields 0 and 1"):
        CoordinateSolver(CoordinateSettings(), mixed)
    # data without fields: one prior, its features in blocks that share no row
    without = SparseDataset(data.indptr, data.indices, data.values, data.labels, data.n_features)
    solver = CoordinateSolver(CoordinateSettings(), without)
    assert len(solver.priors) == 1 and len(solver.blocks) >= 3
    with pytest.raises(OptionError, match="ALS fits the squared loss"):
        CoordinateSettings(solver="als", task="classification")


def test_a_feature_whose_values_are_all_zero_stays_put_under_als_without_l2():
    data = _ratings(n_rows=40, tags=0)
    values = data.values.clone()
    values[data.indices.long() == int(data.indices[2])] = 0.0        # the third field's first value seen
    zeroed = SparseDataset(data.indptr, data.indices, values, data.labels, data.n_features, data.fields, 3)
    solver = CoordinateSolver(CoordinateSettings(solver="als", k=2, iterations=3, burn_in=0), zeroed)
    for _ in range(3):
        solver.iterate()
    assert bool(torch.isfinite(solver.w).all() and torch.isfinite(solver.v).all() and torch.isfinite(solver.e).all())
    assert float(solver.w[int(data.indices[2])]) == 0.0
