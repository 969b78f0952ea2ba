"""solver="scd" of alac's linear estimators: stochastic coordinate descent to a duality-gap
tolerance (alac.runtime.solvers.scd), instead of SGD epochs.

The objective is P(beta) = 1/N sum_n loss(x_n . beta, y_n) + alpha/2 ||beta||^2 (+ l1 ||beta||_1
for Ridge's elastic net), with the intercept (fit_intercept) a column of ones regularized like the
others, as LIBLINEAR does. In scikit-learn's units: Ridge(alpha=alpha N), LinearSVC(C=1 / (alpha N)),
LogisticRegression(C=1 / (alpha N)); Lasso's alpha is scikit-learn's. LinearSVC solves the dual
(SDCA, hinge loss), Lasso the primal, LogisticRegression either (the dual unless dual=False: rows
that share popular features couple in the dual and few step at once, columns rarely do), Ridge
either (its `dual`: "auto" takes the dual when there are fewer rows than features). Fitted:
coef_, intercept_, n_iter_ (epochs), form_ ("primal" or "dual"), duality_gap_ and gap_history_ (the
gap after every epoch).
"""

from __future__ import annotations

import warnings

import numpy as np
import torch
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils.validation import check_is_fitted, validate_data

# each estimator's loss
LOSSES = {"LogisticRegression": "logistic", "LinearSVC": "hinge", "Ridge": "squared", "Lasso": "squared"}


def form_of(estimator, n_rows, n_features, l1):
    """"primal" or "dual": LinearSVC the dual (the hinge's primal steps are not smooth),
    LogisticRegression the dual unless dual=False, Lasso and an elastic net the primal, Ridge as
    `dual` says ("auto": the dual when there are fewer rows than features, scikit-learn
    LinearSVC's rule)."""
    name, dual = type(estimator).__name__, getattr(estimator, "dual", "auto")
    if dual not in ("auto", True, False):
        raise ValueError(f"{name}: dual is 'auto', True or False, got {dual!r}")
    if LOSSES[name] == "hinge":
        if dual is False:
            raise ValueError(f"{name}(solver='scd') solves the dual (the hinge loss's primal steps are not smooth): "
                             "dual=False is LogisticRegression's, Ridge's and Lasso's")
        return "dual"
    if LOSSES[name] == "logistic":
        return "primal" if dual is False else "dual"
    if name == "Lasso" or l1 > 0:
        if dual is True:
            raise ValueError(f"{name}(solver='scd') with l1 solves the primal: dual=True takes no l1")
        return "primal"
    return "dual" if dual is True or (dual == "auto" and n_rows < n_features) else "primal"


def regularization(estimator):
    """(l2, l1) of the estimator's objective, refused when negative."""
    name = type(estimator).__name__
    if name == "Lasso":
        l1, l2 = float(estimator.alpha), 0.0
    else:
        l1, l2 = float(getattr(estimator, "l1", 0.0) or 0.0), float(estimator.alpha or 0.0)
    if l1 < 0 or l2 < 0:
        raise ValueError(f"{name}: alpha and l1 are >= 0, got alpha={estimator.alpha}")
    return l2, l1


def fit_scd(estimator, X, y):
    from alac.runtime.solvers.cocoa_ranks import solver_over_ranks
    from alac.runtime.solvers.scd import with_constant_feature
    from alac.sklearn.inputs import sparse_dataset

    l2, l1 = regularization(estimator)
    X, y = validate_data(estimator, X, y, accept_sparse="csr", dtype=[np.float64, np.float32],
                         y_numeric=estimator._kind == "regressor")
    data = sparse_dataset(X, estimator._targets(y, first=True))
    if estimator.fit_intercept:
        data = with_constant_feature(data)
    loss = LOSSES[type(estimator).__name__]
    form = form_of(estimator, data.n_rows, data.n_features, l1)
    if (form == "dual" or loss != "squared") and (l2 <= 0 or l1 > 0):
        raise ValueError(f"{type(estimator).__name__}(solver='scd') solves the {form} of the {loss} loss: it needs "
                         f"alpha > 0 (C = 1 / (alpha N)) and no l1, got alpha={estimator.alpha}, l1={l1}")
    backend = "sequential" if estimator.backend == "reference" or not torch.cuda.is_available() else "triton"
    # under torchrun each rank steps its share of the coordinates (alac.runtime.solvers.cocoa_ranks)
    solver = solver_over_ranks(data, form, loss, l2=l2, l1=l1, backend=backend, seed=estimator.random_state or 0)
    name = type(estimator).__name__
    solver.fit(max_epochs=estimator.epochs, tol=estimator.tol,
               log=(lambda line: print(f"{name}: {line}", flush=True)) if estimator.verbose else None)
    coef = solver.coef_.cpu().numpy()
    weights, intercept = (coef[:-1], coef[-1]) if estimator.fit_intercept else (coef, 0.0)
    estimator.coef_ = weights.reshape(1, -1) if estimator._kind == "classifier" else weights
    estimator.intercept_ = np.array([intercept])
    estimator.n_iter_, estimator.form_ = solver.epochs, form
    estimator.gap_history_ = [h["gap"] for h in solver.history]
    estimator.duality_gap_ = estimator.gap_history_[-1]
    estimator._scd_fit = True
    if solver.stopped_because != "tol":
        advice = "raise epochs" if solver.stopped_because == "max_epochs" else "the gap diverged"
        warnings.warn(f"{type(estimator).__name__}(solver='scd') stopped after {solver.epochs} epochs at duality gap "
                      f"{estimator.duality_gap_:.2e} > tol={estimator.tol:g}: {advice}", ConvergenceWarning,
                      stacklevel=3)
    return estimator


def scd_raw(estimator, X):
    """The margins x . coef + intercept (LogisticRegression: their probabilities)."""
    check_is_fitted(estimator, "coef_")
    X = validate_data(estimator, X, accept_sparse="csr", dtype=[np.float64, np.float32], reset=False)
    scores = np.asarray(X @ estimator.coef_.reshape(-1)).reshape(-1) + estimator.intercept_[0]
    return 1 / (1 + np.exp(-scores)) if getattr(estimator, "_probabilistic", False) else scores
