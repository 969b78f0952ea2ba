"""FMRegressor and FMClassifier with solver="als" | "mcmc" (alac.sklearn.fm_coordinate): ALS without
factors is scikit-learn's Ridge; MCMC learns planted ratings (a matrix, or a DataFrame whose columns
are its fields) and probit classes; myFM's sampler on the same data where it is installed; what they
cannot fit is refused."""

import numpy as np
import pytest
import scipy.sparse as sps
import sklearn.linear_model

from alac.data.synthetic import ratings_like
from alac.sklearn import FMClassifier, FMRegressor


def _ratings(rows, first_row=0, noise_std=0.3):
    data = ratings_like(rows, n_users=60, n_items=30, k=3, noise_std=noise_std, seed=2, device="cpu",
                        first_row=first_row)
    ids = data.indices.long().view(-1, 2).numpy()
    X = sps.csr_matrix((np.ones(2 * rows), ids.reshape(-1), np.arange(0, 2 * rows + 1, 2)), shape=(rows, 90))
    return X, data.labels.double().numpy(), ids


def test_als_without_factors_is_ridge_regression():
    X, y, _ = _ratings(1500)
    # the bias and each one-hot field's weights are nearly collinear: coordinate descent creeps along them
    ours = FMRegressor(solver="als", n_factors=0, alpha=5.0, epochs=1000, backend="reference").fit(X, y)
    theirs = sklearn.linear_model.Ridge(alpha=5.0).fit(X.toarray(), y)      # dense: its exact solver
    np.testing.assert_allclose(ours.coef_, theirs.coef_, atol=1e-6)
    assert ours.intercept_[0] == pytest.approx(theirs.intercept_, abs=1e-6)
    np.testing.assert_allclose(ours.predict(X[:50]), theirs.predict(X[:50].toarray()), atol=1e-6)


def test_mcmc_learns_planted_ratings_from_a_matrix_or_a_frame():
    pandas = pytest.importorskip("pandas")
    X, y, ids = _ratings(5000)
    X_test, y_test, ids_test = _ratings(1000, first_row=5000)
    fitted = FMRegressor(solver="mcmc", n_factors=4, epochs=60, random_state=0, backend="reference").fit(X, y)
    rmse = np.sqrt(np.mean((fitted.predict(X_test) - y_test) ** 2))
    assert 0.3 < rmse < 0.6 * y.std() and fitted.samples_ == 48 and fitted.n_iter_ == 60
    assert fitted.factors_.shape == (90, 4) and fitted.noise_precision_ > 1     # the noise's precision is 11
    frame = pandas.DataFrame({"user": ids[:, 0].astype(str), "item": ids[:, 1].astype(str)})
    test_frame = pandas.DataFrame({"user": ids_test[:, 0].astype(str), "item": ids_test[:, 1].astype(str)})
    by_columns = FMRegressor(solver="mcmc", n_factors=4, epochs=60, random_state=0, backend="reference")
    framed = np.sqrt(np.mean((by_columns.fit(frame, y).predict(test_frame) - y_test) ** 2))
    assert framed == pytest.approx(rmse, abs=0.03)


def test_mcmc_classifies_by_probit():
    X, y, _ = _ratings(4000)
    X_test, y_test, _ = _ratings(1000, first_row=4000)
    classes = np.where(y > np.median(y), "liked", "not")
    fitted = FMClassifier(solver="mcmc", n_factors=4, epochs=40, random_state=0, backend="reference").fit(X, classes)
    probability = fitted.predict_proba(X_test)
    assert list(fitted.classes_) == ["liked", "not"] and np.allclose(probability.sum(1), 1)
    positive = np.where(y_test > np.median(y), "liked", "not") == fitted.classes_[1]
    assert sklearn.metrics.roc_auc_score(positive, probability[:, 1]) > 0.8
    assert set(fitted.predict(X_test)) <= {"liked", "not"}


def test_mcmc_scores_as_myfms_sampler_on_the_same_data():
    myfm = pytest.importorskip("myfm")
    X, y, _ = _ratings(5000, noise_std=0.5)
    X_test, y_test, _ = _ratings(2000, first_row=5000, noise_std=0.5)
    ours = FMRegressor(solver="mcmc", n_factors=4, epochs=100, burn_in=20, init_std=0.1, random_state=0,
                       backend="reference").fit(X, y)
    theirs = myfm.MyFMRegressor(rank=4, random_seed=0).fit(X, y, n_iter=100, n_kept_samples=80,
                                                           group_shapes=[60, 30])
    rmse = [np.sqrt(np.mean((model.predict(X_test) - y_test) ** 2)) for model in (ours, theirs)]
    assert rmse[0] == pytest.approx(rmse[1], abs=0.01)


def test_what_the_coordinate_solvers_cannot_fit_is_refused():
    X, y, _ = _ratings(200)
    with pytest.raises(ValueError, match=r"FMClassifier\(solver='als'\) fits the squared loss"):
        FMClassifier(solver="als").fit(X, y > 3)
    with pytest.raises(ValueError, match="draws its priors' precisions: leave alpha None"):
        FMRegressor(solver="mcmc", alpha=0.1).fit(X, y)
    with pytest.raises(ValueError, match="solver is one of 'sgd', 'als', 'mcmc', got 'scd'"):
        FMRegressor(solver="scd").fit(X, y)
