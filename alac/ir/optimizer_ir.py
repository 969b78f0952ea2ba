"""Tracing an optimizer's update rule into IR: one program for scalar params and one for vector
params, each in two forms: the new values (sync update step, reference executor) and the changes
new - old (async updates, applied as atomic additions); and, for an optimizer whose param is a
function of its state (`Optimizer.param_from_state`), that function: `derived_p`.

Symbols: `p` the param coordinate, `g` its gradient, `s_<state>` the state, `lr`, `h_<hyper>`,
`l1` and `l2` (the param's coefficients, run-time arguments), `K` the factor count.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import sympy as sp

from alac.dsl import Constant, Expr, lift
from alac.errors import ModelError
from alac.ir.derive import _program
from alac.ir.names import symbol
from alac.ir.trace import Namespace


def state_symbol(name):
    return symbol(f"s_{name}")


def hyper_symbol(name):
    return symbol(f"h_{name}")


@dataclass(frozen=True)
class UpdateIR:
    vector: bool
    program: tuple     # Definitions: temps, new_p, new_s_<state>... (sync: stored)
    deltas: tuple      # async: temps, then delta_<x> for additive values, new_<x> for the others
    lane_symbols: frozenset
    derived: tuple = ()  # the param from the state alone: temps, derived_p (empty: no such function)

    def lines(self, title):
        out = [f"  {title} update:"] + [f"    {d}" for d in self.program]
        out += [f"  {title} async (delta_: added atomically, new_: stored):"] + [f"    {d}" for d in self.deltas]
        if self.derived:
            out += [f"  {title} param from the state:"] + [f"    {d}" for d in self.derived]
        return out


@dataclass(frozen=True)
class OptimizerIR:
    name: str
    states: tuple          # (name, initial value, kept per row of a vector param)
    hypers: tuple          # names
    gradient_l2: bool
    has_l1: bool
    scalar: UpdateIR
    vector: UpdateIR | None
    # params whose value is the optimizer's function of their state from the start (their constant
    # initial value is the function's value at the initial state): async kernels may derive them
    derivable: tuple = ()
    # no state, and every param's change is linear in its gradient alone (SGD without L1): a batch's
    # change is the sum of its edges' changes, so sync updates may add each edge's change
    additive: bool = False

    def for_param(self, param):
        return self.vector if param.vector else self.scalar

    def lines(self):
        out = [f"optimizer {self.name}  states: " + (", ".join(
            f"{n}{'[row]' if row else ''}={init:g}" for n, init, row in self.states) or "none")
            + f"  hypers: {', '.join(self.hypers) or 'none'}"
            + (f"  derivable: {', '.join(self.derivable)}" if self.derivable else "")
            + ("  additive" if self.additive else "")]
        out += self.scalar.lines("scalar")
        if self.vector is not None:
            out += self.vector.lines("vector")
        return out

    def __str__(self):
        return "\n".join(self.lines())


def _trace_update(optimizer, vector, has_l1):
    where = f"optimizer {optimizer.name}: update"
    row_state = set(optimizer.row_state)
    p = Expr(symbol("p"), vector)
    g = Expr(symbol("g"), vector)
    states = {name: Expr(state_symbol(name), vector and name not in row_state) for name in optimizer.state}
    hypers = {name: Expr(hyper_symbol(name)) for name in optimizer.hyper_names()}
    hypers.update(lr=Expr(symbol("lr")), l1=Expr(symbol("l1")) if has_l1 else lift(0), l2=Expr(symbol("l2")),
                  has_l1=has_l1)
    owner = f"optimizer {optimizer.name}"
    try:
        new_p, new_states = optimizer.update(p, g, Namespace(owner, "update", "state", states),
                                             Namespace(owner, "update", "hyper-parameter", hypers))
    except ModelError as error:
        if str(error).startswith(owner):
            raise
        raise ModelError(f"{where}: {error}") from None
    new_p = lift(new_p)
    if new_p.vector != vector:
        raise ModelError(f"{where} returns a {'vector' if new_p.vector else 'scalar'} param for a "
                         f"{'vector' if vector else 'scalar'} one")
    if set(new_states) != set(optimizer.state):
        raise ModelError(f"{where} must return every state ({sorted(optimizer.state)}), got {sorted(new_states)}")
    outputs = [("new_p", new_p.sym)]
    for name in optimizer.state:
        value = lift(new_states[name])
        if value.vector and not states[name].vector:
            raise ModelError(f"{where}: state '{name}' is kept per row, but its new value {value.sym} is a "
                             "vector: reduce it over the factor axis (ops.mean, ops.sum)")
        outputs.append((f"new_s_{name}", value.sym))
    lanes = frozenset({symbol("p"), symbol("g")} | {state_symbol(n) for n, e in states.items() if e.vector}) \
        if vector else frozenset()
    changes = []
    for (new_name, expr), old in zip(outputs, [symbol("p")] + [state_symbol(n) for n in optimizer.state]):
        change = expr - old
        if old in change.free_symbols:
            changes.append((new_name, expr))                     # depends on itself: store
        else:
            changes.append((new_name.replace("new_", "delta_", 1), change))  # additive: add atomically
    derived = optimizer.param_from_state(Namespace(owner, "param_from_state", "state", states),
                                         Namespace(owner, "param_from_state", "hyper-parameter", hypers))
    derived_program = ()
    if derived is not None:
        derived = lift(derived)
        if derived.vector != vector:
            raise ModelError(f"optimizer {optimizer.name}: param_from_state returns a "
                             f"{'vector' if derived.vector else 'scalar'} for a "
                             f"{'vector' if vector else 'scalar'} param")
        derived_program = _program([("derived_p", derived.sym)], lanes, "tv")
    return UpdateIR(vector, _program(outputs, lanes, "tu"), _program(changes, lanes, "td"), lanes, derived_program)


# Generic positive values of the hyper-parameters at which a derived param's initial value is checked
# (any that are not special points of the update: not 0, not 1).
_GENERIC_VALUE = 0.37


def _derived_initial_value(update, optimizer_states):
    """The value the derivation gives at the initial state, or None when it has none."""
    if not update.derived:
        return None
    values = {}
    for d in update.derived:
        expr = d.expr.subs(values)
        values[sp.Symbol(d.name, real=True)] = expr
    expr = values[sp.Symbol("derived_p", real=True)]
    expr = expr.subs({state_symbol(name): initial for name, initial, _ in optimizer_states})
    expr = expr.subs({s: _GENERIC_VALUE for s in expr.free_symbols})
    try:
        value = complex(expr.evalf())
    except (TypeError, ValueError):
        return None
    # a division by zero there gives nan, a complex value: not a usable start
    return value.real if value.imag == 0 and math.isfinite(value.real) else None


def _derivable(update, optimizer_states, param):
    """Whether param starts equal to the optimizer's derivation from the initial state."""
    initial = _derived_initial_value(update, optimizer_states)
    return initial is not None and isinstance(param.init, Constant) and param.init.value == initial


