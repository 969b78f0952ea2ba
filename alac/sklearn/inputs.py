"""The estimators' inputs: validated arrays, and pandas DataFrames read as alac's table loader reads
tables (alac.data.table), as alac's SparseDataset."""

from __future__ import annotations

import dataclasses

import numpy as np
import torch

from alac.data.arrays import from_csr_arrays

# the label column the table encoding expects (a DataFrame's labels come as y)
_LABEL = "__alac_label__"


def sparse_dataset(X, y=None):
    """A SparseDataset from validated input (CSR or dense float)."""
    import scipy.sparse

    csr = scipy.sparse.csr_matrix(X, dtype=np.float32)
    labels = np.zeros(csr.shape[0], np.float32) if y is None else np.asarray(y, np.float32)
    return from_csr_arrays(csr.indptr, csr.indices, csr.data, labels, csr.shape[1])


def is_frame(X):
    """Whether X is a pandas DataFrame (without importing pandas where X is not one)."""
    return type(X).__module__.startswith("pandas") and hasattr(X, "columns") and hasattr(X, "dtypes")


def _as_text(X):
    """X's cells as the table loader reads them (text, a missing one empty), a label column of zeros."""
    frame = X.astype(str).where(X.notna(), "")
    frame.columns = [str(column) for column in X.columns]
    frame[_LABEL] = "0"
    return frame


def fit_frame(estimator, X):
    """Fit the estimator's encoding of DataFrame X, as DeepCTR's SparseFeat / DenseFeat split columns:
    a float column is one numeric feature of its value (as an array's column), every other
    column (integer ids, strings, categories, booleans) is categorical, one-hot within its own field;
    values unseen at fit time get the field's id 0 later. Sets frame_encoding_ (alac.data.table's
    TableEncoding), encoding_summary_ (what was done, a line per column), feature_names_in_ and
    n_features_in_ (X's columns)."""
    from alac.data.table import TableEncoding

    names = tuple(str(column) for column in X.columns)
    if len(set(names)) != len(names) or _LABEL in names:
        raise ValueError(f"a DataFrame's columns must have distinct names (and none {_LABEL!r}): {list(names)}")
    numeric = tuple(str(column) for column in X.columns if X[column].dtype.kind == "f")
    # numbers as they are, as an array's columns are (scaling them is the user's: StandardScaler)
    encoding = TableEncoding(_LABEL, names, numeric, numeric_mode="value", numeric_scale="none").fit(
        _as_text(X), "the DataFrame")
    estimator.frame_encoding_ = encoding
    estimator.encoding_summary_ = [
        f"{name}: numeric, one feature of its value" if name in numeric else
        f"{name}: categorical, {encoding.field_width(name) - 1:,} values one-hot (an unseen value: none)"
        for name in names]
    estimator.feature_names_in_ = np.asarray(names, dtype=object)
    estimator.n_features_in_ = len(names)


def forget_frame(estimator):
    """A fit on arrays: the encoding of an earlier fit on a DataFrame dropped."""
    for name in ("frame_encoding_", "encoding_summary_"):
        estimator.__dict__.pop(name, None)


def frame_dataset(estimator, X, labels=None):
    """A SparseDataset of DataFrame X (with its entries' fields) in the encoding fit_frame fitted."""
    expected = list(estimator.feature_names_in_)
    if not is_frame(X):
        raise ValueError(f"{type(estimator).__name__} was fitted on a DataFrame: give one with its columns {expected}")
    missing = [name for name in expected if name not in [str(c) for c in X.columns]]
    if missing:
        raise ValueError(f"the DataFrame lacks the columns {missing} the estimator was fitted on")
    X = X[[column for column in X.columns if str(column) in expected]]
    dataset = estimator.frame_encoding_.encode(_as_text(X), "the DataFrame")
    if labels is not None:
        dataset = dataclasses.replace(dataset, labels=torch.as_tensor(np.asarray(labels, np.float32)))
    return dataset


def training_dataset(estimator, X, y):
    """The SparseDataset of a fit's X and y (the estimator's targets of y): a DataFrame encoded (the
    encoding kept on the estimator), else X's matrix checked as scikit-learn checks it."""
    from sklearn.utils.validation import column_or_1d, validate_data

    if is_frame(X):
        fit_frame(estimator, X)
        return frame_dataset(estimator, X, estimator._targets(column_or_1d(y, warn=True), first=True))
    forget_frame(estimator)
    X, y = validate_data(estimator, X, y, accept_sparse="csr", dtype=[np.float64, np.float32],
                         y_numeric=estimator._kind == "regressor")
    return sparse_dataset(X, estimator._targets(y, first=True))


def predict_dataset(estimator, X):
    """The SparseDataset of X to predict: in the DataFrame encoding of the fit where it was on one, else
    of X's matrix checked against the fit's features."""
    from sklearn.utils.validation import validate_data

    if hasattr(estimator, "frame_encoding_"):
        return frame_dataset(estimator, X)
    return sparse_dataset(validate_data(estimator, X, accept_sparse="csr", dtype=[np.float64, np.float32],
                                        reset=False))


def frame_fields(estimator):
    """The field of every feature of the encoding (one field per column)."""
    encoding = estimator.frame_encoding_
    widths = torch.tensor([encoding.field_width(name) for name in encoding.fields])
    return torch.repeat_interleave(torch.arange(len(encoding.fields), dtype=torch.int32), widths)


def block_source(X):
    """The block source X is (a DiskBlocks or PinnedBlocks, or a block store folder), else None."""
    import os

    from alac.runtime.movement.blocks import is_block_source
    from alac.runtime.movement.out_of_core import is_block_store

    if is_block_source(X):
        return X
    if isinstance(X, (str, os.PathLike)) and is_block_store(X):
        from alac.runtime.movement.block_store import DiskBlocks

        return DiskBlocks(X, pin=torch.cuda.is_available())
    return None
