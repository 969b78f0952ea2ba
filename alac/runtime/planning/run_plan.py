"""One planning step for a run: from the model, the training data's counts, the budgets (Plan's
memory_budget and host_memory_budget) and the ranks, the complete plan (its hot segment and replicas),
where the model's rows live (the placement, and from it the row store), and the reasons `alac train`
and `alac inspect` print. The Trainer calls it once its training data is laid out."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from alac.plan import Plan
from alac.runtime.execution.state import row_bytes_of
from alac.runtime.movement.blocks import is_block_source
from alac.runtime.planning.param_planner import ParamPlacement, plan_placement
from alac.runtime.planning.planner import AccessCosts, DataCounts, PlanChoice, hot_segment_choice
from alac.runtime.rows.registry import planned_store

STREAMED_WHY = ("the training data is streamed: the GPU budget goes to its blocks (a HybridHash cache trains a "
                "resident layout)")


@dataclass(frozen=True)
class RunPlan:
    """The planner's answer for a run: the plan its kernels run, its rows' placement, and why."""

    plan: Plan
    placement: ParamPlacement
    reasons: tuple = ()             # (decision, value, why) of the plan's decisions; the placement has its own
    costs: AccessCosts | None = None

    def plan_lines(self):
        return [f"{decision} = {value}: {why}" for decision, value, why in self.reasons]

    def lines(self):
        """Every decision with its reason: the plan's, then the placement's."""
        return self.plan_lines() + self.placement.lines()

    def store(self, executor_arguments, training):
        """The row store of this plan's placement (alac.runtime.rows.registry); executor_arguments: an
        Executor's (model, plan, backend, device, seed, optimizer, schedule, exact_l2), the plan this one's;
        training: TrainingRows."""
        model, _, *rest = executor_arguments
        return planned_store(self.placement, (model, self.plan, *rest), training)


def plan_run(ir, plan, dataset, layout, device, backend="triton", choose_hot_segment=True, agree=None,
             budget=None):
    """RunPlan of the model `ir` (lowered with its optimizer) trained by `plan` on `dataset` (a data set
    or a block source): layout is its resident layout, or None where it is streamed (its rows then stay
    on the device). choose_hot_segment: the cost model's H and R (with the generated kernels on a GPU;
    else the plan's are kept). agree: plan -> the plan every rank trains (alac.runtime.ranks's
    agreed_plan), applied before the placement. budget: the GPU bytes the rows and the resident layout may
    take (None: the plan's memory_budget)."""
    planned = choose_hot_segment and backend == "triton"
    if planned:
        counts = DataCounts.of(layout if layout is not None else dataset, device)
        choice = hot_segment_choice(counts, plan, device, ir.factor_size, ir.optimizer.additive, ir.row_floats)
    else:
        why = "as the plan gives it" if not choose_hot_segment else \
            f"the hot segment is for the generated kernels on a GPU (backend {backend})"
        choice = PlanChoice(plan, [("chunk_size", plan.chunk_size, "the plan's C"), ("hot_size", plan.hot_size, why)])
    chosen = choice.plan if agree is None else agree(choice.plan)
    reasons = list(choice.reasons)
    if chosen.hot_size != choice.plan.hot_size:
        reasons.append(("hot_size", chosen.hot_size, "the ranks' smallest (every rank trains one plan)"))
    if layout is None:
        row_bytes = row_bytes_of(ir)
        n_features = dataset.meta.n_features if is_block_source(dataset) else dataset.n_features
        placement = ParamPlacement("device", row_bytes, n_features * row_bytes, None,
                                   reasons=(("placement", "device", STREAMED_WHY),))
    else:
        budgeted = chosen if budget is None else dataclasses.replace(chosen, memory_budget=budget)
        placement = plan_placement(ir, budgeted, dataset, layout, device)
    return RunPlan(chosen, placement, tuple(reasons), choice.costs)
