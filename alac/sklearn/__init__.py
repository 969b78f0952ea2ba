"""scikit-learn estimators over alac: the zoo's wide models (alac.sklearn.linear, with solver="scd"
from alac.sklearn.scd) and the field models (alac.sklearn.deep)."""

from alac.optional import need

need("sklearn", "alac.sklearn")

from alac.sklearn.deep import DeepFMClassifier, DLRMClassifier, FFMClassifier, WideAndDeepClassifier  # noqa: E402
from alac.sklearn.linear import (  # noqa: E402
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
