"""Linear SVM: hinge loss max(0, 1 - y (w.x + b)), y in {-1, +1}; predicts the margin."""

from alac.dsl import Global, Model, Param, ops


class LinearSVM(Model):
    name = "lsvm"
    labels = "binary"
    prediction = "score"

    def __init__(self, l2=0.0):
        self.w = Param(l2=l2)
        self.b = Global()

    def aggregate(self, x, p):
        return {"wx": x * p.w}

    def loss(self, a, g, y):
        return ops.maximum(0.0, 1.0 - y * (a.wx + g.b))

    def predict(self, a, g):
        return a.wx + g.b


def build(args=None):
    return LinearSVM(l2=getattr(args, "l2", 0.0))


def add_arguments(parser):
    parser.add_argument("--l2", type=float, default=0.0, help="L2 coefficient, per edge occurrence")


if __name__ == "__main__":
    import sys

    from alac.zoo import run

    sys.exit(run(build, __doc__, {"lr": 0.1}, add_arguments=add_arguments))
