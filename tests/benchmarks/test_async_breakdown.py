"""benchmarks/async_breakdown.py: its cuts apply to the kernels the generator writes now (a cut
that no longer matches would silently time the whole kernel), and remove what they name."""

import pytest
import torch

from alac.data.synthetic import criteo_like
from alac.models import zoo_model
from alac.plan import Plan
from alac.train import Trainer
from benchmarks.async_breakdown import HOT_VARIANTS, VARIANTS, bound_kernel, cut

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
BACKEND = "triton" if torch.cuda.is_available() else "interpret"
HOT_SIZE = 64


def _trainer(hot_size):
    plan = Plan(semantics="async", batch_size=64, chunk_size=16, hot_size=hot_size, programs=2)
    trainer = Trainer(zoo_model("lr"), lr=0.5, plan=plan, backend=BACKEND, device=DEVICE)
    layout, labels = trainer.prepare(criteo_like(256, seed=3, device=DEVICE))
    return trainer, layout, labels


@pytest.mark.parametrize("hot_size, variants", [(0, VARIANTS), (HOT_SIZE, HOT_VARIANTS)])
def test_every_variant_cuts_the_generated_kernel(hot_size, variants):
    trainer, _, _ = _trainer(hot_size)
    source = trainer.executor.backend.generated.source
    for name, cuts in variants.items():
        patched = cut(source, cuts)
        assert (patched != source) == bool(cuts), name
        compile(patched, name, "exec")


def test_a_cut_that_matches_nothing_is_an_error():
    trainer, _, _ = _trainer(0)
    with pytest.raises(ValueError, match="'flushes' matches nothing"):
        cut(trainer.executor.backend.generated.source, ("flushes",))


@pytest.mark.parametrize("hot_size", [0, HOT_SIZE])
def test_without_gather_and_edge_atomics_the_kernel_leaves_w_alone(hot_size):
    trainer, layout, labels = _trainer(hot_size)
    kernel, arguments, constants = bound_kernel(trainer, layout, labels, ("gather", "atomics"))
    programs = (trainer.executor.backend.async_programs,)
    w = trainer.executor.state.params["w"]
    before = w.clone()
    kernel[programs](*arguments, **constants)
    assert torch.equal(w, before)
    kernel, arguments, constants = bound_kernel(trainer, layout, labels)
    w = trainer.executor.state.params["w"]
    before = w.clone()
    kernel[programs](*arguments, **constants)
    assert not torch.equal(w, before)
