"""Least squares regression: loss (y - (w.x + b))**2 / 2; predicts w.x + b."""

from alac.dsl import Global, Model, Param


class LeastSquares(Model):
    name = "lsr"
    labels = "real"
    prediction = "value"

    def __init__(self, l2=0.0):
        self.w = Param(l2=l2)
        self.b = Global()

    def aggregate(self, x, p):
        return {"wx": x * p.w}

    def loss(self, a, g, y):
        return 0.5 * (y - a.wx - g.b) ** 2

    def predict(self, a, g):
        return a.wx + g.b


def build(args=None):
    return LeastSquares(l2=getattr(args, "l2", 0.0))


def add_arguments(parser):
    parser.add_argument("--l2", type=float, default=0.0, help="L2 coefficient, per edge occurrence")


if __name__ == "__main__":
    import sys

    from alac.zoo import run

    sys.exit(run(build, __doc__, {"lr": 0.05}, add_arguments=add_arguments))
