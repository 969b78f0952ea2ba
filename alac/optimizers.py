"""Optimizers as DSL update rules: per-coordinate state and one update expression, compiled into
every kernel family's update step (and into the reference executor) like the model's own math.

An optimizer declares its state (initial values; per element of a param, or per row of a vector
param for `row_state`) and hyper-parameters (run-time arguments), and defines

    update(self, p, g, s, h) -> (new p, {state name: new value})

for one coordinate: p the parameter, g its gradient (the batch mean in sync semantics; one sample's
gradient / B in async), s the state, h the hyper-parameters plus `lr`, `l1` and `l2` (the param's
regularization coefficients; `h.has_l1` says whether any param has an l1, so that an optimizer can
leave the L1 arithmetic out of the kernels when there is none). In sync semantics the rule runs once
per touched feature per batch (lazy: untouched rows keep their state). In async semantics every edge
applies it at once, lock-free: a value whose change does not depend on its own old value (p under
SGD, AdaGrad or Adam; AdaGrad's accumulator; FTRL's z and n) gets the change added atomically, so
concurrent updates add up as in Hogwild; any other (FTRL's weight, momentum's velocity, Adam's
moments) gets its new value stored, the last writer winning: adding N concurrent changes computed
from the same old value would overshoot N-fold and diverge on hot features.

A new optimizer is a subclass (see RMSProp in the README):

    class RMSProp(Optimizer):
        name = "rmsprop"
        state = {"mean_square": 0.0}
        hyper = {"rho": 0.9, "eps": 1e-8}

        def update(self, p, g, s, h):
            mean_square = h.rho * s.mean_square + (1 - h.rho) * g * g
            return p - h.lr * g / (ops.sqrt(mean_square) + h.eps), {"mean_square": mean_square}

An optimizer may also define param_from_state(s, h): the param as a function of its state alone
(FTRL's weight). Async kernels then compute the param from the state where they read it (on cold
edges) rather than storing it; see alac.plan.Plan.derive_params.

Regularization: the param's l2 enters the gradient (lazily, per occurrence, `l2 * p`) for every
optimizer except FTRL, which applies l1 and l2 in its closed form; l1 is applied by FTRL and by
proximal SGD (soft thresholding after the step); other optimizers reject l1.
"""

from __future__ import annotations

from alac.dsl import ops
from alac.errors import ModelError


class Optimizer:
    name = None
    state = {}          # state name -> initial value
    row_state = ()      # state names kept once per row of a vector param (row-wise variants)
    hyper = {}          # hyper-parameter name -> default value (None: batch_default gives it)
    # hyper-parameters h whose complement 1 - h the update reads as h.one_minus_<h>, computed on the
    # host in float64: in float32 1 - 0.999 keeps four digits, and simplified forms such as
    # 1 + b c - b cancel catastrophically (GPU FMA contraction then rounds them differently again)
    complements = ()
    supports_l1 = False
    gradient_l2 = True  # whether the param's l2 is added to the gradient (FTRL applies it itself)
    # The learning rate when none is given: None keeps the model's SGD default (times lr_factor).
    default_lr = None
    lr_factor = 1.0

    def __init__(self, **hyper):
        unknown = set(hyper) - set(self.hyper)
        if unknown:
            raise ModelError(f"optimizer {self.name} has no hyper-parameter {sorted(unknown)}; "
                             f"it takes {sorted(self.hyper) or 'none'}")
        self.values = {**self.hyper, **{k: float(v) for k, v in hyper.items() if v is not None}}

    def update(self, p, g, s, h):
        raise NotImplementedError

    def param_from_state(self, s, h):
        """The param as a function of the state alone, when it is one (FTRL's weight is its closed
        form in z and n), else None. Async kernels then compute the param where they read it instead
        of storing it (`Plan.derive_params`): the update's remaining changes are all additive, so they
        become plain atomic additions, with no value to wait for and no store."""
        return None

    def batch_default(self, name, batch_size, value_scale):
        """The value of hyper-parameter `name` left at None, for batches of batch_size samples of
        features whose values have mean magnitude value_scale (1 for one-hot data)."""
        raise NotImplementedError

    @classmethod
    def hyper_names(cls):
        """Every hyper-parameter the update reads: the declared ones, then the complements."""
        return (*cls.hyper, *(f"one_minus_{h}" for h in cls.complements))

    def hyper_values(self, batch_size, value_scale=1.0):
        """The hyper-parameters a run uses, with batch- and data-dependent defaults filled in, and
        the complements."""
        values = {k: self.batch_default(k, batch_size, value_scale) if v is None else v for k, v in self.values.items()}
        return {**values, **{f"one_minus_{h}": 1.0 - float(values[h]) for h in self.complements}}

    def describe(self):
        return f"{self.name}(" + ", ".join(f"{k}={'default' if v is None else format(v, 'g')}"
                                           for k, v in self.values.items()) + ")"


class SGD(Optimizer):
    """p <- p - lr g; with l1, proximal (soft-thresholded) SGD: the truncated-gradient method."""

    name = "sgd"
    supports_l1 = True

    def update(self, p, g, s, h):
        stepped = p - h.lr * g
        if not h.has_l1:
            return stepped, {}
        return ops.sign(stepped) * ops.maximum(ops.abs(stepped) - h.lr * h.l1, 0.0), {}


class Momentum(SGD):
    """Heavy-ball momentum, lazy: a row's velocity moves only when the row is touched."""

    name = "momentum"
    state = {"velocity": 0.0}
    hyper = {"momentum": 0.9}
    supports_l1 = False
    # the velocity sums about 1 / (1 - momentum) gradients: the same step size as SGD
    lr_factor = 0.1

    def update(self, p, g, s, h):
        velocity = h.momentum * s.velocity + g
        return p - h.lr * velocity, {"velocity": velocity}


