"""alac.runtime.solvers.duality: the gap is zero at optima computed independently (the ridge closed form,
scikit-learn's solvers mapped to dual points by their optimality conditions) and positive elsewhere."""

import pytest
import torch

from alac.runtime.solvers import duality
from alac.runtime.solvers.scd import ScdProblem
from tests.runtime.scd_problems import planted

L2 = 1e-2


def _problem(loss, **kwargs):
    problem = ScdProblem(planted(classes=loss != "squared", **kwargs), "dual", loss, "cpu", torch.float64)
    return problem.matrix, problem.labels


def test_the_gap_vanishes_at_the_closed_form_ridge_optimum_primal_and_dual():
    A, y = _problem("squared")
    beta = duality.ridge_optimum(A, y, L2)
    assert abs(duality.primal_gap(A, y, beta, L2)) < 1e-10
    alpha = duality.alpha_of_beta(A, y, beta)
    assert abs(duality.dual_gap(A, y, alpha, "squared", L2)) < 1e-10
    torch.testing.assert_close(duality.beta_of_alpha(A, alpha, L2), beta, rtol=1e-9, atol=1e-12)


@pytest.mark.filterwarnings("ignore:Liblinear failed to converge")
def test_the_gap_vanishes_at_scikit_learns_logistic_and_squared_hinge_optima():
    pytest.importorskip("sklearn")
    from sklearn.linear_model import LogisticRegression
    from sklearn.svm import LinearSVC

    A, y = _problem("logistic")
    n, X = y.numel(), A.to_dense().numpy()
    c = 1 / (L2 * n)
    logistic = LogisticRegression(C=c, fit_intercept=False, tol=1e-12, max_iter=10_000).fit(X, y.numpy())
    beta = torch.from_numpy(logistic.coef_[0])
    # optimality: alpha_n = -phi'(a_n . beta) = y_n sigmoid(-y_n a_n . beta)
    alpha = y * torch.sigmoid(-y * (A @ beta))
    assert duality.dual_gap(A, y, alpha, "logistic", L2) < 1e-8
    svc = LinearSVC(C=c, loss="squared_hinge", dual=True, fit_intercept=False, tol=1e-12, max_iter=200_000,
                    random_state=0)
    beta = torch.from_numpy(svc.fit(X, y.numpy()).coef_[0])
    alpha = 2 * y * torch.clamp(1 - y * (A @ beta), min=0)
    assert duality.dual_gap(A, y, alpha, "squared_hinge", L2) < 1e-6


@pytest.mark.parametrize("loss", duality.LOSSES)
def test_the_gap_is_positive_away_from_the_optimum(loss):
    A, y = _problem(loss)
    g = torch.Generator().manual_seed(1)
    b = torch.rand(y.numel(), generator=g, dtype=torch.float64)    # y alpha in the conjugates' domain
    assert duality.dual_gap(A, y, y * b, loss, L2) > 1e-4
    assert duality.primal_gap(A, y, torch.randn(A.shape[1], generator=g, dtype=torch.float64), L2, 1e-3) > 1e-4


def test_the_lasso_gap_scales_its_dual_point_into_the_dual_domain():
    A, y = _problem("squared")
    zero = torch.zeros(A.shape[1], dtype=torch.float64)
    # at beta = 0 with l1 beyond ||A^T y||_inf / N, 0 is the lasso optimum: the gap is 0
    l1 = float(duality.columns_product(A, y).abs().max()) / y.numel() * 1.01
    assert abs(duality.primal_gap(A, y, zero, 0.0, l1)) < 1e-12
    assert duality.primal_gap(A, y, zero, 0.0, l1 / 2) > 0
