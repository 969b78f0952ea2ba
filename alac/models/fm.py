"""Factorization machine (Rendle 2010) with k factors, logistic or squared loss:
z = b + sum_j w_j x_j + 1/2 sum_f ((sum_j v_jf x_j)**2 - sum_j v_jf**2 x_j**2)."""

from alac.dsl import LinearModel, Normal, Param, ops
from alac.errors import OptionError


class FactorizationMachine(LinearModel):
    def __init__(self, k=8, loss="logistic", l2=0.0, l1=0.0, init_std=0.01):
        if loss not in ("logistic", "squared"):
            raise OptionError(f"loss must be 'logistic' or 'squared', got {loss!r}")
        self.name = "fm" if loss == "logistic" else "fm_squared"
        self.labels = "binary" if loss == "logistic" else "real"
        self.prediction = "probability" if loss == "logistic" else "value"
        self.loss_kind = loss
        super().__init__(l2, l1)
        self.v = Param(size=k, init=Normal(init_std), l2=l2, l1=l1)

    def aggregate(self, x, p):
        return {**super().aggregate(x, p), "vx": x * p.v, "v2x2": x**2 * p.v**2}

    def score(self, a, g):
        return super().score(a, g) + 0.5 * ops.sum(a.vx**2 - a.v2x2)

    def loss(self, a, g, y):
        if self.loss_kind == "logistic":
            return ops.softplus(-y * self.score(a, g))
        return 0.5 * (y - self.score(a, g)) ** 2

    def predict(self, a, g):
        if self.loss_kind == "logistic":
            return ops.sigmoid(self.score(a, g))
        return self.score(a, g)


MODEL = FactorizationMachine
ARGUMENTS = [
    ("--k", {"type": int, "default": 8, "help": "factors per feature"}),
    ("--loss", {"default": "logistic", "choices": ["logistic", "squared"],
                "help": "logistic: a binary classifier; squared: a regressor (ratings)"}),
]


def DEFAULT_LR(args):
    # the squared loss's gradient grows with the score, so it takes a smaller step
    return 0.5 if args.loss == "logistic" else 0.05
# benchmarks/defaults.py: FM on the shared data with the default optimizer; in units of the training
# values' mean |x| (alac.models.default_l2)
DEFAULT_L2 = 0.01
