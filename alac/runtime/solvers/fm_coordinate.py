"""libFM's coordinate solvers for factorization machines (Rendle, "Factorization Machines with libFM",
ACM TIST 2012): ALS, each coordinate set to its regularized least-squares optimum given the others,
and MCMC, each drawn from its Gaussian conditional, with the noise precision and one group of
hyper-priors per field drawn in turn (myFM's `group_shapes`), and for classification probit's latent
targets. On a CPU or a GPU, in torch, float32 or float64.

A step updates one coordinate for all of its occurrences: w_0, w_j, or v_{j,f}, keeping the
residuals e = y - ŷ and Rendle's caches q_{i,f} = Σ_l v_{l,f} x_{i,l} current. Features that share
no row have independent coordinates given the rest, so a block of them (alac.runtime.solvers.fm_blocks:
a one-hot field whole, a repeating field split by colouring) steps its w, or its v_{.,f} for one f,
together, as one after the other would (tests/runtime/solvers/test_fm_coordinate.py, against the
float64 loop of alac.runtime.solvers.fm_sequential). Features no training row has stay at 0.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from alac.errors import OptionError
from alac.runtime.solvers.fm_blocks import coordinate_blocks

SOLVERS = ("als", "mcmc")
TASKS = ("regression", "classification")


@dataclass(frozen=True)
class CoordinateSettings:
    """solver: als or mcmc; k: factors; iterations; burn_in: MCMC's samples left out of the average;
    init_std: v's initial normal std; reg_w, reg_v: ALS's L2 (MCMC draws them); task: regression
    (squared loss / Gaussian noise) or classification (MCMC: probit); the hyper-priors' constants as
    libFM and myFM take them (alpha_0, beta_0 for the noise precision, alpha_lambda, beta_lambda for
    the groups' precisions, gamma_0 and mu_0 for their means); initial_precision: the priors' precision
    before their first draw (myFM's vague start); draw_hypers False: MCMC keeps the noise precision at
    1 and every prior at mean 0 and initial_precision (a fixed Gaussian prior)."""

    solver: str = "mcmc"
    k: int = 8
    iterations: int = 100
    burn_in: int = 10
    init_std: float = 0.1
    reg_w: float = 0.0
    reg_v: float = 0.0
    task: str = "regression"
    seed: int = 0
    alpha_0: float = 1.0
    beta_0: float = 1.0
    alpha_lambda: float = 1.0
    beta_lambda: float = 1.0
    gamma_0: float = 1.0
    mu_0: float = 0.0
    initial_precision: float = 1e-5
    draw_hypers: bool = True

    def __post_init__(self):
        if self.solver not in SOLVERS or self.task not in TASKS:
            raise OptionError(f"solver is one of {', '.join(SOLVERS)} and task one of {', '.join(TASKS)}, got "
                              f"{self.solver!r}, {self.task!r}")
        if self.solver == "als" and self.task == "classification":
            raise OptionError("ALS fits the squared loss: classify by solver='mcmc' (probit)")
        if self.k < 0 or self.iterations < 1 or not 0 <= self.burn_in < self.iterations or self.init_std < 0 or \
                self.reg_w < 0 or self.reg_v < 0:
            raise OptionError(f"k >= 0, iterations >= 1, 0 <= burn_in < iterations, init_std, reg_w and reg_v >= 0, "
                              f"got {self}")


class CoordinateSolver:
    """ALS or MCMC for an FM on the rows of `train` (a SparseDataset, its fields the prior groups; labels
    the targets, or 0/1 classes for classification), on `device` in `dtype`. iterate() runs one sweep;
    `samples` counts MCMC's draws past burn_in, whose average coordinates() gives."""

    def __init__(self, settings, train, n_features=None, device="cpu", dtype=torch.float64, generator_device=None):
        """generator_device: where the normals are drawn (default `device`; "cpu" draws a GPU run's
        numbers as a CPU run's, moved to the GPU: for comparisons)."""
        self.settings, self.device, self.dtype = settings, torch.device(device), dtype
        self.n_features = n_features or train.n_features
        self.blocks, self.priors = coordinate_blocks(train, self.device, dtype)
        self.n_rows = train.n_rows
        labels = train.labels.to(self.device, dtype)
        self.classes = labels > 0.5 if settings.task == "classification" else None
        self.targets = labels if self.classes is None else torch.where(self.classes, 1.0, -1.0).to(dtype)
        k = settings.k
        self.generator = torch.Generator(generator_device or self.device).manual_seed(settings.seed)
        self.host = np.random.default_rng(settings.seed)
        self.w0 = torch.zeros((), device=self.device, dtype=dtype)
        self.w = torch.zeros(self.n_features, device=self.device, dtype=dtype)
        self.v = torch.zeros((self.n_features, k), device=self.device, dtype=dtype)
        for features in self.priors:
            self.v[features] = settings.init_std * self._normal((features.numel(), k))
        self.alpha = 1.0
        n_groups = len(self.priors)
        self.mu_w, self.lambda_w = np.zeros(n_groups), np.full(n_groups, settings.initial_precision)
        self.mu_v, self.lambda_v = np.zeros((n_groups, k)), np.full((n_groups, k), settings.initial_precision)
        self.q = torch.zeros((self.n_rows, k), device=self.device, dtype=dtype)
        for block in self.blocks:
            self.q.index_add_(0, block.rows, block.values[:, None] * self.v[block.features[block.local]])
        self.e = self.targets - fm_scores(train, (self.w0, self.w, self.v))
        # w0's block of one coordinate, made once: (its entries' values, rows, local positions)
        every_row = torch.arange(self.n_rows, device=self.device)
        self._w0_entries = (torch.ones(self.n_rows, device=self.device, dtype=dtype), every_row,
                            torch.zeros_like(every_row))
        self.iteration = 0
        self.samples = 0
        self.mean = None       # (w0, w, v) averaged over MCMC's kept samples

    def _normal(self, shape):
        drawn = torch.randn(shape, generator=self.generator, device=self.generator.device, dtype=self.dtype)
        return drawn.to(self.device)

    def _draw(self, old, h, rows, local, count, mu, precision_prior):
        """One block of coordinates (old [count], their entries' h, rows, local positions): each set to
        its conditional's mean (ALS) or drawn from it (MCMC); the residuals follow. Returns the change."""
        numerator = torch.zeros(count, device=self.device, dtype=self.dtype)
        numerator.index_add_(0, local, h * (self.e[rows] + old[local] * h))
        curvature = torch.zeros(count, device=self.device, dtype=self.dtype).index_add_(0, local, h * h)
        precision = self.alpha * curvature + precision_prior
        # a coordinate of zero curvature under no prior (ALS without L2, only zero values) stays put
        mean = torch.where(precision > 0, (self.alpha * numerator + mu * precision_prior) / precision, old)
        new = mean if self.settings.solver == "als" else mean + self._normal(count) / precision.sqrt()
        change = new - old
        self.e.index_add_(0, rows, -change[local] * h)
        return change

    def _priors(self, index, f=None):
        """(mean, precision) of a group's w (f None) or v_{.,f}: ALS's L2, MCMC's drawn hyper-priors."""
        if self.settings.solver == "als":
            return 0.0, self.settings.reg_w if f is None else self.settings.reg_v
        if f is None:
            return float(self.mu_w[index]), float(self.lambda_w[index])
        return float(self.mu_v[index, f]), float(self.lambda_v[index, f])

    def _latent_targets(self):
        """Probit's latent z ~ N(ŷ, 1) truncated to the side of the row's class; the residuals become z - ŷ."""
        prediction = (self.targets - self.e).double()
        u = torch.rand(self.n_rows, generator=self.generator, device=self.generator.device,
                       dtype=torch.float64).to(self.device)
        normal = torch.distributions.Normal(torch.zeros((), dtype=torch.float64, device=self.device), 1.0)
        below = normal.cdf(-prediction)          # P(z < 0)
        low = torch.where(self.classes, below, torch.zeros_like(below))
        high = torch.where(self.classes, torch.ones_like(below), below)
        p = (low + u * (high - low)).clamp(1e-15, 1 - 1e-15)
        z = prediction + torch.special.ndtri(p)
        self.targets = z.to(self.dtype)
        self.e = self.targets - prediction.to(self.dtype)

    def iterate(self):
        """One sweep in libFM's and myFM's order: (MCMC: classification's latent targets or the noise
        precision,) w_0, (MCMC: the fields' w priors,) every field's w, (the fields' v priors,) then for
        each f every field's v_{.,f}."""
        s = self.settings
        hypers = s.solver == "mcmc" and s.draw_hypers
        if s.solver == "mcmc" and self.classes is not None:
            self._latent_targets()
        elif hypers:
            squared = float((self.e.double() ** 2).sum())
            self.alpha = self.host.gamma((s.alpha_0 + self.n_rows) / 2, 2 / (s.beta_0 + squared))
        self.w0 += self._draw(self.w0.view(1), *self._w0_entries, 1, 0.0, 0.0)[0]
        if hypers:
            self._draw_group_priors(self.w[:, None], self.mu_w[:, None], self.lambda_w[:, None])
        for block in self.blocks:
            mu, precision = self._priors(block.prior)
            self.w[block.features] += self._draw(self.w[block.features], block.values, block.rows, block.local,
                                                 block.features.numel(), mu, precision)
        if hypers:
            self._draw_group_priors(self.v, self.mu_v, self.lambda_v)
        for f in range(s.k):
            for block in self.blocks:
                old = self.v[block.features, f]
                h = block.values * (self.q[block.rows, f] - block.values * old[block.local])
                mu, precision = self._priors(block.prior, f)
                change = self._draw(old, h, block.rows, block.local, block.features.numel(), mu, precision)
                self.v[block.features, f] = old + change
                self.q[:, f].index_add_(0, block.rows, change[block.local] * block.values)
        self.iteration += 1
        if s.solver == "mcmc" and self.iteration > s.burn_in:
            self.samples += 1
            current = (self.w0, self.w, self.v)
            if self.mean is None:
                self.mean = tuple(value.clone() for value in current)
            for mean, value in zip(self.mean, current):
                mean += (value - mean) / self.samples

    def coordinates(self):
        """(w0, w, v) that a model of this fit keeps: MCMC's average over its kept samples (the
        posterior mean: on MovieLens its predictions score as the samples' mean prediction does,
        benchmarks/fm_mcmc.py), or the current ones (ALS, or MCMC within its burn-in)."""
        return self.mean if self.mean is not None else (self.w0, self.w, self.v)

    def _draw_group_priors(self, params, mu, precision):
        """Every field's prior mean and precision of each column of params ([n_features, columns]: w as
        one column, or v), in place in mu and precision ([fields, columns]), from their Normal-Gamma
        conditionals as libFM's; one read of the device."""
        moments = [torch.cat([params[features].sum(0), (params[features] ** 2).sum(0)]) for features in self.priors]
        moments = torch.stack(moments).double().cpu().numpy()
        columns = params.shape[1]
        for index, features in enumerate(self.priors):
            for column in range(columns):
                precision[index, column], mu[index, column] = self._normal_gamma(
                    features.numel(), moments[index, column], moments[index, columns + column], mu[index, column])

    def _normal_gamma(self, n, total, square, mu):
        """(precision, mean) of a group of n coordinates (their sum and sum of squares): the precision
        from Gamma given the current mean, then the mean from its Normal given the new precision."""
        s, rng = self.settings, self.host
        spread = square - 2 * mu * total + n * mu * mu + s.gamma_0 * (mu - s.mu_0) ** 2
        precision = rng.gamma((s.alpha_lambda + n + 1) / 2, 2 / (s.beta_lambda + spread))
        mean = rng.normal((total + s.gamma_0 * s.mu_0) / (n + s.gamma_0), 1 / math.sqrt((n + s.gamma_0) * precision))
        return precision, mean

    def predict(self, dataset, coordinates=None):
        """ŷ of a SparseDataset's rows (its feature ids in this model's numbering) under `coordinates`
        ((w0, w, v); default the current ones; probit's latent mean for classification)."""
        return fm_scores(dataset, coordinates or (self.w0, self.w, self.v))


def fm_scores(dataset, coordinates):
    """The FM's ŷ = w0 + Σ w x + ½ Σ_f ((Σ v_f x)² - Σ v_f² x²) of a SparseDataset's rows under
    coordinates (w0, w, v) (tensors, on the device and in the dtype it computes in); features past
    the coordinates' weigh nothing."""
    w0, w, v = coordinates
    device, dtype = w.device, w.dtype
    rows = dataset.entry_rows().long().to(device)
    ids = dataset.indices.long().to(device)
    x = dataset.values_or_ones().to(device, dtype)
    known = ids < w.numel()
    rows, ids, x = rows[known], ids[known], x[known]
    linear = torch.full((dataset.n_rows,), float(w0), device=device, dtype=dtype)
    linear.index_add_(0, rows, w[ids] * x)
    sums = torch.zeros((dataset.n_rows, v.shape[1]), device=device, dtype=dtype)
    sums.index_add_(0, rows, v[ids] * x[:, None])
    squares = torch.zeros(dataset.n_rows, device=device, dtype=dtype)
    squares.index_add_(0, rows, (v[ids] ** 2).sum(1) * x ** 2)
    return linear + 0.5 * ((sums ** 2).sum(1) - squares)
