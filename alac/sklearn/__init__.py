"""scikit-learn estimators over alac: the zoo's wide models (alac.sklearn.linear, with solver="scd"
from alac.sklearn.scd) and the field models (alac.sklearn.deep)."""

from alac.sklearn.deep import DeepFMClassifier, DLRMClassifier, FFMClassifier, WideAndDeepClassifier
from alac.sklearn.linear import (
                                 FMClassifier,
                                 FMRegressor,
                                 Lasso,
                                 LinearSVC,
                                 LogisticRegression,
                                 Ridge,
                                 WideClassifier,
                                 WideRegressor,
)

__all__ = ["DLRMClassifier", "DeepFMClassifier", "FFMClassifier", "FMClassifier", "FMRegressor", "Lasso", "LinearSVC",
           "LogisticRegression", "Ridge", "WideAndDeepClassifier", "WideClassifier", "WideRegressor"]
