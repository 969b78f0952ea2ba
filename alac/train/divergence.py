"""The divergence guard: a run whose loss has gone wrong is stopped, the best earlier parameters are
restored and the run ends with a non-zero exit and what to change, instead of finishing quietly on a
model worse than predicting the base rate.

Training loss: an epoch's mean training loss diverged when it is NaN or infinite, above
FAR_ABOVE_START times the loss at the parameters training started from, or above that start and
BLOW_UP times the lowest epoch loss so far (a run that had learned, then blew up).

Validation loss (what early stopping watches: logloss, or RMSE): diverged when it is more than
VALID_FACTOR times both the loss of predicting the training data's base rate (its positive share, or
its mean) and the loss at the fit's start, or when it is above the base rate's and VALID_FACTOR
times the fit's first epoch's (a run that learned and then rose far). The runs these rules stop are
tests/train/test_divergence.py's: SGD at lr 100 on a9a, an FM on a raw timestamp, DeepFM's first steps on
the Criteo sample at AdaGrad's wide-model rate.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from alac import metrics
from alac.errors import AlacError

FAR_ABOVE_START = 10.0
BLOW_UP = 10.0
# A start below this counts as this (a model resumed at a loss of about 0 cannot blow up by ratio)
LOSS_FLOOR = 1e-3
VALID_FACTOR = 2.0
# what to change, said with every divergence
ADVICE = ("Try a smaller learning rate, a per-coordinate optimizer (--optimizer adagrad or ftrl), a smaller "
          "batch, or scaled features (--normalize; a table's numbers with --numeric-scale standard).")


class TrainingDiverged(AlacError):
    """The loss blew up; the best earlier parameters (or the last good ones) and counters were restored."""


def diverged(loss, start, lowest):
    """Whether an epoch's training loss diverged; lowest: the lowest epoch loss of this fit so far
    (None before its first epoch)."""
    start = max(start, LOSS_FLOOR)
    return (not math.isfinite(loss) or loss > FAR_ABOVE_START * start
            or (lowest is not None and loss > start and loss > BLOW_UP * max(lowest, LOSS_FLOOR)))


def base_rate_loss(binary, train_labels, valid_labels):
    """The validation loss (logloss, or RMSE) of predicting the training labels' base rate: their
    positive share (binary: labels are a bool mask of positives), or their mean."""
    train_labels, valid_labels = train_labels.double().cpu(), valid_labels.double().cpu()
    if binary:
        share = float(train_labels.mean().clamp(1e-6, 1 - 1e-6))
        return metrics.logloss(torch.full_like(valid_labels, share), valid_labels)
    return metrics.rmse(torch.full_like(valid_labels, float(train_labels.mean())), valid_labels)


@dataclass
class ValidationGuard:
    """The validation-loss rule (module docstring) of one fit: metric its record key; base the loss of
    predicting the base rate; start the loss at the fit's starting parameters."""

    metric: str
    base: float
    start: float
    first: float | None = None

    def check(self, record):
        """Why the epoch's record has diverged, or None."""
        value = record.get(self.metric)
        if value is None:
            return None
        first, self.first = self.first, self.first if self.first is not None else value
        name = self.metric.replace("_", " ").replace("valid", "validation", 1)
        if not math.isfinite(value):
            return f"{name} {value}"
        if value > VALID_FACTOR * max(self.base, self.start, LOSS_FLOOR):
            return (f"{name} {value:.6g}, more than {VALID_FACTOR:g} times that of predicting the base rate "
                    f"({self.base:.6g}) and of the starting parameters ({self.start:.6g})")
        if first is not None and value > self.base and value > VALID_FACTOR * max(first, LOSS_FLOOR):
            return (f"{name} {value:.6g}, above that of predicting the base rate ({self.base:.6g}) and more than "
                    f"{VALID_FACTOR:g} times the first epoch's ({first:.6g})")
        return None
