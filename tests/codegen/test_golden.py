"""Golden kernels: the generated Triton source of every zoo model, optimizer and kernel variant,
snapshotted under tests/codegen/golden/. A change to the generator shows its diff here; a refactor
shows none. After an intended change, rewrite the snapshots and review their diff in git:

    python -m tests.codegen.test_golden --update
"""

import difflib
import sys
from pathlib import Path

import pytest

from alac.codegen.bag_kernels import generate_bag_kernels
from alac.codegen.kernels import generate_kernels
from alac.ir.pipeline import lower
from alac.models.deep import FieldTables
from alac.plan import Plan
from tests.zoo_models import ZOO

GOLDEN = Path(__file__).with_name("golden")

# Every model and optimizer runs these; the hot segment's size is a launch argument, so any H > 0
# generates the same source.
VARIANTS = {
    "sync": Plan(),
    "sync_hot": Plan(hot_size=64, replicas=2),
    "sync_stage": Plan(kernels="stage"),
    "sync_deterministic": Plan(deterministic=True),
    "async": Plan(semantics="async", chunk_size=32),
    "async_hot": Plan(semantics="async", chunk_size=32, hot_size=64),
}
# Variants that change one mechanism: run on LR (scalar param) and FM (vector param), SGD and FTRL.
MECHANISMS = {
    "sync_per_batch": Plan(grid_barrier=False),
    "sync_summed_edges": Plan(sum_equal_edges=True),
    "async_hot_stored": Plan(semantics="async", chunk_size=32, hot_size=64, derive_params=False),
    "async_queue": Plan(semantics="async", chunk_size=32, chunk_queue=True),
}
OPTIMIZERS = ("momentum", "adagrad", "ftrl", "adam")


def cases():
    """(model, optimizer, variant name, plan)."""
    for model in ZOO:
        for variant, plan in VARIANTS.items():
            yield model, "sgd", variant, plan
    for model in ("lr", "fm"):
        for optimizer in OPTIMIZERS:
            for variant, plan in VARIANTS.items():
                yield model, optimizer, variant, plan
        for optimizer in ("sgd", "ftrl"):
            for variant, plan in MECHANISMS.items():
                yield model, optimizer, variant, plan


def snapshot_path(model, optimizer, variant):
    return GOLDEN / f"{model}-{optimizer}-{variant}.py"


def generate(model, optimizer, plan):
    return generate_kernels(lower(ZOO[model](), optimizer), plan).source


CASES = list(cases())
# alac.nn's kernels (alac.codegen.bag_kernels) of the deep models' tables (k = 6: masked lanes)
BAG_OPTIMIZERS = ("sgd", "adagrad", "ftrl", "adam")


def bag_snapshot_path(optimizer):
    return GOLDEN / f"bags-fieldtables-{optimizer}.py"


def generate_bags(optimizer):
    return generate_bag_kernels(lower(FieldTables(6, squares=True), optimizer, aggregate_only=True)).source


@pytest.mark.parametrize("model,optimizer,variant,plan", CASES, ids=[f"{m}-{o}-{v}" for m, o, v, _ in CASES])
def test_generated_source_matches_its_snapshot(model, optimizer, variant, plan):
    path = snapshot_path(model, optimizer, variant)
    assert path.exists(), f"no snapshot {path.name}: run python -m tests.codegen.test_golden --update"
    expected, actual = path.read_text(), generate(model, optimizer, plan)
    if actual != expected:
        diff = difflib.unified_diff(expected.splitlines(), actual.splitlines(), "snapshot", "generated", lineterm="")
        pytest.fail(f"{path.name} differs from the generated source (python -m tests.codegen.test_golden --update "
                    "rewrites it):\n" + "\n".join(list(diff)[:80]))


@pytest.mark.parametrize("optimizer", BAG_OPTIMIZERS)
def test_generated_bag_kernels_match_their_snapshot(optimizer):
    path = bag_snapshot_path(optimizer)
    assert path.exists(), f"no snapshot {path.name}: run python -m tests.codegen.test_golden --update"
    expected, actual = path.read_text(), generate_bags(optimizer)
    if actual != expected:
        diff = difflib.unified_diff(expected.splitlines(), actual.splitlines(), "snapshot", "generated", lineterm="")
        pytest.fail(f"{path.name} differs from the generated source (python -m tests.codegen.test_golden --update "
                    "rewrites it):\n" + "\n".join(list(diff)[:80]))


def test_every_snapshot_belongs_to_a_case():
    expected = {snapshot_path(m, o, v).name for m, o, v, _ in CASES} | {bag_snapshot_path(o).name
                                                                        for o in BAG_OPTIMIZERS}
    stale = sorted(p.name for p in GOLDEN.glob("*.py") if p.name not in expected)
    assert not stale, f"snapshots of no case (remove them): {stale}"


@pytest.mark.parametrize("optimizer", ["sgd", "ftrl"])
def test_variants_generate_different_kernels(optimizer):
    """Plans whose variants differ for the optimizer generate different source; plans that differ only
    in a mechanism the optimizer cannot use (summed edges for FTRL, derived params for SGD) do not."""
    ir = lower(ZOO["fm"](), optimizer)
    by_variant = {}
    for plan in {**VARIANTS, **MECHANISMS}.values():
        by_variant.setdefault(plan.variant.for_optimizer(ir.optimizer), set()).add(generate_kernels(ir, plan).source)
    assert all(len(sources) == 1 for sources in by_variant.values())
    assert len(set.union(*by_variant.values())) == len(by_variant) >= 8


def update():
    GOLDEN.mkdir(exist_ok=True)
    for path in GOLDEN.glob("*.py"):
        path.unlink()
    for model, optimizer, variant, plan in CASES:
        snapshot_path(model, optimizer, variant).write_text(generate(model, optimizer, plan))
    for optimizer in BAG_OPTIMIZERS:
        bag_snapshot_path(optimizer).write_text(generate_bags(optimizer))
    print(f"wrote {len(CASES) + len(BAG_OPTIMIZERS)} snapshots to {GOLDEN}")


if __name__ == "__main__":
    if sys.argv[1:] != ["--update"]:
        sys.exit("usage: python -m tests.codegen.test_golden --update")
    update()
