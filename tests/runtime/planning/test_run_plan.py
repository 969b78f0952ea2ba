"""The run's one planning step: the plan's hot segment and replicas, the ranks' agreement, and the rows'
placement with their reasons, against the cost model's arithmetic done by hand."""

import dataclasses

import numpy as np
import pytest

import alac.runtime.planning.planner as planner
from alac.data.arrays import from_csr_arrays
from alac.ir.pipeline import lower
from alac.models import zoo_model
from alac.plan import Plan
from alac.runtime.movement.layout import LayoutOptions, build_layout
from alac.runtime.planning.run_plan import STREAMED_WHY, plan_run


def _data():
    # feature 0 in every row, feature 1 in every other row, features 2..201 once each: 200 rows
    rows = [[0] + ([1] if r % 2 == 0 else []) + [2 + r] for r in range(200)]
    indptr = np.concatenate([[0], np.cumsum([len(r) for r in rows])])
    return from_csr_arrays(indptr, np.concatenate(rows), None, np.arange(200) % 2, 202)


@pytest.fixture
def h100_costs(monkeypatch):
    costs = planner.AccessCosts("gpu", 1.0, 1.0, 2700.0)     # th = 2 occurrences per flush period
    monkeypatch.setattr(planner, "measure_access_costs", lambda device: costs)
    monkeypatch.setattr(planner, "l2_cache_bytes", lambda device: 50 << 20)
    return costs


def test_the_hot_segment_and_replicas_are_the_cost_models(h100_costs):
    data, ir = _data(), lower(zoo_model("lr"))
    plan = Plan(chunk_size=4, batch_size=16, edge_updates=False)     # sync without resident chunks
    layout = build_layout(data, LayoutOptions(chunk_size=4), "cpu")
    run = plan_run(ir, plan, data, layout, "cuda")
    # per batch of 16 rows: feature 0 occurs 16 times, feature 1 8, the others at most 1 (< th = 2)
    assert run.plan.hot_size == 2
    # feature 0 is in each of a batch's 4 chunks; the dense pass over R x H = 8 stays below 16 x 2.5 edges
    assert run.plan.replicas == 4
    assert run.costs is h100_costs and run.placement.mode == "device"
    assert [decision for decision, _, _ in run.reasons] == ["chunk_size", "hot_size", "replicas"]
    assert any(line.startswith("placement = device: no GPU budget") for line in run.lines())
    # the same from the data set as from its layout (the CLI's counts before a layout exists)
    assert plan_run(ir, plan, data, None, "cuda").plan == run.plan
    async_run = plan_run(ir, dataclasses.replace(plan, semantics="async", flush_every=1), data, layout, "cuda")
    # 4 rows a flush: feature 1 occurs 2 = th times; async plans have no replicas
    assert async_run.plan.hot_size == 2 and async_run.plan.replicas == 1


def test_the_plans_hot_segment_is_kept_where_asked_or_without_the_generated_kernels(h100_costs):
    data, ir = _data(), lower(zoo_model("lr"))
    plan = Plan(chunk_size=4, batch_size=16, edge_updates=False, hot_size=7)
    layout = build_layout(data, LayoutOptions(chunk_size=4), "cpu")
    assert plan_run(ir, plan, data, layout, "cuda", choose_hot_segment=False).plan == plan
    kept = plan_run(ir, plan, data, layout, "cpu", backend="reference")
    assert kept.plan == plan and "backend reference" in kept.plan_lines()[1]


def test_the_ranks_agreement_comes_before_the_placement_and_is_said(h100_costs):
    data, ir = _data(), lower(zoo_model("lr"))
    plan = Plan(chunk_size=4, batch_size=16, edge_updates=False)
    layout = build_layout(data, LayoutOptions(chunk_size=4), "cpu")
    run = plan_run(ir, plan, data, layout, "cuda", agree=lambda p: dataclasses.replace(p, hot_size=1))
    assert run.plan.hot_size == 1
    assert run.reasons[-1] == ("hot_size", 1, "the ranks' smallest (every rank trains one plan)")


def test_rows_over_the_budget_go_behind_a_cache_and_a_streamed_run_keeps_them_on_the_device():
    data, ir = _data(), lower(zoo_model("fm"))
    layout = build_layout(data, LayoutOptions(chunk_size=4), "cpu")
    small = Plan(chunk_size=4, batch_size=4, memory_budget=1 << 20, host_memory_budget=1 << 30)
    # a budget that leaves the rows less than their 202 x row bytes once the layout is counted
    run = plan_run(ir, small, data, layout, "cpu", "reference", budget=6000)
    assert run.placement.mode == "hybrid_hash" and run.placement.budget_bytes < 202 * run.placement.row_bytes
    assert plan_run(ir, small, data, layout, "cpu", "reference").placement.mode == "device"
    streamed = plan_run(ir, small, data, None, "cpu", "reference")
    assert streamed.placement.mode == "device" and streamed.placement.reasons[0][2] == STREAMED_WHY
