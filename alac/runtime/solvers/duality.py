"""The objectives of alac's coordinate descent solvers, evaluated in float64, and the maps between
primal and dual points (TPA-SCD's notation, the SDCA scaling of Shalev-Shwartz and Zhang).

A is N x M (rows are examples; a sparse CSR tensor or an alac.runtime.solvers.compressed.CompressedMatrix),
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


def one_process(tensor, op="sum"):
    """The objectives' reduce of one process: its share of every sum is the whole sum."""
    return tensor


def _rows(A, beta):
    return A @ beta


def columns_product(A, alpha):
    """A^T alpha: of an alac.runtime.solvers.compressed.CompressedMatrix, or of a sparse CSR tensor (as a CSR
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


def beta_of_alpha(A, alpha, l2, n=None, reduce=one_process):
    """The primal point of a dual one: A^T alpha / (l2 N) (n, reduce: as dual_objectives')."""
    return reduce(columns_product(_f64(A), alpha.double())) / (l2 * (alpha.numel() if n is None else n))


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


def margin_objectives(A, y, beta, loss, l2, reduce=one_process):
    """(P(beta), D(alpha(beta))) of a smooth classification loss: the primal solver's certificate
    (two passes over A). reduce(tensor, op) adds up the ranks' shares of a sum where A's columns and
    beta are split over ranks (alac.runtime.solvers.cocoa_ranks)."""
    A, y, beta = _f64(A), y.double(), beta.double()
    n = y.numel()
    margins = reduce(_rows(A, beta))
    alpha = alpha_of_margins(margins, y, loss)
    v = columns_product(A, alpha)
    sums = reduce(torch.stack([beta.dot(beta), v.dot(v)]))
    return (float(loss_values(margins, y, loss).mean() + 0.5 * l2 * sums[0]),
            float(-conjugate_terms(alpha, y, loss).mean() - sums[1] / (2 * l2 * n * n)))


def dual_objectives(A, y, alpha, loss, l2, n=None, reduce=one_process):
    """(P(beta(alpha)), D(alpha)): the dual solver's certificate (two passes over A). Where A's rows,
    y and alpha are one rank's share, n is the whole problem's rows and reduce (margin_objectives)
    adds the ranks' shares up."""
    A, y, alpha = _f64(A), y.double(), alpha.double()
    n = alpha.numel() if n is None else n
    v = reduce(columns_product(A, alpha))
    beta = v / (l2 * n)
    sums = reduce(torch.stack([loss_values(_rows(A, beta), y, loss).sum(), conjugate_terms(alpha, y, loss).sum()]))
    return float(sums[0] / n + 0.5 * l2 * beta.dot(beta)), float(-sums[1] / n - v.dot(v) / (2 * l2 * n * n))


def dual_gap(A, y, alpha, loss, l2):
    primal, dual = dual_objectives(A, y, alpha, loss, l2)
    return primal - dual


def primal_objectives(A, y, beta, l2, l1=0.0, reduce=one_process):
    """(P(beta), D(theta)) of the squared loss with l1 and l2 (ridge, lasso, elastic net), theta the
    residual over N; with l2 = 0 (lasso) theta is scaled into the dual's domain ||A^T theta||_inf <= l1
    (two passes over A). reduce: as margin_objectives'."""
    A, y, beta = _f64(A), y.double(), beta.double()
    n = y.numel()
    margins = reduce(_rows(A, beta))
    theta = (y - margins) / n
    correlation = columns_product(A, theta)
    if l2 == 0:
        largest = (correlation.abs().max().reshape(1) if correlation.numel()
                   else torch.zeros(1, dtype=torch.float64, device=y.device))
        largest = float(reduce(largest, op="max")[0])
        theta = theta * (1.0 if largest <= l1 else l1 / largest)
        conjugate = torch.zeros((), dtype=torch.float64, device=y.device)
    else:
        conjugate = (torch.clamp(correlation.abs() - l1, min=0) ** 2).sum() / (2 * l2)
    sums = reduce(torch.stack([beta.dot(beta), beta.abs().sum(), conjugate]))
    dual = float(-0.5 * n * theta.dot(theta) + theta.dot(y) - sums[2])
    return float(loss_values(margins, y, "squared").mean() + 0.5 * l2 * sums[0] + l1 * sums[1]), dual


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
