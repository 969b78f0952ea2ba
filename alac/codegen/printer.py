"""Printing IR expressions as Triton or PyTorch code: one printer, two dialects.

Every symbol has a rank, the axes it varies over: "uniform" (one value per program: globals, L2
coefficients), "row" (one per sample: a [C] block in a kernel, an [n] tensor in PyTorch), "lane" (per
row and factor lane: [C, BLOCK_K] / [n, k]), and in kernels that take several edge slots at a time
"edge" ([S, C]: slot, row) and "edge_lane" ([S, C, BLOCK_K]). Shapes align on trailing axes, so only
a value without the lane axis needs an index in a lane context: `name[:, None]` or `name[:, :, None]`.
FactorSum prints as a masked sum over the lane axis.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import sympy as sp

from alac.ir.functions import FactorSum
from alac.ir.ranks import RANK_AXES, axes_of, rank_with_axes


@dataclass(frozen=True)
class Dialect:
    name: str
    functions: dict          # sympy function name -> callable name
    where: str
    maximum: str
    minimum: str
    lane_sum: str            # format with {expr}, {axis}: sum over the lane axis of a lane expression
    general_pow: str         # format with {base}, {exponent}


TRITON = Dialect(
    name="triton",
    functions={"exp": "tl.exp", "log": "tl.log", "sqrt": "tl.sqrt", "Abs": "tl.abs",
               "Sigmoid": "tl.sigmoid", "Softplus": "softplus", "Log1p": "log1p", "tanh": "tanh"},
    where="tl.where", maximum="tl.maximum", minimum="tl.minimum",
    lane_sum="tl.sum(tl.where(lane_valid, {expr}, 0.0), axis={axis})",
    general_pow="tl.exp(({exponent}) * tl.log({base}))",
)

# Generated code where K is a power of two (K == BLOCK_K): no padding lanes to mask out of lane sums.
TRITON_FULL_LANES = dataclasses.replace(TRITON, lane_sum="tl.sum({expr}, axis={axis})")

TORCH = Dialect(
    name="torch",
    functions={"exp": "torch.exp", "log": "torch.log", "sqrt": "torch.sqrt", "Abs": "torch.abs",
               "Sigmoid": "torch.sigmoid", "Softplus": "_softplus", "Log1p": "torch.log1p",
               "tanh": "torch.tanh"},
    where="torch.where", maximum="_maximum", minimum="_minimum",
    lane_sum="({expr}).sum(dim={axis})",
    general_pow="torch.pow({base}, {exponent})",
)

_RELATIONS = {sp.StrictGreaterThan: ">", sp.StrictLessThan: "<", sp.GreaterThan: ">=",
              sp.LessThan: "<=", sp.Equality: "==", sp.Unequality: "!="}


def _enclosed(text):
    """True when text is one parenthesized group, '(...)'."""
    if not (text.startswith("(") and text.endswith(")")):
        return False
    depth = 0
    for i, char in enumerate(text):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if depth == 0 and i < len(text) - 1:
            return False
    return True


class ExpressionPrinter:
    def __init__(self, dialect, names, ranks):
        """names: symbol name -> code name; ranks: symbol name -> rank."""
        self.dialect = dialect
        self.names = names
        self.ranks = ranks

    def __call__(self, expr, context="row"):
        return self._print(sp.sympify(expr), context)

    def _number(self, value):
        text = repr(float(value))
        return f"({text})" if text.startswith("-") else text

    def _print(self, e, context):
        d = self.dialect
        if isinstance(e, sp.Symbol):
            return self._broadcast(self.names.get(e.name, e.name), RANK_AXES[self.ranks[e.name]], context)
        if isinstance(e, (sp.Integer, sp.Rational, sp.Float)) or e in (sp.pi, sp.E):
            return self._number(e)
        if e is sp.true or e is sp.false:
            raise ValueError(f"a constant condition {e} cannot be printed as a tensor")
        if isinstance(e, FactorSum):
            inner = axes_of(e.args[0], self.ranks) | {"lane"}
            axis = len(inner) - 1
            summed = d.lane_sum.format(expr=self._print(e.args[0], rank_with_axes(inner)), axis=axis)
            return self._broadcast(summed, RANK_AXES[rank_with_axes(inner - {"lane"})], context)
        if isinstance(e, sp.Add):
            terms = sorted(e.args, key=lambda t: t.could_extract_minus_sign())
            text = self._print(terms[0], context)
            for term in terms[1:]:
                if term.could_extract_minus_sign():
                    text += f" - {self._factor(-term, context)}"
                else:
                    text += f" + {self._print(term, context)}"
            return f"({text})"
        if isinstance(e, sp.Mul):
            return self._mul(e, context)
        if isinstance(e, sp.Pow):
            return self._pow(e, context)
        if isinstance(e, sp.Piecewise):
            return self._piecewise(e.args, context)
        if isinstance(e, sp.Heaviside):
            z = self._print(e.args[0], context)
            at_zero = self._number(e.args[1]) if len(e.args) > 1 else "0.5"
            return f"{d.where}({z} > 0.0, 1.0, {d.where}({z} < 0.0, 0.0, {at_zero}))"
        if isinstance(e, sp.sign):
            z = self._print(e.args[0], context)
            return f"{d.where}({z} > 0.0, 1.0, {d.where}({z} < 0.0, -1.0, 0.0))"
        if isinstance(e, (sp.Max, sp.Min)):
            function = d.maximum if isinstance(e, sp.Max) else d.minimum
            args = [self._print(a, context) for a in e.args]
            text = args[0]
            for arg in args[1:]:
                text = f"{function}({text}, {arg})"
            return text
        if type(e) in _RELATIONS:
            return f"({self._print(e.lhs, context)} {_RELATIONS[type(e)]} {self._print(e.rhs, context)})"
        if isinstance(e, sp.And):
            return "(" + " & ".join(self._print(a, context) for a in e.args) + ")"
        if isinstance(e, sp.Or):
            return "(" + " | ".join(self._print(a, context) for a in e.args) + ")"
        if isinstance(e, sp.Not):
            return f"(~{self._print(e.args[0], context)})"
        name = type(e).__name__
        if name in d.functions:
            return f"{d.functions[name]}({self._print(e.args[0], context)})"
        raise ValueError(f"alac cannot print {name} ({e}) as {d.name} code")

    @staticmethod
    def _broadcast(text, axes, context):
        """Index a value without the lane axis so that it broadcasts in a lane context."""
        if "lane" in RANK_AXES[context] and axes and "lane" not in axes:
            return f"{text}[{', '.join([':'] * len(axes))}, None]"
        return text

    def _factor(self, e, context):
        text = self._print(e, context)
        if isinstance(e, (sp.Symbol, sp.Number, sp.Function, sp.Add)) or _enclosed(text):
            return text
        return f"({text})"

    def _mul(self, e, context):
        coefficient, factors = e.as_coeff_mul()
        numerator, denominator = [], []
        for factor in factors:
            if isinstance(factor, sp.Pow) and factor.exp.is_Number and factor.exp < 0:
                denominator.append(factor.base ** -factor.exp)
            else:
                numerator.append(factor)
        parts = [self._factor(f, context) for f in numerator]
        sign = ""
        if coefficient == -1:
            sign = "-"
        elif coefficient != 1:
            parts.insert(0, self._number(coefficient))
        text = " * ".join(parts) if parts else "1.0"
        for factor in denominator:
            text += f" / {self._factor(factor, context)}"
        if sign and len(parts) == 1 and not denominator:
            return f"-{text}"
        return f"{sign}({text})" if sign else text

    def _pow(self, e, context):
        base, exponent = e.args
        if exponent == sp.Rational(1, 2):
            return f"{self.dialect.functions['sqrt']}({self._print(base, context)})"
        if exponent == -sp.Rational(1, 2):
            return f"(1.0 / {self.dialect.functions['sqrt']}({self._print(base, context)}))"
        if exponent.is_Integer and 1 <= abs(int(exponent)) <= 4:
            product = " * ".join([self._factor(base, context)] * abs(int(exponent)))
            return f"({product})" if exponent > 0 else f"(1.0 / ({product}))"
        if base == sp.E:
            return f"{self.dialect.functions['exp']}({self._print(exponent, context)})"
        return self.dialect.general_pow.format(base=self._print(base, context),
                                               exponent=self._print(exponent, context))

    def _piecewise(self, pieces, context):
        (value, condition), rest = pieces[0], pieces[1:]
        if condition is sp.true:
            return self._print(value, context)
        otherwise = self._piecewise(rest, context) if rest else "0.0"
        return f"{self.dialect.where}({self._print(condition, context)}, {self._print(value, context)}, {otherwise})"
