"""CoCoA's aggregation of the workers' changes (alac.runtime.solvers.scd's virtual workers, the ranks of
alac.runtime.solvers.cocoa_ranks): each epoch every worker steps its own coordinates from the same shared
vector, their changes are summed into one direction (d_alpha, d_v) and applied times gamma:

- "averaging": 1 / K; "adding": 1;
- "adaptive": the exact line search of the squared loss along the direction (TPA-SCD Eq. 7 with its
  errata: y in the primal's numerator, and the dual's denominator ||dv||^2 / l2 + N ||dalpha||^2);
- "subspace": the exact maximum of the squared loss's objective over the plane of this epoch's
  direction and the step the previous epoch took, gamma_1 d_t + gamma_2 s_{t-1}: the line search
  zig-zags (gamma near 1 and 1/K in turn, each epoch undoing part of the last one's overshoot), the
  plane search takes both at once, as conjugate gradients do. On the Criteo-shaped dual ridge
  (benchmarks/scd.py's generator, 200,000 x 75,000 at lambda 1, the lambda N of the 200M-row
  problem at 1e-3; the sequential local solver) it reaches gap 1e-6 in 6 / 5 / 6 epochs at K = 2 /
  4 / 8 against the line search's 6 / 10 / 10.

One worker may search too (alac.runtime.solvers.scd.ScdSolver(aggregation="subspace")): its epoch's change and its
previous step, the plain epoch being the plane's point (1, 0); on the webspam-shaped primal ridge at 1/32
size it reaches gap 1e-8 in 29 epochs against plain SCD's 82.

Both searches need a few float64 sums: over the coordinates (each rank's share, added up by one
all-reduce) and over the shared vector (the same on every rank after its own all-reduce).
"""

from __future__ import annotations

import torch

from alac.errors import OptionError

AGGREGATIONS = ("adaptive", "subspace", "averaging", "adding")
# the aggregations that search the squared loss's objective (no l1)
SEARCHES = ("adaptive", "subspace")
# a plane whose two directions are this close to parallel (the Gram determinant over the product of
# its diagonal) is searched along the first direction alone
PARALLEL = 1e-10


def resolve_aggregation(aggregation, loss, l1, workers):
    """The aggregation of a solver of `workers` workers, checked (OptionError): by default (None) over
    several workers the plane search where the objective is the squared loss's (no l1), averaging
    elsewhere, and for one worker "adding" (its epoch's change as it is: plain SCD)."""
    if aggregation is None:
        if workers == 1:
            return "adding"
        return "subspace" if loss == "squared" and not l1 else "averaging"
    if aggregation not in AGGREGATIONS:
        raise OptionError(f"aggregation is one of {', '.join(AGGREGATIONS)}, got {aggregation!r}")
    if aggregation in SEARCHES and (loss != "squared" or l1 > 0):
        raise OptionError(f"{aggregation} aggregation searches the squared loss's objective (no l1): choose "
                          "averaging or adding for this problem")
    return aggregation


def _pairs(count):
    return [(i, j) for i in range(count) for j in range(i, count)]


def coordinate_dots(form, x, steps, labels):
    """The searches' sums over the coordinates, float64 (a rank's share of them adds up): per step
    beta . dbeta (primal) or dalpha . (y - alpha) (dual), then every pair's dot product."""
    x = x.double()
    steps = [step.double() for step in steps]
    firsts = [x.dot(step) if form == "primal" else step.dot(labels.double() - x) for step in steps]
    return torch.stack(firsts + [steps[i].dot(steps[j]) for i, j in _pairs(len(steps))])


def shared_dots(form, shared, changes, labels):
    """The searches' sums over the shared vector, float64: per change (y - w) . dw (primal) or
    v . dv (dual), then every pair's dot product."""
    shared = shared.double()
    changes = [change.double() for change in changes]
    firsts = [(labels.double() - shared).dot(change) if form == "primal" else shared.dot(change) for change in changes]
    return torch.stack(firsts + [changes[i].dot(changes[j]) for i, j in _pairs(len(changes))])


def cocoa_gammas(aggregation, workers, form=None, n=None, l2=None, coordinates=None, shared=None):
    """gamma per direction: [1 / K] (averaging), [1] (adding), or the exact maximum of the squared
    loss's objective over the directions (adaptive: one, subspace: up to two) from coordinate_dots and
    shared_dots. The objective along gamma is g . gamma - gamma' H gamma / 2."""
    if aggregation == "averaging":
        return [1.0 / workers]
    if aggregation == "adding":
        return [1.0]
    count = 1 if len(coordinates) == 2 else 2
    c, s = coordinates.tolist(), shared.tolist()
    if form == "primal":
        g = [s[i] - n * l2 * c[i] for i in range(count)]
        entries = [s[count + p] + n * l2 * c[count + p] for p in range(len(_pairs(count)))]
    else:
        g = [n * c[i] - s[i] / l2 for i in range(count)]
        entries = [n * c[count + p] + s[count + p] / l2 for p in range(len(_pairs(count)))]
    h = {pair: value for pair, value in zip(_pairs(count), entries)}
    if count == 2:
        determinant = h[0, 0] * h[1, 1] - h[0, 1] ** 2
        if determinant > PARALLEL * h[0, 0] * h[1, 1]:
            return [(g[0] * h[1, 1] - g[1] * h[0, 1]) / determinant, (g[1] * h[0, 0] - g[0] * h[0, 1]) / determinant]
    return [g[0] / h[0, 0] if h[0, 0] > 0 else 1.0 / workers] + [0.0] * (count - 1)