class AdaGrad(Optimizer):
    """Duchi et al. 2011, per coordinate; for vector params row-wise (one accumulator per row, fed
    the mean squared gradient of the row), as large embedding tables use it. alac's default optimizer
    (alac.defaults).

    eps defaults to 4 mean |x| / B: four times the batch-mean gradient one occurrence of a typical
    feature value makes, so that a feature's step grows to half size over its first ~16 occurrences
    instead of being full-size at the first (rare features' single observations are noise), while
    the step stays scale-free. On the shared data (benchmarks/defaults.py) that raised ipinyou's test
    AUC (rare clicks, many rare features) over eps = mean |x| / B and 1e-8, at equal or better results
    elsewhere. lr 0.2 is chosen on those real sets with early stopping; on the 4M x 39 synthetic set,
    10 epochs, 0.05 ends lower (benchmarks/optimizers.py).
    """

    name = "adagrad"
    state = {"accumulator": 0.0}
    row_state = ("accumulator",)
    hyper = {"eps": None, "initial_accumulator": 0.0}
    default_lr = 0.2
    # eps in gradients of one occurrence (see the docstring)
    EPS_OCCURRENCES = 4.0

    def batch_default(self, name, batch_size, value_scale):
        return self.EPS_OCCURRENCES * value_scale / batch_size

    def update(self, p, g, s, h):
        squared = ops.mean(g * g) if getattr(g, "vector", False) else g * g
        accumulator = s.accumulator + squared
        return p - h.lr * g / (ops.sqrt(accumulator + h.initial_accumulator) + h.eps), {"accumulator": accumulator}


class FTRL(Optimizer):
    """FTRL-Proximal, McMahan et al. 2013 (Algorithm 1), per coordinate. alpha is the run's lr.

    McMahan's beta = 1 is for per-sample gradients; alac's are batch means (async: one sample's
    gradient / B), B times smaller, so sqrt(n) stays far below 1 for most features and beta = 1 turns
    FTRL into SGD at rate alpha / beta (measured: async LR alpha 1 reached validation logloss +0.0042
    from tuned SGD, as SGD at lr 1 does). The default beta is mean |x| / B, the paper's beta on the
    batch-mean scale of the data's values; then the step is AdaGrad's (scale-free).
    """

    name = "ftrl"
    state = {"z": 0.0, "n": 0.0}
    hyper = {"beta": None}
    supports_l1 = True
    gradient_l2 = False
    # alpha 0.05 with beta = 1 / B: below tuned SGD's validation logloss on the 4M x 39 synthetic set,
    # sync and async (benchmarks/optimizers.py); alpha 0.02-0.1 within the defaults targets
    # on the shared data sets (benchmarks/defaults.py)
    default_lr = 0.05

    def batch_default(self, name, batch_size, value_scale):
        return value_scale / batch_size

    def update(self, p, g, s, h):
        n = s.n + g * g
        sigma = (ops.sqrt(n) - ops.sqrt(s.n)) / h.lr
        z = s.z + g - sigma * p
        return self._weight(z, n, h), {"z": z, "n": n}

    def param_from_state(self, s, h):
        return self._weight(s.z, s.n, h)

    @staticmethod
    def _weight(z, n, h):
        return ops.where(ops.abs(z) > h.l1, -(z - ops.sign(z) * h.l1) / ((h.beta + ops.sqrt(n)) / h.lr + h.l2), 0.0)


class Adam(Optimizer):
    """Kingma and Ba 2015, lazy (sparse): moments and bias corrections of a row move only when the
    row is touched. The corrections 1 - beta**t are kept directly, by c <- beta c + (1 - beta):
    computing beta**t (as a power or a running product) and subtracting it from 1 in float32 loses
    a digit for every decade of 1 - beta (2e-5 relative for beta2 = 0.999 after 3 steps). 1 - beta
    itself comes from the host (complements): traced as 1 - h.beta, the step simplified to
    1 + beta c - beta, whose rounding on an H100 (FMA) moved alac.nn's tables 1e-5 from the torch
    programs' (tests/nn/test_kernels.py)."""

    name = "adam"
    state = {"m": 0.0, "v": 0.0, "correction1": 0.0, "correction2": 0.0}
    row_state = ("correction1", "correction2")
    hyper = {"beta1": 0.9, "beta2": 0.999, "eps": 1e-8}
    complements = ("beta1", "beta2")
    # Adam's step, like AdaGrad's, is scale-free: the usual default
    default_lr = 0.01

    def update(self, p, g, s, h):
        correction1 = h.beta1 * s.correction1 + h.one_minus_beta1
        correction2 = h.beta2 * s.correction2 + h.one_minus_beta2
        m = h.beta1 * s.m + h.one_minus_beta1 * g
        v = h.beta2 * s.v + h.one_minus_beta2 * g * g
        return (p - h.lr * (m / correction1) / (ops.sqrt(v / correction2) + h.eps),
                {"m": m, "v": v, "correction1": correction1, "correction2": correction2})


OPTIMIZERS = {o.name: o for o in (SGD, Momentum, AdaGrad, FTRL, Adam)}


def get_optimizer(name, **hyper):
    if isinstance(name, Optimizer):
        return name
    if name not in OPTIMIZERS:
        raise ModelError(f"unknown optimizer {name!r}; choose one of {', '.join(OPTIMIZERS)}")
    return OPTIMIZERS[name](**hyper)
