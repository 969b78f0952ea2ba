"""Early stopping's rules: what it watches in an epoch's record and when it stops."""

from __future__ import annotations

RULES = (None, "cuwide", "patience")
# the validation losses early stopping watches (the first a record has)
VALIDATION_KEYS = ("valid_logloss", "valid_rmse")


def monitored(record):
    """What early stopping watches in an epoch's record: the validation loss, else the training loss."""
    for key in VALIDATION_KEYS:
        if key in record:
            return record[key]
    return record["train_loss"]


def should_stop(rule, losses, best, window, patience):
    """"cuwide": the last loss exceeds the mean of the `window` before it (cuWide's rule); "patience":
    `patience` epochs since the best (index `best` of losses)."""
    if rule == "cuwide" and len(losses) > window:
        return losses[-1] > sum(losses[-window - 1:-1]) / window
    if rule == "patience":
        return len(losses) - 1 - best >= patience
    return False
