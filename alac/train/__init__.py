"""Training: one Trainer API for every model family (flow models by SGD epochs, over ranks, field
models), with early stopping, the divergence guard and checkpoints; the CLI and the estimators are
thin layers over it."""

from alac.train.trainer import Trainer

__all__ = ["Trainer"]
