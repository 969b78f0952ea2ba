"""Sequential stochastic coordinate descent in float64 on the CPU: the reference the SCD kernels
(alac.codegen.scd_kernels) are checked against and the sequential solver the benchmark compares
with. One coordinate after the other, in the order given, each step exact (the dual logistic step
solved by Newton's method to float64 resolution); compiled by numba, since a Python loop over
coordinates would take minutes per epoch on the benchmark's sets.
"""

from __future__ import annotations

import math

import numba
import numpy as np

LOSS_CODES = {"squared": 0, "hinge": 1, "squared_hinge": 2, "logistic": 3}
# the dual logistic coordinate's b = y alpha stays inside (0, 1): its log-odds are finite
B_MARGIN = 1e-12


@numba.njit(cache=True)
def primal_epoch(order, start, index, value, norm, y, beta, w, n_rows, l1, l2):
    """One epoch of the squared loss's coordinate steps (ridge, lasso, elastic net) in place."""
    for m in order:
        dot = 0.0
        for e in range(start[m], start[m + 1]):
            dot += value[e] * (y[index[e]] - w[index[e]])
        denominator = norm[m] + n_rows * l2
        if denominator <= 0.0:
            continue
        numerator = dot + norm[m] * beta[m]
        magnitude = max(abs(numerator) - n_rows * l1, 0.0)
        delta = math.copysign(magnitude, numerator) / denominator - beta[m]
        beta[m] += delta
        for e in range(start[m], start[m + 1]):
            w[index[e]] += value[e] * delta


@numba.njit(cache=True)
def _logistic_step(x, y, u, q):
    """The dual logistic coordinate's exact step: the log-odds t of b = y (x + delta) solving
    -t - y u - (b - y x) q = 0 by Newton steps kept inside a bracket of the root (halved in b)."""
    b0 = y * x
    bound = math.log(B_MARGIN / (1.0 - B_MARGIN))
    low, high = max(-y * u - q * (1.0 - b0), bound), min(-y * u + q * b0, -bound)
    b = min(max(b0, B_MARGIN), 1.0 - B_MARGIN)
    t = min(max(math.log(b / (1.0 - b)), low), high)
    for _ in range(200):
        b = 1.0 / (1.0 + math.exp(-t))
        g = -t - y * u - (b - b0) * q
        if abs(g) <= 1e-13 * (1.0 + q):
            break
        if g > 0.0:
            low = t
        else:
            high = t
        newton = t + g / (1.0 + q * b * (1.0 - b))
        if low < newton < high:
            t = newton
        else:
            middle = 0.5 * (1.0 / (1.0 + math.exp(-low)) + 1.0 / (1.0 + math.exp(-high)))
            t = math.log(middle / (1.0 - middle))
    b = 1.0 / (1.0 + math.exp(-t))
    return y * min(max(b, B_MARGIN), 1.0 - B_MARGIN) - x


@numba.njit(cache=True)
def dual_epoch(order, start, index, value, norm, y, alpha, v, lambda_n, loss):
    """One epoch of SDCA's coordinate steps (loss: a LOSS_CODES value) in place; v = A^T alpha."""
    for n in order:
        dot = 0.0
        for e in range(start[n], start[n + 1]):
            dot += value[e] * v[index[e]]
        x = alpha[n]
        if loss == 0:
            delta = (lambda_n * (y[n] - x) - dot) / (lambda_n + norm[n])
        else:
            u = dot / lambda_n
            q = max(norm[n] / lambda_n, 1e-300)
            if loss == 1:
                delta = y[n] * min(max((1.0 - y[n] * u) / q + y[n] * x, 0.0), 1.0) - x
            elif loss == 2:
                delta = y[n] * max(-y[n] * x, (1.0 - y[n] * u - 0.5 * y[n] * x) / (q + 0.5))
            else:
                delta = _logistic_step(x, y[n], u, q)
        alpha[n] += delta
        for e in range(start[n], start[n + 1]):
            v[index[e]] += value[e] * delta


def as_float64(*arrays):
    return [np.ascontiguousarray(a, dtype=np.float64) for a in arrays]


@numba.njit(cache=True)
def margin_epoch(order, start, index, value, y, beta, margin, n_rows, l2, loss):
    """One epoch of the primal's Newton steps of a smooth loss (LOSS_CODES: squared hinge or
    logistic) over columns, in place: column m steps by -g / h, g and h the derivatives of its 1-D
    objective at its rows' margins (margin = A beta), which then move."""
    for m in order:
        g = 0.0
        h = 0.0
        for e in range(start[m], start[m + 1]):
            i = index[e]
            if loss == 2:
                slack = max(1.0 - y[i] * margin[i], 0.0)
                slope, curve = -2.0 * y[i] * slack, 2.0 if slack > 0.0 else 0.0
            else:
                s = 1.0 / (1.0 + math.exp(y[i] * margin[i]))      # sigma(-y z)
                slope, curve = -y[i] * s, s * (1.0 - s)
            g += value[e] * slope
            h += value[e] * value[e] * curve
        denominator = h + n_rows * l2
        if denominator <= 0.0:
            continue
        delta = -(g + n_rows * l2 * beta[m]) / denominator
        beta[m] += delta
        for e in range(start[m], start[m + 1]):
            margin[index[e]] += value[e] * delta
