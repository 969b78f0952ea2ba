"""alac.sklearn.linear's solver="scd" (alac.sklearn.scd): the estimators reach scikit-learn's solutions of
the same objectives, report their duality gap, and refuse what the solver cannot fit."""

import warnings

import numpy as np
import pytest
import scipy.sparse
import sklearn.linear_model
import sklearn.svm
from sklearn.exceptions import ConvergenceWarning

from alac.sklearn.linear import Lasso, LinearSVC, LogisticRegression, Ridge

ALPHA = 1e-2


def _data(n=300, d=30, seed=0, classes=False):
    rng = np.random.default_rng(seed)
    X = scipy.sparse.random(n, d, density=0.3, random_state=seed, format="csr")
    y = X @ rng.normal(size=d) + 0.1 * rng.normal(size=n)
    return X, (y > np.median(y)).astype(int) if classes else y


def _close(ours, theirs, tolerance):
    assert np.abs(np.ravel(ours) - np.ravel(theirs)).max() <= tolerance * np.abs(theirs).max()


@pytest.mark.filterwarnings("ignore:Liblinear failed to converge")
@pytest.mark.parametrize("fit_intercept", [False, True])
def test_the_scd_estimators_reach_scikit_learns_solutions(fit_intercept):
    X, y = _data()
    n = X.shape[0]
    exact = {"fit_intercept": fit_intercept, "tol": 1e-12, "max_iter": 200_000}
    ridge = Ridge(solver="scd", alpha=ALPHA, fit_intercept=fit_intercept, epochs=500, tol=1e-12).fit(X, y)
    if not fit_intercept:      # scikit-learn's Ridge leaves its intercept unregularized
        _close(ridge.coef_, sklearn.linear_model.Ridge(alpha=ALPHA * n, fit_intercept=False).fit(X, y).coef_, 1e-4)
        lasso = Lasso(alpha=ALPHA, fit_intercept=False, epochs=500, tol=1e-12).fit(X, y)
        _close(lasso.coef_, sklearn.linear_model.Lasso(alpha=ALPHA, **exact).fit(X, y).coef_, 1e-4)
    X, y = _data(classes=True)
    # LIBLINEAR regularizes the intercept as a constant feature (intercept_scaling 1), as alac does
    svc = LinearSVC(solver="scd", alpha=ALPHA, fit_intercept=fit_intercept, epochs=2000, tol=1e-8).fit(X, y)
    theirs = sklearn.svm.LinearSVC(C=1 / (ALPHA * n), loss="hinge", dual=True, random_state=0, **exact).fit(X, y)
    _close(np.append(svc.coef_, svc.intercept_), np.append(theirs.coef_, theirs.intercept_), 1e-2)
    if not fit_intercept:
        logistic = LogisticRegression(solver="scd", alpha=ALPHA, fit_intercept=False, epochs=500, tol=1e-12).fit(X, y)
        theirs = sklearn.linear_model.LogisticRegression(C=1 / (ALPHA * n), **exact).fit(X, y)
        _close(logistic.coef_, theirs.coef_, 1e-4)
        np.testing.assert_allclose(logistic.predict_proba(X), theirs.predict_proba(X), atol=1e-5)
        assert (logistic.predict(X) == theirs.predict(X)).all()
        primal = LogisticRegression(solver="scd", alpha=ALPHA, fit_intercept=False, dual=False, epochs=500,
                                    tol=1e-12).fit(X, y)
        assert primal.form_ == "primal" and logistic.form_ == "dual"
        _close(primal.coef_, theirs.coef_, 1e-4)


def test_a_fit_reports_its_gap_history_and_warns_when_it_stops_short(capsys):
    X, y = _data(classes=True)
    model = LogisticRegression(solver="scd", alpha=ALPHA, tol=1e-9, epochs=200, verbose=1).fit(X, y)
    assert model.duality_gap_ == model.gap_history_[-1] <= 1e-9 and model.n_iter_ == len(model.gap_history_)
    assert capsys.readouterr().out.splitlines()[0].startswith("LogisticRegression: epoch 1: gap ")
    assert model.gap_history_[0] > 1e3 * model.duality_gap_
    with pytest.warns(ConvergenceWarning, match="duality gap"):
        LogisticRegression(solver="scd", alpha=ALPHA, tol=1e-12, epochs=2).fit(X, y)


def test_ridge_solves_the_dual_when_asked_or_when_rows_are_fewer_than_features():
    X, y = _data()
    n = X.shape[0]
    theirs = sklearn.linear_model.Ridge(alpha=ALPHA * n, fit_intercept=False).fit(X, y).coef_
    for dual, form in ((True, "dual"), (False, "primal"), ("auto", "primal")):
        ours = Ridge(solver="scd", alpha=ALPHA, fit_intercept=False, dual=dual, epochs=1000, tol=1e-12).fit(X, y)
        assert ours.form_ == form
        _close(ours.coef_, theirs, 1e-4)
    wide, y = _data(n=30, d=100)
    assert Ridge(solver="scd", alpha=ALPHA, epochs=50).fit(wide, y).form_ == "dual"


def test_what_the_scd_solver_cannot_fit_is_refused():
    X, y = _data(classes=True)
    with pytest.raises(ValueError, match="needs alpha > 0"):
        LogisticRegression(solver="scd").fit(X, y)
    with pytest.raises(ValueError, match="dual=False is LogisticRegression's, Ridge's and Lasso's"):
        LinearSVC(solver="scd", alpha=ALPHA, dual=False).fit(X, y)
    with pytest.raises(ValueError, match="solves the primal of the logistic loss: it needs alpha > 0"):
        LogisticRegression(solver="scd", dual=False).fit(X, y)
    with pytest.raises(ValueError, match="solves the dual of the squared loss: it needs alpha > 0"):
        Ridge(solver="scd", dual=True).fit(*_data())
    with pytest.raises(ValueError, match="solver is one of 'sgd', 'scd', got 'newton'"):
        LogisticRegression(solver="newton").fit(X, y)
    with pytest.raises(ValueError, match="fit_intercept=False needs solver='scd'"):
        LogisticRegression(fit_intercept=False).fit(X, y)
    assert not hasattr(LogisticRegression(solver="scd"), "partial_fit")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert hasattr(LogisticRegression(), "partial_fit")
