"""The sympy functions alac adds: numerically meaningful ops, and the factor-axis sum.

Keeping sigmoid, softplus and log1p as functions of their own (rather than rewriting them into
exp/log) lets the printers emit their stable forms, and gives the derived gradients their textbook
shape (d softplus = sigmoid, d sigmoid = sigmoid * (1 - sigmoid)).
"""

import sympy as sp


class Sigmoid(sp.Function):
    nargs = 1

    def fdiff(self, argindex=1):
        return Sigmoid(self.args[0]) * (1 - Sigmoid(self.args[0]))

    def _eval_rewrite_as_exp(self, arg, **kwargs):
        return 1 / (1 + sp.exp(-arg))


class Softplus(sp.Function):
    """log(1 + exp(z))."""

    nargs = 1

    def fdiff(self, argindex=1):
        return Sigmoid(self.args[0])

    def _eval_rewrite_as_exp(self, arg, **kwargs):
        return sp.log(1 + sp.exp(arg))


class Log1p(sp.Function):
    """log(1 + z)."""

    nargs = 1

    def fdiff(self, argindex=1):
        return 1 / (1 + self.args[0])

    def _eval_rewrite_as_exp(self, arg, **kwargs):
        return sp.log(1 + arg)


class FactorSum(sp.Function):
    """Sum over the factor axis of an elementwise (per-lane) expression: a scalar per sample.

    Its argument is written for one lane f: `FactorSum(vx**2 - v2x2)` is sum_f (vx_f**2 - v2x2_f).
    It has no fdiff: alac.ir.derive differentiates through it lane by lane.
    """

    nargs = 1


def rewrite_elementary(expr):
    """Rewrite alac's functions into exp/log (for symbolic comparison only, never for codegen)."""
    return expr.rewrite(sp.exp).replace(Log1p, lambda arg: sp.log(1 + arg))
