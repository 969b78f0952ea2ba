"""Least squares regression: loss (y - (w.x + b))**2 / 2; predicts w.x + b."""

from alac.dsl import LinearModel


class LeastSquares(LinearModel):
    name = "lsr"
    labels = "real"
    prediction = "value"

    def loss(self, a, g, y):
        return 0.5 * (y - self.score(a, g)) ** 2

    def predict(self, a, g):
        return self.score(a, g)


MODEL = LeastSquares
# the squared loss's gradient grows with the residual: 0.05 is stable on a9a and the synthetic set
DEFAULT_LR = 0.05
