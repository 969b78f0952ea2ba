"""Kernel variants: one frozen value per set of mechanisms, every valid one enumerated, invalid
combinations refused, and kernel names that say the variant."""

import ast

import pytest

from alac.codegen.kernels import generate_kernels
from alac.codegen.variants import KernelVariant, enumerate_variants
from alac.errors import OptionError
from alac.ir.pipeline import lower
from alac.plan import Plan
from tests.zoo_models import ZOO

VARIANTS = enumerate_variants()


def test_every_valid_variant_once():
    # sync: 2 deterministic (fused, stage) + fused/stage x hot x grid x (no edge updates, edge updates,
    # summed), + resident (fused grid edge updates without a hot segment) and resident prefetched; async: hot x
    # derived x queue
    assert len(VARIANTS) == 2 + 2 * 2 * 2 * 3 + 2 + 8
    assert len({v.name for v in VARIANTS}) == len(VARIANTS)
    assert all(KernelVariant.of(**vars(v)) == v for v in VARIANTS)


@pytest.mark.parametrize("flags,message", [
    ({"semantics": "async", "kernels": "stage"}, "fused kernel only"),
    ({"deterministic": True, "hot": True}, "without a hot segment"),
    ({"semantics": "async", "deterministic": True}, "sync plans"),
    ({"semantics": "eventual"}, "semantics must be one of"),
])
def test_invalid_combinations_are_refused(flags, message):
    with pytest.raises(OptionError, match=message):
        KernelVariant.of(**flags)


def test_flags_that_cannot_apply_are_off():
    assert KernelVariant.of(semantics="async", grid_barrier=True, edge_updates=True).name == "async"
    assert KernelVariant.of(deterministic=True, grid_barrier=True, edge_updates=True).name == "sync_det"
    assert KernelVariant.of(sum_equal_edges=True).name == "sync"
    adam = KernelVariant.of(edge_updates=True, sum_equal_edges=True).for_optimizer(lower(ZOO["lr"](), "adam").optimizer)
    assert not adam.edge_updates and not adam.sum_equal_edges
    sgd = KernelVariant.of(semantics="async", derive_params=True).for_optimizer(lower(ZOO["lr"](), "sgd").optimizer)
    assert not sgd.derive_params


@pytest.mark.parametrize("variant", VARIANTS, ids=[v.name for v in VARIANTS])
def test_each_variant_generates_kernels_named_after_it(variant):
    plan = Plan.for_variant(variant)
    assert plan.variant == variant
    for model, optimizer in (("lr", "sgd"), ("fm", "ftrl")):
        ir = lower(ZOO[model](), optimizer)
        generated = generate_kernels(ir, plan)
        ast.parse(generated.source)
        expected = variant.for_optimizer(ir.optimizer).name
        specs = (*generated.train, generated.predict)
        assert all(f"_{expected}_" in spec.name for spec in specs)
        # grid-barrier plans run every batch in the epoch kernel, launched per epoch or per batch
        assert ([spec.role for spec in generated.train] == ["epoch"]) == variant.grid_barrier
