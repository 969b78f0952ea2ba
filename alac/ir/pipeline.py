"""The lowering pipeline: trace a DSL model, then run every pass in order."""

import dataclasses

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


def lower(model, optimizer=None, aggregate_only=False):
    """ModelIR of a DSL model: trace, every pass of PASSES, then the optimizer's update rule
    (plain SGD when none is given) traced into the IR. aggregate_only: for alac.nn (trace)."""
    ir = trace(model, aggregate_only)
    for _, run_pass in PASSES:
        ir = run_pass(ir)
    params, _ = model.declarations()
    optimizer = get_optimizer(optimizer or "sgd")
    return dataclasses.replace(ir, optimizer=lower_optimizer(optimizer, ir, params))
