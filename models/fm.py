"""Factorization machine (Rendle 2010) with k factors, logistic or squared loss:
z = b + sum_j w_j x_j + 1/2 sum_f ((sum_j v_jf x_j)**2 - sum_j v_jf**2 x_j**2)."""

from alac.dsl import Global, Model, Normal, Param, ops


class FactorizationMachine(Model):
    def __init__(self, k=8, loss="logistic", l2=0.0, init_std=0.01):
        if loss not in ("logistic", "squared"):
            raise ValueError(f"loss must be 'logistic' or 'squared', got {loss!r}")
        self.name = "fm" if loss == "logistic" else "fm_squared"
        self.labels = "binary" if loss == "logistic" else "real"
        self.prediction = "probability" if loss == "logistic" else "value"
        self.loss_kind = loss
        self.w = Param(l2=l2)
        self.v = Param(size=k, init=Normal(init_std), l2=l2)
        self.b = Global()

    def aggregate(self, x, p):
        return {"wx": x * p.w, "vx": x * p.v, "v2x2": x**2 * p.v**2}

    def score(self, a, g):
        return g.b + a.wx + 0.5 * ops.sum(a.vx**2 - a.v2x2)

    def loss(self, a, g, y):
        if self.loss_kind == "logistic":
            return ops.softplus(-y * self.score(a, g))
        return 0.5 * (y - self.score(a, g)) ** 2

    def predict(self, a, g):
        if self.loss_kind == "logistic":
            return ops.sigmoid(self.score(a, g))
        return self.score(a, g)


def build(args=None):
    return FactorizationMachine(k=getattr(args, "k", 8), loss=getattr(args, "loss", "logistic"),
                                l2=getattr(args, "l2", 0.0))


def add_arguments(parser):
    parser.add_argument("--k", type=int, default=8, help="factors per feature")
    parser.add_argument("--loss", default="logistic", choices=["logistic", "squared"])
    parser.add_argument("--l2", type=float, default=0.0, help="L2 coefficient, per edge occurrence")


if __name__ == "__main__":
    import sys

    from alac.zoo import run

    # the squared loss's gradient grows with the score, so it takes a smaller step
    sys.exit(run(build, __doc__, {"lr": lambda args: 0.5 if args.loss == "logistic" else 0.05},
                 add_arguments=add_arguments))