def _additive(update):
    """Whether the param's change is linear in g and reads nothing of p (its delta_p, temps inlined)."""
    values = {}
    for d in update.deltas:
        values[sp.Symbol(d.name, real=True)] = d.expr.subs(values)
    change = values.get(sp.Symbol("delta_p", real=True))
    if change is None or symbol("p") in change.free_symbols:
        return False
    g, scale = symbol("g"), sp.Symbol("additivity_scale", real=True)
    return sp.expand(change.subs(g, scale * g) - scale * change) == 0


def lower_optimizer(optimizer, model_ir, params):
    """OptimizerIR for a model: params are the model's Param declarations (for their l1)."""
    has_l1 = any(getattr(p, "l1", 0.0) for p in params.values())
    if has_l1 and not optimizer.supports_l1:
        raise ModelError(f"optimizer {optimizer.name} does not apply L1; use ftrl or sgd (proximal) for l1")
    has_vector = any(p.vector for p in model_ir.params)
    states = tuple((n, float(v), n in optimizer.row_state) for n, v in optimizer.state.items())
    scalar = _trace_update(optimizer, False, has_l1)
    vector = _trace_update(optimizer, True, has_l1) if has_vector else None
    derivable = tuple(p.name for p in model_ir.params
                      if _derivable(vector if p.vector else scalar, states, params[p.name]))
    return OptimizerIR(name=optimizer.name, states=states, hypers=optimizer.hyper_names(),
                       gradient_l2=optimizer.gradient_l2, has_l1=has_l1, scalar=scalar, vector=vector,
                       derivable=derivable,
                       additive=not states and all(_additive(u) for u in (scalar, vector) if u is not None))



