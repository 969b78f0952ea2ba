"""Poisson regression for counts (not in the cuWide papers; written only with the DSL):
rate = exp(w.x + b), loss = rate - y log(rate) (the negative log-likelihood up to log y!)."""

from alac.dsl import Global, Model, Param, ops


class PoissonRegression(Model):
    name = "poisson"
    labels = "count"
    prediction = "value"

    def __init__(self, l2=0.0):
        self.w = Param(l2=l2)
        self.b = Global()

    def aggregate(self, x, p):
        return {"wx": x * p.w}

    def loss(self, a, g, y):
        z = a.wx + g.b
        return ops.exp(z) - y * z

    def predict(self, a, g):
        return ops.exp(a.wx + g.b)


def build(args=None):
    return PoissonRegression(l2=getattr(args, "l2", 0.0))


def add_arguments(parser):
    parser.add_argument("--l2", type=float, default=0.0, help="L2 coefficient, per edge occurrence")


if __name__ == "__main__":
    import sys

    from alac.zoo import run

    sys.exit(run(build, __doc__, {"lr": 0.05}, add_arguments=add_arguments))
