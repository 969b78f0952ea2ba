"""libFM's ALS and MCMC for factorization machines one coordinate at a time, in float64 on the CPU, as
Rendle's "Factorization Machines with libFM" (ACM TIST 2012, Algorithms 2 and 3) writes them: the
reference that alac.runtime.solvers.fm_coordinate, which steps a block's coordinates together, is
checked against. It visits the coordinates in the same blocks' order (alac.runtime.solvers.fm_blocks)
and draws its random numbers from the same generators in the same order (a block's normals as one
draw, taken by its coordinates in turn), so the two agree to rounding where the blocks' coordinates
are independent. For small problems: plain Python loops.
"""

from __future__ import annotations

import math

import numpy as np
import torch


def sequential_fit(settings, dataset, iterations=None):
    """(w0, w, v, alpha) after `iterations` sweeps (default settings.iterations) on a SparseDataset with
    fields; regression only."""
    from alac.runtime.solvers.fm_blocks import coordinate_blocks

    k, mcmc = settings.k, settings.solver == "mcmc"
    rows, features = dataset.entry_rows().numpy(), dataset.indices.long().numpy()
    values, targets = dataset.values_or_ones().double().numpy(), dataset.labels.double().numpy()
    n_features = dataset.n_features
    blocks, priors = coordinate_blocks(dataset, "cpu", torch.float64)
    blocks = [(block.prior, block.features.tolist()) for block in blocks]
    priors = [members.tolist() for members in priors]
    generator = torch.Generator().manual_seed(settings.seed)
    host = np.random.default_rng(settings.seed)

    def normals(count):
        return torch.randn(count, generator=generator, dtype=torch.float64).numpy()

    field_ids = range(len(priors))
    w0, w, v = 0.0, np.zeros(n_features), np.zeros((n_features, k))
    for members in priors:
        drawn = torch.randn((len(members), k), generator=generator, dtype=torch.float64).numpy()
        v[members] = settings.init_std * drawn
    occurrences = {j: np.nonzero(features == j)[0] for j in range(n_features)}
    n = len(targets)
    alpha = 1.0
    start = settings.initial_precision
    mu_w, lambda_w = {f: 0.0 for f in field_ids}, {f: start for f in field_ids}
    mu_v = {f: np.zeros(k) for f in field_ids}
    lambda_v = {f: np.full(k, start) for f in field_ids}
    s = settings
    hypers = mcmc and s.draw_hypers

    def prediction(i):
        mine = np.nonzero(rows == i)[0]
        x, ids = values[mine], features[mine]
        sums = (v[ids] * x[:, None]).sum(0)
        return w0 + (w[ids] * x).sum() + 0.5 * ((sums ** 2).sum() - ((v[ids] ** 2).sum(1) * x ** 2).sum())

    e = np.array([targets[i] - prediction(i) for i in range(n)])
    q = np.zeros((n, k))
    for entry in range(len(rows)):
        q[rows[entry]] += v[features[entry]] * values[entry]

    def step(old, h, at, noise, mu, precision_prior):
        """The coordinate's new value given its occurrences' h at rows `at` (e updated in place)."""
        numerator = sum(h[t] * (e[at[t]] + old * h[t]) for t in range(len(at)))
        curvature = sum(h[t] * h[t] for t in range(len(at)))
        precision = alpha * curvature + precision_prior
        new = (alpha * numerator + mu * precision_prior) / precision
        if mcmc:
            new += noise / math.sqrt(precision)
        for t in range(len(at)):
            e[at[t]] -= (new - old) * h[t]
        return new

    for _ in range(settings.iterations if iterations is None else iterations):
        if hypers:
            alpha = host.gamma((s.alpha_0 + n) / 2, 2 / (s.beta_0 + float((e ** 2).sum())))
        noise = normals(1)
        w0 = step(w0, np.ones(n), np.arange(n), noise[0], 0.0, 0.0)
        if hypers:
            for f in field_ids:
                lambda_w[f], mu_w[f] = _normal_gamma(s, host, w[priors[f]], mu_w[f])
        for f, members in blocks:
            noise = normals(len(members))
            for position, j in enumerate(members):
                at = rows[occurrences[j]]
                prior = (mu_w[f], lambda_w[f]) if mcmc else (0.0, settings.reg_w)
                w[j] = step(w[j], values[occurrences[j]], at, noise[position], *prior)
        if hypers:
            for f in field_ids:
                for factor in range(k):
                    lambda_v[f][factor], mu_v[f][factor] = _normal_gamma(s, host, v[priors[f], factor],
                                                                         mu_v[f][factor])
        for factor in range(k):
            for f, members in blocks:
                noise = normals(len(members))
                for position, j in enumerate(members):
                    at, x = rows[occurrences[j]], values[occurrences[j]]
                    h = x * (q[at, factor] - x * v[j, factor])
                    prior = (mu_v[f][factor], lambda_v[f][factor]) if mcmc else (0.0, settings.reg_v)
                    new = step(v[j, factor], h, at, noise[position], *prior)
                    q[at, factor] += (new - v[j, factor]) * x
                    v[j, factor] = new
    return w0, w, v, alpha


def _normal_gamma(s, host, values, mu):
    """A group's precision (Gamma, given its mean mu) and then its mean (Normal, given that precision)."""
    n = len(values)
    spread = float(((values - mu) ** 2).sum()) + s.gamma_0 * (mu - s.mu_0) ** 2
    precision = host.gamma((s.alpha_lambda + n + 1) / 2, 2 / (s.beta_lambda + spread))
    centre = (values.sum() + s.gamma_0 * s.mu_0) / (n + s.gamma_0)
    mean = host.normal(centre, 1 / math.sqrt((n + s.gamma_0) * precision))
    return precision, mean
