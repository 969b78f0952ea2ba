"""The zoo's models (alac.models) with explicit options, for tests that run every model."""

from alac.models import zoo_model

ZOO = {
    "lr": lambda: zoo_model("lr", l2=0.0),
    "lsvm": lambda: zoo_model("lsvm", l2=0.0),
    "lsr": lambda: zoo_model("lsr", l2=0.0),
    "fm": lambda: zoo_model("fm", k=4, init_std=0.1, l2=0.0),
    "fm_squared": lambda: zoo_model("fm", k=3, loss="squared", init_std=0.1, l2=0.0),
    "poisson": lambda: zoo_model("poisson", l2=0.0),
}
