"""The lowering pipeline: trace a DSL model, then run every pass in order."""

import dataclasses
import weakref

from alac.ir.derive import check_explicit_apply, derive_gradients, eliminate_common_subexpressions
from alac.ir.optimizer_ir import lower_optimizer
from alac.ir.trace import trace
from alac.optimizers import get_optimizer

# The lowering pipeline, in order. Every pass is a pure function ModelIR -> ModelIR.
PASSES = (
    ("derive_gradients", derive_gradients),
    ("check_explicit_apply", check_explicit_apply),
    ("eliminate_common_subexpressions", eliminate_common_subexpressions),
)


# ModelIRs lowered, per model object: a run builds several executors of one model (a row store's host
# table and GPU cache, the planner's probes) and lowering is a pure function of the model's structure
_LOWERED = weakref.WeakKeyDictionary()


def lower(model, optimizer=None, aggregate_only=False):
    """ModelIR of a DSL model: trace, every pass of PASSES, then the optimizer's update rule
    (plain SGD when none is given) traced into the IR. aggregate_only: for alac.nn (trace). Lowered
    once per model object, optimizer and form (a model's structure is fixed when it is made)."""
    optimizer = get_optimizer(optimizer or "sgd")
    key = (type(optimizer), optimizer.describe(), aggregate_only)
    known = _LOWERED.setdefault(model, {})
    if key not in known:
        known[key] = _lowered(model, optimizer, aggregate_only)
    return known[key]


def _lowered(model, optimizer, aggregate_only):
    ir = trace(model, aggregate_only)
    for _, run_pass in PASSES:
        ir = run_pass(ir)
    params, _ = model.declarations()
    return dataclasses.replace(ir, optimizer=lower_optimizer(optimizer, ir, params))
