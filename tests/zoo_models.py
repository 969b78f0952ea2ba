"""The zoo's models, loaded from models/*.py, for tests that run every model."""

from alac.zoo import build_model, load_model_file

ZOO = {
    "lr": lambda: build_model(load_model_file("lr")),
    "lsvm": lambda: build_model(load_model_file("lsvm")),
    "lsr": lambda: build_model(load_model_file("lsr")),
    "fm": lambda: load_model_file("fm").FactorizationMachine(k=4, init_std=0.1),
    "fm_squared": lambda: load_model_file("fm").FactorizationMachine(k=3, loss="squared", init_std=0.1),
    "poisson": lambda: build_model(load_model_file("poisson")),
}
