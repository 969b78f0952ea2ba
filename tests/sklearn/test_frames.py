"""The estimators on pandas DataFrames: integer, string, category and boolean columns are ids, one-hot
per field (as the table loader reads a table), float columns one feature of their value each, said in
encoding_summary_; against scikit-learn's own one-hot pipeline."""

import numpy as np
import pytest

pd = pytest.importorskip("pandas")
from sklearn.linear_model import LogisticRegression as SkLogistic  # noqa: E402
from sklearn.metrics import roc_auc_score  # noqa: E402
from sklearn.preprocessing import OneHotEncoder  # noqa: E402

from alac.sklearn import DeepFMClassifier, FMClassifier, FMRegressor, LogisticRegression  # noqa: E402


def _ratings(rows=6000, seed=0):
    """Integer user and item ids whose planted affinities decide the label, and a float column."""
    rng = np.random.default_rng(seed)
    users, items = rng.integers(1, 120, rows), rng.integers(1000, 1400, rows)
    user_bias, item_bias = rng.normal(0, 1.5, 120), rng.normal(0, 1.5, 1400)
    hour = rng.uniform(0, 24, rows)
    score = user_bias[users] + item_bias[items] + 0.05 * (hour - 12) + rng.normal(0, 0.5, rows)
    frame = pd.DataFrame({"user": users, "item": items, "hour": hour})
    return frame, (score > 0).astype(int), score


def test_id_columns_are_categories_not_numbers_as_scikit_learns_one_hot_pipeline_reads_them():
    frame, y, _ = _ratings()
    train, test = slice(0, 5000), slice(5000, None)
    model = LogisticRegression(backend="reference", optimizer="adagrad", random_state=0)
    model.fit(frame.iloc[train], y[train])
    assert model.encoding_summary_[0].startswith("user: categorical") and \
        model.encoding_summary_[2].startswith("hour: numeric")
    assert list(model.feature_names_in_) == ["user", "item", "hour"] and model.n_features_in_ == 3
    ours = roc_auc_score(y[test], model.predict_proba(frame.iloc[test])[:, 1])
    ids = frame[["user", "item"]]
    encoder = OneHotEncoder(handle_unknown="ignore").fit(ids.iloc[train])
    reference = SkLogistic(max_iter=1000).fit(encoder.transform(ids.iloc[train]), y[train])
    theirs = roc_auc_score(y[test], reference.predict_proba(encoder.transform(ids.iloc[test]))[:, 1])
    # the ids read as numbers give about 0.5; as categories, what scikit-learn's one-hot model gives
    assert theirs > 0.85 and ours > theirs - 0.03, (ours, theirs)


@pytest.mark.parametrize("estimator", [FMClassifier(backend="reference", random_state=0),
                                       DeepFMClassifier(device="cpu", epochs=10, k=4, hidden=(16,), batch_size=128,
                                                        random_state=0)])
def test_field_models_beat_the_majority_class_on_a_frame_and_take_unseen_values(estimator):
    frame, y, _ = _ratings()
    estimator.fit(frame.iloc[:5000], y[:5000])
    held_out = frame.iloc[5000:].copy()
    accuracy = (estimator.predict(held_out) == y[5000:]).mean()
    assert accuracy > max(y[5000:].mean(), 1 - y[5000:].mean()) + 0.1
    held_out.iloc[0, 0] = 10**6                               # a user never seen: no feature of its field
    assert np.isfinite(estimator.predict_proba(held_out)).all()
    with pytest.raises(ValueError, match="was fitted on a DataFrame: give one with its columns"):
        estimator.predict(held_out.to_numpy())
    with pytest.raises(ValueError, match=r"lacks the columns \['hour'\]"):
        estimator.predict(held_out[["user", "item"]])


def test_a_regressor_on_a_frame_and_a_refit_on_arrays_forgets_the_frame():
    frame, _, score = _ratings(3000)
    frame = frame[["user", "item"]]
    model = FMRegressor(backend="reference", random_state=0).fit(frame, score)
    assert np.corrcoef(model.predict(frame), score)[0, 1] > 0.8
    model.fit(frame.to_numpy(), score)
    assert not hasattr(model, "frame_encoding_") and model.predict(frame.to_numpy()).shape == (3000,)
