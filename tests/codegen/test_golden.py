"""Golden kernels: the generated Triton source of every zoo model, optimizer and kernel variant,
of alac.nn's kernels and of the SCD kernels, snapshotted under tests/codegen/golden/. A change to
a generator shows its diff here; a refactor shows none. After an intended change, rewrite the
snapshots and review their diff in git:

    python -m tests.codegen.test_golden --update
"""

import difflib
import sys
from pathlib import Path

import pytest

from alac.codegen.bag_kernels import generate_bag_kernels
from alac.codegen.kernels import generate_kernels
from alac.codegen.scd_kernels import LOSSES, PRIMAL_LOSSES, ScdVariant, generate_scd_kernels
from alac.codegen.scd_split_kernels import generate_scd_split_kernels
from alac.ir.pipeline import lower
from alac.nn.deep_models import FieldTables
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
    "sync_unprefetched": Plan(prefetch_chunks=False),
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


def generate(model, optimizer, plan):
    return generate_kernels(lower(ZOO[model](), optimizer), plan).source


CASES = list(cases())
# alac.nn's kernels (alac.codegen.bag_kernels) of the deep models' tables (k = 6: masked lanes)
BAG_OPTIMIZERS = ("sgd", "adagrad", "ftrl", "adam")
# the SCD kernels (alac.codegen.scd_kernels): every primal and dual loss, and the wild control
SCD_VARIANTS = (*(ScdVariant("primal", loss) for loss in PRIMAL_LOSSES), *(ScdVariant("dual", loss) for loss in LOSSES),
                ScdVariant("primal", wild=True))


def snapshots():
    """{snapshot file name: a function generating its source}, every kernel family's."""
    table = {f"{m}-{o}-{v}.py": (lambda m=m, o=o, p=p: generate(m, o, p)) for m, o, v, p in CASES}
    table.update({f"bags-fieldtables-{o}.py": (lambda o=o: generate_bag_kernels(
        lower(FieldTables(6, squares=True), o, aggregate_only=True)).source) for o in BAG_OPTIMIZERS})
    table.update({f"{v.name.removeprefix('alac_')}.py": (lambda v=v: generate_scd_kernels(v).source)
                  for v in SCD_VARIANTS})
    table.update({f"{v.name.removeprefix('alac_')}_split.py": (lambda v=v: generate_scd_split_kernels(v).source)
                  for v in SCD_VARIANTS if v.form == "primal" and not v.wild})
    return table


SNAPSHOTS = snapshots()


@pytest.mark.parametrize("name", sorted(SNAPSHOTS))
def test_generated_source_matches_its_snapshot(name):
    path = GOLDEN / name
    assert path.exists(), f"no snapshot {name}: run python -m tests.codegen.test_golden --update"
    expected, actual = path.read_text(), SNAPSHOTS[name]()
    if actual != expected:
        diff = difflib.unified_diff(expected.splitlines(), actual.splitlines(), "snapshot", "generated", lineterm="")
        pytest.fail(f"{name} differs from the generated source (python -m tests.codegen.test_golden --update "
                    "rewrites it):\n" + "\n".join(list(diff)[:80]))


def test_every_snapshot_belongs_to_a_case():
    stale = sorted(p.name for p in GOLDEN.glob("*.py") if p.name not in SNAPSHOTS)
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
    for name, source in SNAPSHOTS.items():
        (GOLDEN / name).write_text(source())
    print(f"wrote {len(SNAPSHOTS)} snapshots to {GOLDEN}")


if __name__ == "__main__":
    if sys.argv[1:] != ["--update"]:
        sys.exit("usage: python -m tests.codegen.test_golden --update")
    update()
