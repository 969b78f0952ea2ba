"""The default optimizer, "auto": AdaGrad and plain SGD raced on the validation data.

AdaGrad (its default rate, the model's default L2) adapts each feature's step to its gradients and needs no
scaling; plain SGD at the model's own rate and without L2 (early stopping regularises it) generalises better
where one-occurrence features dominate (ipinyou in benchmarks/defaults.py). Both train with early stopping on
the same validation rows; the one with the lower best validation loss is kept. That costs two trainings: name
an optimizer to train once.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

AUTO = "auto"
ADAPTIVE = "adagrad"


@dataclass(frozen=True)
class Arm:
    """One contestant: an optimizer with its learning rate and L2 coefficient."""

    optimizer: str
    lr: float
    l2: float

    def describe(self):
        return f"{self.optimizer} lr {self.lr:g} l2 {self.l2:g}"


def arms(adaptive_lr, sgd_lr, l2, l2_given):
    """The race's arms: AdaGrad at adaptive_lr with l2, SGD at sgd_lr with l2 only where the user
    gave it (the model's default L2 suits AdaGrad; SGD stops early instead)."""
    return (Arm(ADAPTIVE, adaptive_lr, l2), Arm("sgd", sgd_lr, l2 if l2_given else 0.0))


def best_validation_loss(trainer):
    """The lowest validation loss of trainer's history (what early stopping kept); inf without one."""
    losses = [trainer.monitored(record) for record in trainer.history]
    finite = [loss for loss in losses if math.isfinite(loss)]
    return min(finite) if finite else math.inf


def race(contestants, train_arm, say=lambda line: None):
    """train_arm(arm) -> (trainer, diverged) for every arm; returns the index of the arm whose
    trainer reached the lowest validation loss (a diverged arm only wins if every arm diverged)."""
    results = []
    say(f"optimizer auto: {len(contestants)} trainings raced on the validation loss, the better kept ("
        + "; ".join(arm.describe() for arm in contestants) + "); name an --optimizer to train once")
    for number, arm in enumerate(contestants, 1):
        say(f"optimizer auto: arm {number}/{len(contestants)}, {arm.describe()}")
        trainer, diverged = train_arm(arm)
        results.append((diverged is not None, best_validation_loss(trainer)))
    winner = min(range(len(contestants)), key=lambda index: results[index])
    say("optimizer auto: kept " + contestants[winner].describe() + " (best validation loss " + ", ".join(
        f"{arm.optimizer} {loss:.6g}" + (" diverged" if failed else "")
        for arm, (failed, loss) in zip(contestants, results)) + ")")
    return winner
