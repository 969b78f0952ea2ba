"""alac.sklearn.deep: the deep classifiers as scikit-learn estimators on one-hot sparse matrices (fields
by position or given), against the planted model and scikit-learn's conventions."""

import pickle

import numpy as np
import pytest
import scipy.sparse
from sklearn.metrics import roc_auc_score

from alac.errors import OptionError
from alac.sklearn.deep import DeepFMClassifier, DLRMClassifier, FFMClassifier, WideAndDeepClassifier

FIELDS, VALUES = 5, 12


def _one_hot(rows, seed=0):
    rng = np.random.default_rng(seed)
    columns = rng.integers(0, VALUES, (rows, FIELDS)) + VALUES * np.arange(FIELDS)
    weights = np.random.default_rng(1).normal(size=VALUES * FIELDS)
    labels = np.where(rng.random(rows) < 1 / (1 + np.exp(-weights[columns].sum(1))), "click", "no")
    X = scipy.sparse.csr_matrix((np.ones(rows * FIELDS), columns.ravel(), np.arange(0, rows * FIELDS + 1, FIELDS)),
                                shape=(rows, VALUES * FIELDS))
    return X, labels


@pytest.mark.parametrize("estimator", [DeepFMClassifier, WideAndDeepClassifier, FFMClassifier])
def test_a_deep_classifier_learns_one_hot_fields_by_position(estimator):
    X, y = _one_hot(5000)
    model = estimator(k=4, hidden=(16,), epochs=8, batch_size=256, learning_rate=0.05, n_iter_no_change=8,
                      device="cpu", random_state=0).fit(X, y)
    assert list(model.classes_) == ["click", "no"] and model.n_features_in_ == VALUES * FIELDS and model.n_iter_ == 8
    X_test, y_test = _one_hot(2000, seed=5)
    probability = model.predict_proba(X_test)
    assert probability.shape == (2000, 2) and np.allclose(probability.sum(1), 1)
    assert roc_auc_score(y_test == "no", probability[:, 1]) > 0.8
    assert set(model.predict(X_test)) <= {"click", "no"}
    assert np.array_equal(model.predict(X_test), model.classes_[(model.decision_function(X_test) > 0).astype(int)])
    again = pickle.loads(pickle.dumps(model))
    np.testing.assert_allclose(again.predict_proba(X_test), probability, rtol=1e-6)


def test_given_fields_match_fields_by_position_and_bad_targets_are_refused():
    X, y = _one_hot(600)
    options = dict(k=4, hidden=(8,), epochs=2, batch_size=128, device="cpu", random_state=0)
    by_position = DeepFMClassifier(**options).fit(X, y)
    given = DeepFMClassifier(field_of=np.repeat(np.arange(FIELDS), VALUES), **options).fit(X, y)
    np.testing.assert_allclose(given.predict_proba(X), by_position.predict_proba(X), rtol=1e-6)
    with pytest.raises(ValueError, match="binary classifier"):
        DeepFMClassifier(**options).fit(X, np.arange(600) % 3)


@pytest.mark.parametrize("estimator", [DeepFMClassifier(k=2, hidden=(4,), epochs=5, batch_size=64, device="cpu"),
                                       FFMClassifier(k=2, epochs=5, batch_size=64, device="cpu")],
                         ids=lambda e: type(e).__name__)
def test_check_estimator(estimator):
    """scikit-learn's estimator checks pass (general X: one field per column where rows differ in length)."""
    import warnings

    from sklearn.utils.estimator_checks import check_estimator

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        results = check_estimator(estimator, on_fail=None)
    # a DataFrame's integer columns are ids, not the integer array's numbers (tests/sklearn/test_linear.py)
    assert not [(r["check_name"], str(r["exception"])[:200]) for r in results if r["status"] == "failed"
                and r["check_name"] != "check_classifier_data_not_an_array"]


def test_dlrm_classifier_takes_a_dense_column_as_its_dense_feature():
    X, y = _one_hot(3000)
    rng = np.random.default_rng(7)
    size = rng.normal(size=X.shape[0])
    y = np.where(rng.random(X.shape[0]) < 1 / (1 + np.exp(-3 * size)), "click", "no")
    X = scipy.sparse.hstack([X, scipy.sparse.csr_matrix(size[:, None])]).tocsr()
    # every row holds FIELDS one-hot columns and the dense one: fields by position, the dense one last
    model = DLRMClassifier(k=4, hidden=(16,), bottom=(8,), epochs=6, batch_size=128, learning_rate=0.05,
                           dense_fields=(FIELDS,), n_iter_no_change=6, device="cpu", random_state=0).fit(X, y)
    assert roc_auc_score(y == "no", model.predict_proba(X)[:, 1]) > 0.8
    with pytest.raises(OptionError, match="dlrm needs dense features"):
        DLRMClassifier(device="cpu").fit(X, y)
