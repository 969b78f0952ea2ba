"""scikit-learn classifiers over the field models (alac.train.deep): DeepFMClassifier,
WideAndDeepClassifier, DLRMClassifier and FFMClassifier (fit, predict, predict_proba,
decision_function, score, classes_, n_features_in_, n_iter_), on sparse matrices whose columns
belong to fields.

A column's field: field_of[column] when given (an integer array, -1 for a column in no field), else
by position as in one-hot data of one column per field and row (alac.data.field_map.from_positions:
every row holds as many columns, the f-th of a row in field f), else one field per column. At
prediction, columns the model never trained (in no field, or beyond the training columns) are left
out. Binary targets only.
"""

from __future__ import annotations

import numpy as np
import torch
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, column_or_1d, validate_data

from alac import defaults
from alac.data.field_map import FieldMap, from_positions
from alac.data.split import hold_out
from alac.errors import DataError
from alac.sklearn.inputs import (
    fit_frame,
    forget_frame,
    frame_dataset,
    frame_fields,
    is_frame,
    predict_dataset,
    sparse_dataset,
)
from alac.sklearn.linear import _fit, _warn_on_divergence
from alac.train.deep import DeepSettings, DeepTrainer

_DOC = """

    k: the field embeddings' size (None: 16; FFM: 4 per field, as libffm); hidden: the MLP's layer
    sizes; learning_rate: the tables' step (None: alac.train.deep.DeepSettings.table_lr's);
    dense_learning_rate: Adam's on the MLP; batch_size: the rows of a step on each rank (under torchrun
    a step takes ranks × batch_size); optimizer: the tables' (adagrad, sgd, ...); field_of: the
    field of every column (None: by position); early_stopping: hold out validation_fraction of the
    rows (random, random_state) and stop after n_iter_no_change epochs without a better validation
    logloss, keeping the best epoch; device: None picks the GPU when there is one; dense_fields:
    fields whose columns' values are dense features (not FFM's); bottom: DLRM's bottom MLP;
    rank_tables: under torchrun, the tables' rows over the ranks (auto, replicated, sharded, hybrid);
    gpu_memory: bytes the tables may take on the GPU, larger ones in host memory with their most-read rows
    cached there (None: a quarter of its free memory; alac train --gpu-memory); stream_data: the training
    rows kept in host memory, the GPU gathering an epoch's part at a time (None: where they take more than
    half its free memory); micro_batches: PICASSO's D-interleaving of a step (None: by its Eq. 2, split only
    where a step's measured activations exceed half the GPU's free memory; 1: off); side_stream:
    K-interleaving (off by default).
"""


