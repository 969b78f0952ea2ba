"""Evaluation metrics on tensors (on the GPU when the predictions are there)."""

from __future__ import annotations

import math

import torch

# Probabilities are clipped to [eps, 1 - eps] in logloss, as scikit-learn does for float32.
_LOGLOSS_EPS = 1e-7


def logloss(probability, positive):
    p = probability.double().clamp(_LOGLOSS_EPS, 1 - _LOGLOSS_EPS)
    y = positive.double()
    return float(-(y * torch.log(p) + (1 - y) * torch.log1p(-p)).mean())


def auc(score, positive):
    """Exact ROC AUC: the Mann-Whitney statistic with tied scores given their average rank."""
    score = score.double()
    positive = positive.bool()
    n_positive = int(positive.sum())
    n_negative = positive.numel() - n_positive
    if n_positive == 0 or n_negative == 0:
        return math.nan
    order = torch.argsort(score)
    sorted_score = score[order]
    # average rank (1-based) of every group of equal scores
    _, inverse, counts = torch.unique_consecutive(sorted_score, return_inverse=True, return_counts=True)
    ends = torch.cumsum(counts, 0).double()
    average_rank = ends - (counts.double() - 1) / 2
    ranks = torch.empty_like(score)
    ranks[order] = average_rank[inverse]
    rank_sum = float(ranks[positive].sum())
    return (rank_sum - n_positive * (n_positive + 1) / 2) / (n_positive * n_negative)


def accuracy(predicted_positive, positive):
    return float((predicted_positive.bool() == positive.bool()).double().mean())


def rmse(prediction, target):
    return float(torch.sqrt(((prediction.double() - target.double()) ** 2).mean()))


def mae(prediction, target):
    return float((prediction.double() - target.double()).abs().mean())


def classification_metrics(prediction, positive, kind="probability"):
    """logloss, auc, accuracy. For a margin ("score") model, logloss is that of sigmoid(score)."""
    probability = prediction if kind == "probability" else torch.sigmoid(prediction.double())
    threshold = 0.5 if kind == "probability" else 0.0
    return {"logloss": logloss(probability, positive), "auc": auc(prediction, positive),
            "accuracy": accuracy(prediction > threshold, positive)}


def regression_metrics(prediction, target):
    return {"rmse": rmse(prediction, target), "mae": mae(prediction, target)}
