"""The model DSL: declare a wide model's Aggregate / Loss / Predict math in plain Python.

    from alac.dsl import Model, Param, Global, Normal, ops

    class FM(Model):
        labels = "binary"            # labels arrive as -1/+1 (0/1 files are mapped)
        prediction = "probability"

        def __init__(self, k=8):
            self.w = Param()
            self.v = Param(size=k, init=Normal(0.01))
            self.b = Global()

        def aggregate(self, x, p):   # one edge (feature value x, that feature's params p) ...
            return {"wx": x * p.w, "vx": x * p.v, "v2x2": x**2 * p.v**2}   # ... summed per sample

        def loss(self, a, g, y):     # per sample: accums a, globals g, label y
            z = g.b + a.wx + 0.5 * ops.sum(a.vx**2 - a.v2x2)
            return ops.softplus(-y * z)

        def predict(self, a, g):
            return ops.sigmoid(g.b + a.wx + 0.5 * ops.sum(a.vx**2 - a.v2x2))

The functions are traced once with symbolic arguments (`alac.ir.trace`); the gradient of every
parameter (Apply) is derived by the chain rule through the accums. A model may still give an
explicit `apply(self, x, p, a, g, y)` returning {param: per-edge gradient of the loss}; it is checked
against the derived one. Vector parameters (size k) make vector accums; expressions are elementwise
over the factor axis and `ops.sum` sums it.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass

import sympy as sp

from alac.errors import ModelError
from alac.ir.functions import FactorSum, Log1p, Sigmoid, Softplus


@dataclass(frozen=True)
class Constant:
    value: float = 0.0

    def __str__(self):
        return f"{self.value:g}"


@dataclass(frozen=True)
class Normal:
    std: float = 0.01
    mean: float = 0.0

    def __str__(self):
        return f"normal({self.mean:g}, {self.std:g})"


@dataclass(frozen=True)
class Uniform:
    low: float = -0.01
    high: float = 0.01

    def __str__(self):
        return f"uniform({self.low:g}, {self.high:g})"


def _initializer(init):
    if isinstance(init, numbers.Real):
        return Constant(float(init))
    if isinstance(init, (Constant, Normal, Uniform)):
        return init
    raise ModelError(f"unknown initializer {init!r}: use a number, Normal(std) or Uniform(low, high)")


@dataclass(frozen=True)
class Param:
    """Per-feature model state: a scalar (size=1) or a k-vector of factors; L2 and L1 coefficients
    (applied as the optimizer says: alac.optimizers)."""

    size: int = 1
    init: object = 0.0
    l2: float = 0.0
    l1: float = 0.0

    def __post_init__(self):
        if not isinstance(self.size, int) or self.size < 1:
            raise ModelError(f"Param size must be a positive integer, got {self.size!r}")
        object.__setattr__(self, "init", _initializer(self.init))


@dataclass(frozen=True)
class Global:
    """A dense scalar parameter shared by all samples (a bias)."""

    init: object = 0.0

    def __post_init__(self):
        object.__setattr__(self, "init", _initializer(self.init))


class Expr:
    """A traced expression: a sympy expression and whether it is a vector over the factor axis."""

    __slots__ = ("sym", "vector")

    def __init__(self, sym, vector=False):
        self.sym = sym
        self.vector = vector

    def _binary(self, other, operation, reverse=False):
        other = lift(other)
        left, right = (other, self) if reverse else (self, other)
        return Expr(operation(left.sym, right.sym), self.vector or other.vector)

    def __add__(self, other):
        return self._binary(other, lambda a, b: a + b)

    def __radd__(self, other):
        return self._binary(other, lambda a, b: a + b, reverse=True)

    def __sub__(self, other):
        return self._binary(other, lambda a, b: a - b)

    def __rsub__(self, other):
        return self._binary(other, lambda a, b: a - b, reverse=True)

    def __mul__(self, other):
        return self._binary(other, lambda a, b: a * b)

    def __rmul__(self, other):
        return self._binary(other, lambda a, b: a * b, reverse=True)

    def __truediv__(self, other):
        return self._binary(other, lambda a, b: a / b)

    def __rtruediv__(self, other):
        return self._binary(other, lambda a, b: a / b, reverse=True)

    def __pow__(self, other):
        return self._binary(other, lambda a, b: a**b)

    def __rpow__(self, other):
        return self._binary(other, lambda a, b: a**b, reverse=True)

    def __neg__(self):
        return Expr(-self.sym, self.vector)

    def __pos__(self):
        return self

    def __lt__(self, other):
        return self._binary(other, sp.StrictLessThan)

    def __le__(self, other):
        return self._binary(other, sp.LessThan)

    def __gt__(self, other):
        return self._binary(other, sp.StrictGreaterThan)

    def __ge__(self, other):
        return self._binary(other, sp.GreaterThan)

    def __bool__(self):
        raise ModelError("a model expression has no truth value while it is traced: "
                         "use ops.where(condition, a, b) instead of if / and / or")

    def __float__(self):
        raise ModelError("a model expression is symbolic: use alac.ops (ops.exp, ops.log, ...) "
                         "instead of math or numpy functions")

    __int__ = __index__ = __float__

    def __array__(self, *args, **kwargs):
        self.__float__()

    def __repr__(self):
        return f"Expr({self.sym}{', vector' if self.vector else ''})"


def lift(value):
    """A Python number or Expr as an Expr; numbers become exact rationals (0.5 -> 1/2)."""
    if isinstance(value, Expr):
        return value
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ModelError(f"cannot use {value!r} ({type(value).__name__}) in a model expression")
    if isinstance(value, numbers.Integral):
        return Expr(sp.Integer(int(value)))
    return Expr(sp.Rational(repr(float(value))))


def _elementwise(function):
    def op(*args):
        lifted = [lift(a) for a in args]
        return Expr(function(*[a.sym for a in lifted]), any(a.vector for a in lifted))

    return op


class _Ops:
    """The operations a model may use. Anything else is a ModelError naming the op."""

    exp = staticmethod(_elementwise(sp.exp))
    log = staticmethod(_elementwise(sp.log))
    log1p = staticmethod(_elementwise(Log1p))
    softplus = staticmethod(_elementwise(Softplus))
    sigmoid = staticmethod(_elementwise(Sigmoid))
    tanh = staticmethod(_elementwise(sp.tanh))
    abs = staticmethod(_elementwise(sp.Abs))
    sqrt = staticmethod(_elementwise(sp.sqrt))
    pow = staticmethod(_elementwise(lambda a, b: a**b))
    maximum = staticmethod(_elementwise(sp.Max))
    minimum = staticmethod(_elementwise(sp.Min))
    sign = staticmethod(_elementwise(sp.sign))

    @staticmethod
    def where(condition, if_true, if_false):
        condition = lift(condition)
        if not isinstance(condition.sym, sp.core.relational.Relational):
            raise ModelError(f"ops.where needs a comparison as its condition, got {condition.sym}")
        return _elementwise(lambda c, a, b: sp.Piecewise((a, c), (b, True)))(condition, if_true, if_false)

    @staticmethod
    def sum(expr):
        """Sum over the factor axis of a vector expression."""
        expr = lift(expr)
        if not expr.vector:
            raise ModelError(f"ops.sum sums over the factor axis, but {expr.sym} is a scalar")
        return Expr(FactorSum(expr.sym), False)

    @staticmethod
    def mean(expr):
        """Mean over the factor axis of a vector expression (its sum over the K factors, / K)."""
        return Expr(_Ops.sum(expr).sym / FACTORS, False)

    def __getattr__(self, name):
        raise ModelError(f"unknown op ops.{name}: alac offers {', '.join(OP_NAMES)}")


OP_NAMES = ("exp", "log", "log1p", "softplus", "sigmoid", "tanh", "abs", "sqrt", "pow", "maximum",
            "minimum", "sign", "where", "sum", "mean")
# The number of factors of the vector params, as a symbol (the code generators bind it).
FACTORS = sp.Symbol("K", positive=True, integer=True)
ops = _Ops()

LABEL_KINDS = ("binary", "real", "count")
PREDICTION_KINDS = ("probability", "score", "value")


class Model:
    """Base class of DSL models. Subclasses declare Param / Global attributes (on the class or in
    __init__) and define aggregate, loss and predict (and optionally apply).

    labels: "binary" (the loss sees y in {-1, +1}; 0/1 files are mapped), "real", or "count".
    prediction: "probability" (of the positive class), "score" (a margin), or "value".
    """

    name = None
    labels = "binary"
    prediction = "probability"

    def model_name(self):
        return self.name or type(self).__name__.lower()

    def declarations(self):
        """(params, globals): name -> Param / Global, in declaration order."""
        found = {}
        for klass in reversed(type(self).__mro__):
            for key, value in vars(klass).items():
                if isinstance(value, (Param, Global)):
                    found[key] = value
        for key, value in vars(self).items():
            if isinstance(value, (Param, Global)):
                found[key] = value
        params = {k: v for k, v in found.items() if isinstance(v, Param)}
        globals_ = {k: v for k, v in found.items() if isinstance(v, Global)}
        return params, globals_

    def aggregate(self, x, p):
        raise ModelError(f"model {self.model_name()} defines no aggregate(self, x, p)")

    def loss(self, a, g, y):
        raise ModelError(f"model {self.model_name()} defines no loss(self, a, g, y)")

    def predict(self, a, g):
        raise ModelError(f"model {self.model_name()} defines no predict(self, a, g)")

    apply = None


class LinearModel(Model):
    """The linear part every wide model shares: score = w.x + b, with L2 and L1 coefficients.
    Subclasses give loss and predict in terms of self.score(a, g)."""

    def __init__(self, l2=0.0, l1=0.0):
        self.w = Param(l2=l2, l1=l1)
        self.b = Global()

    def aggregate(self, x, p):
        return {"wx": x * p.w}

    def score(self, a, g):
        return a.wx + g.b
