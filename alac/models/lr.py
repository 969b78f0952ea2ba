"""Logistic regression: loss log(1 + exp(-y (w.x + b))), y in {-1, +1}."""

from alac.dsl import LinearModel, ops


class LogisticRegression(LinearModel):
    name = "lr"
    labels = "binary"
    prediction = "probability"

    def loss(self, a, g, y):
        return ops.softplus(-y * self.score(a, g))

    def predict(self, a, g):
        return ops.sigmoid(self.score(a, g))


MODEL = LogisticRegression
# SGD's rate: 2 reaches the lowest validation loss of 0.1 / 0.5 / 2 on a9a, w8a and ipinyou with early
# stopping (benchmarks/defaults.py)
DEFAULT_LR = 2.0
