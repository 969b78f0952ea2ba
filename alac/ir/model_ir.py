"""ModelIR: what a model computes, as small immutable dataclasses of sympy expressions.

Symbols (all real): `x` the edge's feature value, `y` the label, a param's name for its value on
the edge's feature (one lane f of it when the param is a vector), an accum's name for the sample's
sum (one lane of it when vector), a global's name, `d_<accum>` for dLoss/dAccum, `l2_<param>` for
the param's L2 coefficient (a run-time argument, so changing it does not change the kernels).
`str(ir)` prints one line per definition, like a jaxpr, every binder with its dtype and rank;
`ir.hash` is a content hash of that listing (without the ranks, which follow from it) plus the exact
sympy forms.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import sympy as sp

from alac.ir.functions import FactorSum
from alac.ir.names import delta_name, symbol


@dataclass(frozen=True)
class ParamIR:
    name: str
    size: int          # 1 for a scalar per feature, k for a vector of factors

    @property
    def vector(self):
        return self.size > 1


@dataclass(frozen=True)
class AccumIR:
    name: str
    vector: bool
    contribution: sp.Expr   # per edge, summed over the sample's edges


@dataclass(frozen=True)
class Definition:
    """`name = expr`; vector when it has one value per lane of the factor axis."""

    name: str
    expr: sp.Expr
    vector: bool

    def __str__(self):
        return f"{self.name}{'[k]' if self.vector else ''} = {self.expr}"


@dataclass(frozen=True)
class ModelIR:
    name: str
    labels: str
    prediction_kind: str
    params: tuple
    globals: tuple                  # names
    accums: tuple
    loss: sp.Expr
    predict: sp.Expr
    factor_size: int = 0            # k of the vector params (0 when there are none)
    explicit_apply: tuple = ()      # (param, expr in x, params, accums, globals, y), as the user wrote it
    # Filled in by the derivation passes:
    accum_deltas: tuple = ()        # Definitions d_<accum> = dLoss/dAccum
    global_grads: tuple = ()        # Definitions dg_<global> = dLoss/dGlobal
    param_grads: tuple = ()         # Definitions grad_<param> = per-edge gradient (+ L2)
    # Common subexpressions eliminated, in evaluation order, for the code generators:
    sample_program: tuple = ()      # temps, then loss, d_*, dg_*: per sample, from accums, globals, y
    predict_program: tuple = ()     # temps, then prediction: per sample, from accums and globals
    edge_program: tuple = ()        # temps, then grad_*: per edge, from x, params, d_*, l2_*
    optimizer: object = None        # OptimizerIR: per-param state and update rule (alac.ir.optimizer_ir)

    @property
    def lane_symbols(self):
        """Symbols that hold one lane of a vector: vector params, accums and their deltas."""
        names = {p.name for p in self.params if p.vector}
        names |= {a.name for a in self.accums if a.vector}
        names |= {delta_name(a.name) for a in self.accums if a.vector}
        return frozenset(symbol(n) for n in names)

    @property
    def row_floats(self):
        """Floats of one feature's param rows (LR's w: 1; FM's w and v: 1 + k)."""
        return sum(p.size for p in self.params)

    def param(self, name):
        return next(p for p in self.params if p.name == name)

    def declaration_lines(self, derivatives=True):
        """The model as declared: params, globals, accums, loss, prediction, (derivatives) its
        derived gradients, and the optimizer's name."""
        out = [f"model {self.name}  labels={self.labels}  prediction={self.prediction_kind}"
               + (f"  k={self.factor_size}" if self.factor_size else "")]
        for p in self.params:
            out.append(f"  param   {p.name}{f'[{p.size}]' if p.vector else ''}")
        for g in self.globals:
            out.append(f"  global  {g}")
        for a in self.accums:
            out.append(f"  accum   {a.name}{'[k]' if a.vector else ''} = sum_edges {a.contribution}")
        out.append(f"  loss    = {self.loss}")
        out.append(f"  predict = {self.predict}")
        for title, definitions in (("dloss", self.accum_deltas), ("dglobal", self.global_grads),
                                   ("grad", self.param_grads)):
            out.extend(f"  {title:<7} {d}" for d in definitions if derivatives)
        for name, expr in self.explicit_apply:
            out.append(f"  apply   {name} = {expr}  (explicit, checked)")
        if self.optimizer is not None:
            out.append(f"  {self.optimizer.lines()[0]}")
        return out

    def lines(self, ranked=True):
        """The listing; ranked: every binder of the programs with its dtype and rank (alac.ir.ranks)."""
        if ranked:
            from alac.ir.ranks import LISTED, binder_ranks

            ranks = binder_ranks(self)

            def binder(d):
                return f"{d.name}: f32[{LISTED[ranks[d.name]]}] = {d.expr}"
        else:
            binder = str
        out = self.declaration_lines()[:-1 if self.optimizer is not None else None]
        for title, program in (("sample", self.sample_program), ("predict", self.predict_program),
                               ("edge", self.edge_program)):
            if program:
                out.append(f"  {title} program:")
                out.extend(f"    {binder(d)}" for d in program)
        if self.optimizer is not None:
            out.extend(f"  {line}" for line in self.optimizer.lines())
        return out

    def __str__(self):
        return "\n".join(self.lines())

    @property
    def hash(self):
        """Stable content hash: the listing plus the exact sympy form of every expression."""
        exprs = [a.contribution for a in self.accums] + [self.loss, self.predict]
        exprs += [d.expr for d in self.sample_program + self.predict_program + self.edge_program]
        if self.optimizer is not None:
            for update in (self.optimizer.scalar, self.optimizer.vector):
                if update is not None:
                    exprs += [d.expr for d in update.program + update.deltas + update.derived]
        # the ranks follow from the expressions: the unranked listing keeps the hash of every release
        text = "\n".join(self.lines(ranked=False)) + "\n" + "\n".join(sp.srepr(e) for e in exprs)
        return hashlib.sha256(text.encode()).hexdigest()


_SUMMED = sp.Symbol("_summed", real=True)


def without_factor_sums(expr):
    """expr with every FactorSum replaced by one scalar placeholder (what is left per lane)."""
    return expr.replace(FactorSum, lambda arg: _SUMMED)


def is_lane_expr(expr, lane_symbols):
    """True when expr varies per lane: a lane symbol occurs outside every FactorSum."""
    return bool(without_factor_sums(expr).free_symbols & lane_symbols)
