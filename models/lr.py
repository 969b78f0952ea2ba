"""Logistic regression: loss log(1 + exp(-y (w.x + b))), y in {-1, +1}."""

from alac.dsl import Global, Model, Param, ops


class LogisticRegression(Model):
    name = "lr"
    labels = "binary"
    prediction = "probability"

    def __init__(self, l2=0.0):
        self.w = Param(l2=l2)
        self.b = Global()

    def aggregate(self, x, p):
        return {"wx": x * p.w}

    def loss(self, a, g, y):
        return ops.softplus(-y * (a.wx + g.b))

    def predict(self, a, g):
        return ops.sigmoid(a.wx + g.b)


def build(args=None):
    return LogisticRegression(l2=getattr(args, "l2", 0.0))


def add_arguments(parser):
    parser.add_argument("--l2", type=float, default=0.0, help="L2 coefficient, per edge occurrence")


if __name__ == "__main__":
    import sys

    from alac.zoo import run

    sys.exit(run(build, __doc__, {"lr": 1.0}, add_arguments=add_arguments))