class _DeepClassifier(ClassifierMixin, BaseEstimator):
    _model = None

    def __init__(self, k=None, hidden=(256, 128), learning_rate=None, dense_learning_rate=1e-3, epochs=10,
                 batch_size=4096, optimizer="adagrad", field_of=None, early_stopping=True,
                 validation_fraction=defaults.VALID_SPLIT, n_iter_no_change=2, device=None, random_state=None,
                 dense_fields=(), bottom=(64,), rank_tables="auto", gpu_memory=None, stream_data=None,
                 micro_batches=None, side_stream=False):
        self.k, self.hidden, self.learning_rate = k, hidden, learning_rate
        self.dense_learning_rate = dense_learning_rate
        self.epochs, self.batch_size, self.optimizer, self.field_of = epochs, batch_size, optimizer, field_of
        self.early_stopping, self.validation_fraction = early_stopping, validation_fraction
        self.n_iter_no_change, self.device, self.random_state = n_iter_no_change, device, random_state
        self.dense_fields, self.bottom = dense_fields, bottom
        self.rank_tables, self.gpu_memory, self.stream_data = rank_tables, gpu_memory, stream_data
        self.micro_batches, self.side_stream = micro_batches, side_stream

    def fit(self, X, y):
        if is_frame(X):
            # a DataFrame's columns as tables are read, each column a field (fit_frame)
            fit_frame(self, X)
            y = column_or_1d(y, warn=True)
        else:
            forget_frame(self)
            X, y = validate_data(self, X, y, accept_sparse="csr", dtype=[np.float64, np.float32])
        check_classification_targets(y)
        classes = np.unique(y)
        if classes.size > 2:
            raise ValueError(f"Only binary classification is supported: {type(self).__name__} is a binary "
                             f"classifier and y has {classes.size} classes")
        if classes.size < 2:
            raise ValueError(f"{type(self).__name__} needs two classes in y, got 1 class")
        self.classes_ = classes
        targets = (y == self.classes_[1]).astype(np.float32)
        if hasattr(self, "frame_encoding_"):
            dataset, self.field_of_ = frame_dataset(self, X, targets), frame_fields(self)
        else:
            dataset = sparse_dataset(X, targets)
            self.field_of_ = _default_fields(dataset) if self.field_of is None else \
                torch.as_tensor(np.asarray(self.field_of), dtype=torch.int32)
        dataset = _with_fields(dataset, self.field_of_)
        seed = 0 if self.random_state is None else int(self.random_state)
        train, valid = hold_out(dataset, self.validation_fraction, seed) if self.early_stopping else (dataset, None)
        settings = DeepSettings(model=self._model, k=self.k, hidden=tuple(self.hidden), lr=self.learning_rate,
                                dense_lr=self.dense_learning_rate, epochs=self.epochs, batch_size=self.batch_size,
                                optimizer=self.optimizer, patience=self.n_iter_no_change, seed=seed,
                                dense_fields=tuple(self.dense_fields), bottom=tuple(self.bottom),
                                rank_tables=self.rank_tables, gpu_memory=self.gpu_memory,
                                stream_data=self.stream_data, micro_batches=self.micro_batches,
                                side_stream=self.side_stream)
        self.trainer_ = DeepTrainer(settings, self.device)
        _warn_on_divergence(_fit(self.trainer_, train, valid))
        self.n_iter_ = len(self.trainer_.history)
        return self

    def predict_proba(self, X):
        check_is_fitted(self, "trainer_")
        p = self.trainer_.predict(_with_fields(predict_dataset(self, X), self.field_of_)).double().numpy()
        return np.column_stack([1 - p, p])

    def decision_function(self, X):
        p = np.clip(self.predict_proba(X)[:, 1], 1e-12, 1 - 1e-12)
        return np.log(p) - np.log1p(-p)

    def predict(self, X):
        scores = self.decision_function(X)      # first: unfitted, it raises NotFittedError
        return self.classes_[(scores > 0).astype(int)]

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        tags.classifier_tags.multi_class = False
        return tags


def _default_fields(dataset):
    """The fields of the columns when none are given: by position where every row holds as many
    columns (one-hot rows of one column per field), else one field per column."""
    lengths = dataset.indptr.diff()
    if dataset.n_rows and bool((lengths == lengths[0]).all()) and int(lengths[0]) > 0:
        try:
            return from_positions(dataset).field_of.int()
        except DataError:           # a column at two positions: not one-hot by position
            pass
    return torch.arange(dataset.n_features, dtype=torch.int32)


def _with_fields(dataset, field_of):
    """The dataset with every entry's field from field_of (-1 for a column beyond it or in no field)."""
    n_fields = int(field_of.max()) + 1 if field_of.numel() else 0
    return FieldMap(field_of, tuple(range(n_fields))).apply(dataset, unlisted_ok=True)


class DeepFMClassifier(_DeepClassifier):
    __doc__ = "DeepFM (Guo et al. 2017): an FM and an MLP over shared field embeddings." + _DOC
    _model = "deepfm"


class WideAndDeepClassifier(_DeepClassifier):
    __doc__ = "Wide & Deep (Cheng et al. 2016): a linear part and an MLP over field embeddings." + _DOC
    _model = "wide_deep"


class FFMClassifier(_DeepClassifier):
    __doc__ = ("Field-aware FM (Juan et al. 2016, libffm's model): k factors per feature and field (hidden "
               "is not used)." + _DOC)
    _model = "ffm"


class DLRMClassifier(_DeepClassifier):
    __doc__ = ("DLRM-like (Naumov et al. 2019): dense features (dense_fields, required) through a bottom MLP, "
               "pairwise dot products with the field embeddings into a top MLP (hidden)." + _DOC)
    _model = "dlrm"
