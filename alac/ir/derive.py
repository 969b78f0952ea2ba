"""Passes that derive Apply from Aggregate and Loss, check an explicit Apply, and eliminate common
subexpressions. Each pass is a pure function ModelIR -> ModelIR.

The chain rule through the accums: for accums A_a = sum_j c_a(x_ij, p_j),
    dL/dp_j = sum_a dL/dA_a * dc_a/dp_j.
dL/dA_a (`d_<a>`) is computed once per sample; the per-edge gradient multiplies it with dc_a/dp_j.
Sums over the factor axis are differentiated lane by lane: d/dv_f sum_g e(v_g) = e'(v_f), and a scalar
param that feeds a vector accum gets sum_f d_a_f * dc_a_f/dp.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import sympy as sp

from alac.errors import ModelError
from alac.ir.functions import FactorSum
from alac.ir.model_ir import Definition, is_lane_expr
from alac.ir.names import LOSS, PREDICTION, X, Y, delta_name, global_grad_name, grad_name, l2_name, symbol


def lane_derivative(expr, wrt, lane_symbols):
    """d expr / d wrt, where wrt is a scalar symbol or stands for one lane of a vector symbol."""
    sums = sorted(expr.atoms(FactorSum), key=sp.default_sort_key)
    placeholders = [sp.Symbol(f"_sum{i}", real=True) for i in range(len(sums))]
    flat = expr.xreplace(dict(zip(sums, placeholders)))
    result = flat.diff(wrt)
    for summed, placeholder in zip(sums, placeholders):
        outer = flat.diff(placeholder)
        if outer == 0:
            continue
        inner = lane_derivative(summed.args[0], wrt, lane_symbols)
        if inner == 0:
            continue
        result += outer * (inner if wrt in lane_symbols else FactorSum(inner))
    return result.xreplace(dict(zip(placeholders, sums)))


def derive_gradients(ir):
    """Fill accum_deltas (dL/dA), global_grads (dL/dg) and param_grads (per edge, with L2)."""
    lanes = ir.lane_symbols
    deltas = tuple(Definition(delta_name(a.name), lane_derivative(ir.loss, symbol(a.name), lanes), a.vector)
                   for a in ir.accums)
    global_grads = tuple(Definition(global_grad_name(g), lane_derivative(ir.loss, symbol(g), lanes), False)
                         for g in ir.globals)
    grads = []
    for param in ir.params:
        p = symbol(param.name)
        total = sp.Integer(0)
        for accum in ir.accums:
            inner = lane_derivative(accum.contribution, p, lanes)
            if inner == 0:
                continue
            term = symbol(delta_name(accum.name)) * inner
            total += FactorSum(term) if accum.vector and not param.vector else term
        if total == 0:
            raise ModelError(f"model {ir.name}: param '{param.name}' feeds no accum, so it gets no gradient")
        grads.append(Definition(grad_name(param.name), total + symbol(l2_name(param.name)) * p, param.vector))
    return dataclasses.replace(ir, accum_deltas=deltas, global_grads=global_grads, param_grads=tuple(grads))


_NUMERIC = {
    "Sigmoid": lambda z: 1.0 / (1.0 + np.exp(-z)),
    "Softplus": lambda z: np.logaddexp(0.0, z),
    "Log1p": np.log1p,
    "FactorSum": lambda z: np.sum(z, axis=-1),
    "Heaviside": lambda z, h0=0.5: np.heaviside(z, h0),
}
# Lanes and random points of the numeric comparison: 3 lanes catch a lane mix-up, 6 points catch a
# wrong branch of a piecewise gradient with probability > 0.98 when either branch is likely.
_CHECK_LANES = 3
_CHECK_POINTS = 6


def loss_gradient(ir, param_name):
    """The derived per-edge loss gradient of a param, without L2, in x, params, accums, globals, y."""
    grad = next(d.expr for d in ir.param_grads if d.name == grad_name(param_name))
    grad = grad.subs(symbol(l2_name(param_name)), 0)
    return grad.xreplace({symbol(d.name): d.expr for d in ir.accum_deltas})


def numerically_equal(first, second, lane_symbols, binary_labels, seed=0):
    """Compare two expressions at random points (vector symbols get several lanes)."""
    symbols = sorted((first - second).free_symbols | first.free_symbols | second.free_symbols,
                     key=lambda s: s.name)
    generator = np.random.default_rng(seed)
    functions = [sp.lambdify(symbols, e, modules=[_NUMERIC, "numpy"]) for e in (first, second)]
    for _ in range(_CHECK_POINTS):
        values = []
        for s in symbols:
            shape = (_CHECK_LANES,) if s in lane_symbols else ()
            if s == Y and binary_labels:
                values.append(float(generator.choice([-1.0, 1.0])))
            elif s == X:
                values.append(generator.uniform(0.5, 2.0))
            else:
                values.append(generator.normal(0.0, 1.0, shape))
        a, b = (np.broadcast_to(np.asarray(f(*values), dtype=float), (_CHECK_LANES,)) for f in functions)
        if not np.allclose(a, b, rtol=1e-9, atol=1e-12):
            return False
    return True


def check_explicit_apply(ir):
    """An explicit Apply must equal the derived gradient; the derived one is what gets compiled."""
    for name, expr in ir.explicit_apply:
        derived = loss_gradient(ir, name)
        if not numerically_equal(expr, derived, ir.lane_symbols, ir.labels == "binary"):
            raise ModelError(f"model {ir.name}: the explicit apply of param '{name}' disagrees with the "
                             f"derived gradient:\n  apply:   {expr}\n  derived: {derived}")
    return ir


def _program(outputs, lane_symbols, temp_prefix):
    """CSE over named outputs: a tuple of Definitions, temps first, in evaluation order."""
    names = [name for name, _ in outputs]
    temps, reduced = sp.cse([expr for _, expr in outputs],
                            symbols=sp.numbered_symbols(temp_prefix, real=True), optimizations="basic")
    lanes = set(lane_symbols)
    program = []
    for temp, expr in temps:
        vector = is_lane_expr(expr, frozenset(lanes))
        if vector:
            lanes.add(temp)
        program.append(Definition(temp.name, expr, vector))
    for name, expr in zip(names, reduced):
        program.append(Definition(name, expr, is_lane_expr(expr, frozenset(lanes))))
    return tuple(program)


def eliminate_common_subexpressions(ir):
    lanes = ir.lane_symbols
    sample = [(LOSS, ir.loss)] + [(d.name, d.expr) for d in ir.accum_deltas + ir.global_grads]
    edge = [(d.name, d.expr) for d in ir.param_grads]
    return dataclasses.replace(
        ir, sample_program=_program(sample, lanes, "ts"),
        predict_program=_program([(PREDICTION, ir.predict)], lanes, "tp"),
        edge_program=_program(edge, lanes, "te"))
