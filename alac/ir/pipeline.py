"""The lowering pipeline: trace a DSL model, then run every pass in order."""

from alac.ir.derive import check_explicit_apply, derive_gradients, eliminate_common_subexpressions
from alac.ir.trace import trace

# The lowering pipeline, in order. Every pass is a pure function ModelIR -> ModelIR.
PASSES = (
    ("derive_gradients", derive_gradients),
    ("check_explicit_apply", check_explicit_apply),
    ("eliminate_common_subexpressions", eliminate_common_subexpressions),
)


def lower(model):
    """ModelIR of a DSL model: trace, then every pass of PASSES."""
    ir = trace(model)
    for _, run_pass in PASSES:
        ir = run_pass(ir)
    return ir
