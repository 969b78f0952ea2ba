"""solver="als" | "mcmc" of FMRegressor and FMClassifier: libFM's coordinate solvers
(alac.runtime.solvers.fm_coordinate) instead of SGD epochs, on the GPU where backend="triton" finds one.

epochs is the number of sweeps; MCMC leaves out the first burn_in (None: a fifth) and keeps the
average of the rest (the posterior mean), draws its priors (one group per field: a DataFrame's
columns; a matrix is one group) and classifies by probit (predict_proba: Phi of the score); ALS fits
the squared loss with alpha the L2 on the sum of squared errors (None: alac.defaults.ALS_L2).
Fitted: coef_, intercept_, factors_, n_iter_ (sweeps), samples_ (MCMC's kept samples) and
noise_precision_ (MCMC's last draw; 1 for ALS and probit).
"""

from __future__ import annotations

import numpy as np
import torch
from sklearn.utils.validation import check_is_fitted

from alac import defaults
from alac.sklearn.inputs import predict_dataset, training_dataset


def fit_coordinate(estimator, X, y):
    """Fit estimator (FMRegressor or FMClassifier with solver als or mcmc) on X, y; returns it."""
    from alac.runtime.solvers.fm_coordinate import CoordinateSettings, CoordinateSolver

    name, solver = type(estimator).__name__, estimator.solver
    classifier = estimator._kind == "classifier"
    if solver == "als" and classifier:
        raise ValueError(f"{name}(solver='als') fits the squared loss: classify by solver='mcmc' (probit)")
    if solver == "mcmc" and estimator.alpha is not None:
        raise ValueError(f"{name}(solver='mcmc') draws its priors' precisions: leave alpha None")
    epochs = estimator.epochs
    burn_in = estimator.burn_in if estimator.burn_in is not None else epochs // 5
    train = training_dataset(estimator, X, y)
    reg = defaults.ALS_L2 if estimator.alpha is None else estimator.alpha
    settings = CoordinateSettings(solver=solver, k=estimator.n_factors, iterations=epochs,
                                  burn_in=burn_in if solver == "mcmc" else 0, init_std=estimator.init_std,
                                  reg_w=reg, reg_v=reg,
                                  task="classification" if classifier else "regression",
                                  seed=estimator.random_state or 0)
    device = "cuda" if estimator.backend == "triton" and torch.cuda.is_available() else "cpu"
    fitted = CoordinateSolver(settings, train, device=device)
    for _ in range(epochs):
        fitted.iterate()
    w0, w, v = (value.double().cpu().numpy() for value in fitted.coordinates())
    estimator.coef_ = w.reshape(1, -1) if classifier else w
    estimator.intercept_ = np.array([float(w0)])
    estimator.factors_ = v
    estimator.n_iter_, estimator.samples_ = fitted.iteration, fitted.samples
    estimator.noise_precision_ = float(fitted.alpha)
    estimator._coordinate_fit = True
    return estimator


def coordinate_raw(estimator, X):
    """The FM's scores of X (FMClassifier: Phi of them, probit's probabilities)."""
    from alac.runtime.solvers.fm_coordinate import fm_scores

    check_is_fitted(estimator, "factors_")
    dataset = predict_dataset(estimator, X)
    coordinates = (torch.tensor(float(estimator.intercept_[0]), dtype=torch.float64),
                   torch.from_numpy(np.asarray(estimator.coef_, dtype=np.float64).reshape(-1)),
                   torch.from_numpy(np.asarray(estimator.factors_, dtype=np.float64)))
    scores = fm_scores(dataset, coordinates)
    if estimator._kind == "classifier":
        scores = torch.special.ndtr(scores)
    return scores.numpy()
