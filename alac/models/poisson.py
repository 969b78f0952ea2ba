"""Poisson regression for counts (not in the cuWide papers; written only with the DSL):
rate = exp(w.x + b), loss = rate - y log(rate) (the negative log-likelihood up to log y!)."""

from alac.dsl import LinearModel, ops


class PoissonRegression(LinearModel):
    name = "poisson"
    labels = "count"
    prediction = "value"

    def loss(self, a, g, y):
        return ops.exp(self.score(a, g)) - y * self.score(a, g)

    def predict(self, a, g):
        return ops.exp(self.score(a, g))


MODEL = PoissonRegression
# exp(z) grows fast: 0.05 keeps the first epochs stable on the synthetic set
DEFAULT_LR = 0.05
