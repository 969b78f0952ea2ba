"""The objectives of alac's coordinate descent solvers, evaluated in float64, and the maps between
primal and dual points (TPA-SCD's notation, the SDCA scaling of Shalev-Shwartz and Zhang).

A is N x M (rows are examples; a sparse CSR tensor or an alac.runtime.compressed.CompressedMatrix),
y the labels (+-1 for hinge, squared hinge and logistic).

    primal   P(beta) = 1/N sum_n phi(a_n . beta, y_n) + l2/2 ||beta||^2 + l1 ||beta||_1
    dual     D(alpha) = -1/N sum_n phi*(-alpha_n, y_n) - ||A^T alpha||^2 / (2 l2 N^2)     (l1 = 0)

with phi(z, y) = (z - y)^2 / 2 (squared: ridge, lasso, elastic net), max(0, 1 - y z) (hinge),
max(0, 1 - y z)^2 (squared hinge) or log(1 + exp(-y z)) (logistic). The dual's primal point is
beta(alpha) = A^T alpha / (l2 N); the primal's dual point is alpha(beta) = y - A beta (squared
loss), scaled for the l1 case into the dual's domain. gap = P - D >= 0, zero exactly at the optimum.
scikit-learn's Ridge alpha is l2 N, LinearSVC's and LogisticRegression's C is 1 / (l2 N); Snap ML's
regularizer is l2 N.
"""

from __future__ import annotations

import math

import torch

LOSSES = ("squared", "hinge", "squared_hinge", "logistic")


def _rows(A, beta):
    return A @ beta


def columns_product(A, alpha):
    """A^T alpha: of an alac.runtime.compressed.CompressedMatrix, or of a sparse CSR tensor (as a CSR
    transpose: cuSPARSE multiplies CSR, not every CSC)."""
    return A.t_matmul(alpha) if hasattr(A, "t_matmul") else A.t().to_sparse_csr() @ alpha


def loss_values(margins, y, loss):
    if loss == "squared":
        return 0.5 * (margins - y) ** 2
    if loss == "hinge":
        return torch.clamp(1 - y * margins, min=0)
    if loss == "squared_hinge":
        return torch.clamp(1 - y * margins, min=0) ** 2
    if loss == "logistic":
        return torch.nn.functional.softplus(-y * margins)
    raise ValueError(f"unknown loss {loss!r}: one of {', '.join(LOSSES)}")


def primal_value(A, y, beta, loss, l2, l1=0.0, margins=None):
    """P(beta), in float64 (margins: A beta, when the caller has it)."""
    y, beta = y.double(), beta.double()
    margins = _rows(_f64(A), beta) if margins is None else margins
    return float(loss_values(margins, y, loss).mean() + 0.5 * l2 * beta.dot(beta) + l1 * beta.abs().sum())


def conjugate_terms(alpha, y, loss):
    """phi*(-alpha_n, y_n) for every n (inf where alpha_n is outside the conjugate's domain)."""
    b = y * alpha
    if loss == "squared":
        return -alpha * y + 0.5 * alpha ** 2
    if loss == "hinge":
        return torch.where((b >= 0) & (b <= 1), -b, math.inf)
    if loss == "squared_hinge":
        return torch.where(b >= 0, -b + 0.25 * b ** 2, math.inf)
    if loss == "logistic":
        inside = (b >= 0) & (b <= 1)
        entropy = torch.xlogy(b, b) + torch.xlogy(1 - b, 1 - b)
        return torch.where(inside, entropy, math.inf)
    raise ValueError(f"unknown loss {loss!r}: one of {', '.join(LOSSES)}")


def dual_value(A, y, alpha, loss, l2, v=None):
    """D(alpha) of an l2-regularized problem, in float64 (v: A^T alpha, when the caller has it)."""
    y, alpha = y.double(), alpha.double()
    n = y.numel()
    v = columns_product(_f64(A), alpha) if v is None else v
    return float(-conjugate_terms(alpha, y, loss).mean() - v.dot(v) / (2 * l2 * n * n))


def beta_of_alpha(A, alpha, l2):
    """The primal point of a dual one: A^T alpha / (l2 N)."""
    return columns_product(_f64(A), alpha.double()) / (l2 * alpha.numel())


def alpha_of_beta(A, y, beta):
    """The dual point of a squared-loss primal one: the residual y - A beta."""
    return y.double() - _rows(_f64(A), beta.double())


def alpha_of_margins(margins, y, loss):
    """The dual point of a primal one through its margins A beta: alpha = -phi'(margin) (a smooth
    loss; the dual's optimum at the primal's)."""
    y, margins = y.double(), margins.double()
    if loss == "squared_hinge":
        return 2 * y * torch.clamp(1 - y * margins, min=0)
    if loss == "logistic":
        return y * torch.sigmoid(-y * margins)
    raise ValueError(f"alpha_of_margins takes the squared hinge or the logistic loss, got {loss!r}")


def margin_objectives(A, y, beta, loss, l2):
    """(P(beta), D(alpha(beta))) of a smooth classification loss: the primal solver's certificate
    (two passes over A)."""
    A, beta = _f64(A), beta.double()
    margins = _rows(A, beta)
    return (primal_value(A, y, beta, loss, l2, margins=margins),
            dual_value(A, y, alpha_of_margins(margins, y, loss), loss, l2))


def dual_objectives(A, y, alpha, loss, l2):
    """(P(beta(alpha)), D(alpha)): the dual solver's certificate (two passes over A)."""
    alpha = alpha.double()
    v = columns_product(_f64(A), alpha)
    beta = v / (l2 * alpha.numel())
    return primal_value(A, y, beta, loss, l2), dual_value(A, y, alpha, loss, l2, v=v)


def dual_gap(A, y, alpha, loss, l2):
    primal, dual = dual_objectives(A, y, alpha, loss, l2)
    return primal - dual


def primal_objectives(A, y, beta, l2, l1=0.0):
    """(P(beta), D(theta)) of the squared loss with l1 and l2 (ridge, lasso, elastic net), theta the
    residual over N; with l2 = 0 (lasso) theta is scaled into the dual's domain ||A^T theta||_inf <= l1
    (two passes over A)."""
    A, y, beta = _f64(A), y.double(), beta.double()
    n = y.numel()
    margins = _rows(A, beta)
    theta = (y - margins) / n
    correlation = columns_product(A, theta)
    if l2 == 0:
        largest = float(correlation.abs().max()) if correlation.numel() else 0.0
        scale = 1.0 if largest <= l1 else l1 / largest
        theta, correlation = theta * scale, correlation * scale
        conjugate = 0.0
    else:
        conjugate = float((torch.clamp(correlation.abs() - l1, min=0) ** 2).sum() / (2 * l2))
    dual = float(-0.5 * n * theta.dot(theta) + theta.dot(y)) - conjugate
    return primal_value(A, y, beta, "squared", l2, l1, margins=margins), dual


def primal_gap(A, y, beta, l2, l1=0.0):
    primal, dual = primal_objectives(A, y, beta, l2, l1)
    return primal - dual


def ridge_optimum(A, y, l2):
    """The closed-form ridge minimizer (A^T A / N + l2 I)^-1 A^T y / N, in float64 (small problems)."""
    A, y = _f64(A).to_dense(), y.double()
    n, m = A.shape
    return torch.linalg.solve(A.t() @ A / n + l2 * torch.eye(m, dtype=torch.float64, device=A.device), A.t() @ y / n)


def _f64(A):
    """A whose products are float64 (a CompressedMatrix's always are)."""
    return A if hasattr(A, "t_matmul") or A.dtype == torch.float64 else A.double()
