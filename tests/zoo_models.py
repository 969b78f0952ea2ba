"""The zoo's models, loaded from models/*.py, for tests that run every model."""

from alac.zoo import load_model_file

ZOO = {
    "lr": lambda: load_model_file("lr").build(None),
    "lsvm": lambda: load_model_file("lsvm").build(None),
    "lsr": lambda: load_model_file("lsr").build(None),
    "fm": lambda: load_model_file("fm").FactorizationMachine(k=4, init_std=0.1),
    "fm_squared": lambda: load_model_file("fm").FactorizationMachine(k=3, loss="squared", init_std=0.1),
    "poisson": lambda: load_model_file("poisson").build(None),
}
