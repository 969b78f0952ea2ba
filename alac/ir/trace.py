"""Tracing: run a DSL model's functions on symbolic arguments and collect a ModelIR."""

from __future__ import annotations

import re

import sympy as sp

from alac.dsl import LABEL_KINDS, PREDICTION_KINDS, Expr, Model, lift
from alac.errors import ModelError
from alac.ir.functions import FactorSum
from alac.ir.model_ir import AccumIR, ModelIR, ParamIR
from alac.ir.names import X, Y, symbol

_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]*\Z")
_RESERVED = re.compile(r"(x|y|k|K|BLOCK_K|C|loss|prediction|lane.*|t[spe]?\d+|d_.*|dg_.*|grad_.*|l2_.*)\Z")


class Namespace:
    """Attribute access to traced symbols, with a clear error for a name that does not exist.
    owner names what is traced ("model lr", "optimizer ftrl")."""

    def __init__(self, owner, function, kind, entries):
        object.__setattr__(self, "_where", (owner, function, kind))
        object.__setattr__(self, "_entries", entries)

    def __getattr__(self, name):
        entries = object.__getattribute__(self, "_entries")
        if name in entries:
            return entries[name]
        owner, function, kind = object.__getattribute__(self, "_where")
        raise ModelError(f"{owner}: {function} uses unknown {kind} '{name}'; "
                         f"it has: {', '.join(entries) or 'none'}")

    def __setattr__(self, name, value):
        owner, function, kind = object.__getattribute__(self, "_where")
        raise ModelError(f"{owner}: {function} assigns to {kind} '{name}': expressions are read-only")


def _check_name(model, kind, name):
    if not _NAME.match(name) or _RESERVED.match(name):
        raise ModelError(f"model {model}: {kind} name '{name}' is not allowed (letters, digits and _, "
                         "starting with a letter; x, y, k, loss, prediction, t<digits> and the prefixes "
                         "d_, dg_, grad_, l2_, lane are reserved)")


def _call(model_name, function_name, function, *args):
    try:
        return function(*args)
    except ModelError as error:
        message = str(error)
        if message.startswith(f"model {model_name}:"):
            raise
        raise ModelError(f"model {model_name}: {function_name}: {message}") from None


def _scalar(model_name, function_name, value):
    if not isinstance(value, Expr):
        value = _call(model_name, function_name, lift, value)
    if value.vector:
        raise ModelError(f"model {model_name}: {function_name} must return a scalar per sample, but "
                         f"{value.sym} is a vector over the factor axis: sum it with ops.sum")
    return value.sym


def trace(model, aggregate_only=False):
    """ModelIR of a DSL model (the derived fields are filled by later passes). aggregate_only: the
    model's accums are all that is used (alac.nn: a deep part's loss gives their gradients), so a model
    without loss or predict stands for the sum of its accums in both (dLoss/dAccum of ones, which the
    caller replaces)."""
    if not isinstance(model, Model):
        raise ModelError(f"{model!r} is not an alac.dsl.Model")
    name = model.model_name()
    if model.labels not in LABEL_KINDS:
        raise ModelError(f"model {name}: labels must be one of {LABEL_KINDS}, got {model.labels!r}")
    if model.prediction not in PREDICTION_KINDS:
        raise ModelError(f"model {name}: prediction must be one of {PREDICTION_KINDS}, got {model.prediction!r}")
    params, globals_ = model.declarations()
    if not params:
        raise ModelError(f"model {name} declares no Param")
    for kind, names in (("param", params), ("global", globals_)):
        for key in names:
            _check_name(name, kind, key)
    sizes = {p.size for p in params.values() if p.size > 1}
    if len(sizes) > 1:
        raise ModelError(f"model {name}: vector params must share one factor size, got sizes {sorted(sizes)}")
    factor_size = sizes.pop() if sizes else 0

    param_exprs = {k: Expr(symbol(k), p.size > 1) for k, p in params.items()}
    global_exprs = {k: Expr(symbol(k)) for k in globals_}
    x, y = Expr(X), Expr(Y)

    contributions = _call(name, "aggregate", model.aggregate, x,
                          Namespace(f"model {name}", "aggregate", "param", param_exprs))
    if not isinstance(contributions, dict) or not contributions:
        raise ModelError(f"model {name}: aggregate must return a non-empty dict accum name -> expression")
    accums = []
    for key, value in contributions.items():
        _check_name(name, "accum", key)
        if key in params or key in globals_:
            raise ModelError(f"model {name}: accum '{key}' has the name of a param or global")
        if not isinstance(value, Expr):
            raise ModelError(f"model {name}: aggregate: accum '{key}' is {value!r}, which uses no param")
        if not value.sym.free_symbols & {symbol(k) for k in params}:
            raise ModelError(f"model {name}: aggregate: accum '{key}' = {value.sym} uses no param")
        if value.vector and value.sym.has(FactorSum):
            raise ModelError(f"model {name}: aggregate: vector accum '{key}' = {value.sym} must be "
                             "elementwise over the factor axis (no ops.sum inside)")
        accums.append(AccumIR(key, value.vector, value.sym))
    accum_exprs = {a.name: Expr(symbol(a.name), a.vector) for a in accums}

    def namespaces(function):
        return (Namespace(f"model {name}", function, "accum", accum_exprs),
                Namespace(f"model {name}", function, "global", global_exprs))

    def accum_sum():
        return sp.Add(*(FactorSum(symbol(a.name)) if a.vector else symbol(a.name) for a in accums))

    if aggregate_only and type(model).loss is Model.loss:
        loss = accum_sum()
    else:
        loss = _scalar(name, "loss", _call(name, "loss", model.loss, *namespaces("loss"), y))
    if not loss.free_symbols & {symbol(a.name) for a in accums}:
        raise ModelError(f"model {name}: the loss {loss} depends on no accum, so no param gets a gradient")
    if aggregate_only and type(model).predict is Model.predict:
        predict = accum_sum()
    else:
        predict = _scalar(name, "predict", _call(name, "predict", model.predict, *namespaces("predict")))

    explicit = ()
    if model.apply is not None:
        accum_ns, global_ns = namespaces("apply")
        result = _call(name, "apply", model.apply, x, Namespace(f"model {name}", "apply", "param", param_exprs),
                       accum_ns, global_ns, y)
        if not isinstance(result, dict):
            raise ModelError(f"model {name}: apply must return a dict param name -> gradient expression")
        unknown = set(result) - set(params)
        if unknown:
            raise ModelError(f"model {name}: apply returns gradients of unknown params {sorted(unknown)}")
        checked = []
        for key, value in result.items():
            value = _call(name, "apply", lift, value)
            if value.vector != (params[key].size > 1):
                shape = "a vector" if value.vector else "a scalar"
                raise ModelError(f"model {name}: apply: the gradient of param '{key}' is {shape} "
                                 f"({value.sym}), but the param has size {params[key].size}")
            checked.append((key, value.sym))
        explicit = tuple(checked)

    return ModelIR(name=name, labels=model.labels, prediction_kind=model.prediction,
                   params=tuple(ParamIR(k, p.size) for k, p in params.items()),
                   globals=tuple(globals_), accums=tuple(accums), loss=loss, predict=predict,
                   factor_size=factor_size, explicit_apply=explicit)

