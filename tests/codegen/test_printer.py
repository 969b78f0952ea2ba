"""Printed PyTorch expressions evaluate to what sympy says they are."""

import numpy as np
import pytest
import sympy as sp
import torch

from alac.codegen.printer import TORCH, ExpressionPrinter
from alac.codegen.torch_programs import _maximum, _minimum, _softplus
from alac.ir.functions import FactorSum, Log1p, Sigmoid, Softplus
from alac.ir.ranks import rank_of

x, y, w, v, b = (sp.Symbol(n, real=True) for n in ("x", "y", "w", "v", "b"))
RANKS = {"x": "row", "y": "row", "w": "row", "v": "lane", "b": "uniform"}

EXPRESSIONS = [
    -y * Sigmoid(-y * (b + w * x)),
    Softplus(-y * w) / 3 + Log1p(x**2),
    sp.Max(0, 1 - y * w) + sp.Min(x, w, 2),
    sp.Heaviside(1 - y * w) * x,
    sp.Piecewise((x, y < 0), (w**2, True)),
    2 * x**2 * v * w - x * v / 2 + FactorSum(v**2 - w),
    sp.sqrt(x**2 + 1) + 1 / sp.sqrt(w**2 + 2) + (x**2 + 1) ** sp.Rational(3, 2) + sp.tanh(w),
    sp.exp(-w) / (1 + x**2) - sp.Abs(w) * sp.sign(x),
]

NUMERIC = {"Sigmoid": lambda z: 1 / (1 + np.exp(-z)), "Softplus": lambda z: np.logaddexp(0, z),
           "Log1p": np.log1p, "FactorSum": lambda z: np.sum(z, axis=-1),
           "Heaviside": lambda z, h=0.5: np.heaviside(z, h)}


@pytest.mark.parametrize("expr", EXPRESSIONS, ids=range(len(EXPRESSIONS)))
def test_torch_printing_matches_sympy(expr):
    generator = np.random.default_rng(0)
    rows, lanes = 7, 3
    values = {"x": generator.normal(size=rows), "y": generator.choice([-1.0, 1.0], rows),
              "w": generator.normal(size=rows), "v": generator.normal(size=(rows, lanes)), "b": 0.3}
    rank = rank_of(expr, RANKS)
    code = ExpressionPrinter(TORCH, {}, RANKS)(expr, "lane" if rank == "lane" else "row")
    namespace = {"torch": torch, "_softplus": _softplus, "_maximum": _maximum, "_minimum": _minimum}
    namespace.update({k: torch.tensor(val, dtype=torch.float64) for k, val in values.items()})
    printed = eval(code, namespace)
    function = sp.lambdify(list(sp.symbols("x y w v b", real=True)), expr, modules=[NUMERIC, "numpy"])
    expected = np.array([function(values["x"][i], values["y"][i], values["w"][i], values["v"][i], 0.3)
                         for i in range(rows)])
    np.testing.assert_allclose(np.broadcast_to(printed.numpy(), expected.shape), expected, rtol=1e-12)
