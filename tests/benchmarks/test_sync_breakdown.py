"""benchmarks/sync_breakdown.py: its kernel patches apply to the sync epoch kernels the generator
writes now, keep the grid barrier's arrival count in step with its calls (a patch that does not
would hang the GPU), and change what they name."""

import pytest
import torch

from alac.data.synthetic import criteo_like
from alac.models import zoo_model
from alac.plan import Plan
from alac.train import Trainer
from benchmarks.sync_breakdown import BARRIER, PATCHES, epoch_launch, patched

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
BACKEND = "triton" if torch.cuda.is_available() else "interpret"


def _trainer(edge_updates):
    # one batch of 64 rows: an epoch is one batch
    plan = Plan(batch_size=64, chunk_size=16, edge_updates=edge_updates)
    trainer = Trainer(zoo_model("lr"), lr=0.5, plan=plan, backend=BACKEND, device=DEVICE)
    layout, labels = trainer.prepare(criteo_like(64, seed=3, device=DEVICE))
    trainer.executor.train_epoch(layout, labels, 0, 0.5)
    return trainer, layout


@pytest.mark.parametrize("updates", list(PATCHES))
def test_every_patch_applies_and_keeps_the_barrier_count_in_step(updates):
    trainer, _ = _trainer(updates != "touched flags")
    source = trainer.executor.backend.generated.source
    for name, patches in PATCHES[updates].items():
        patched_source = patched(source, patches)
        assert (patched_source != source) == bool(patches), name
        # each barrier left waits for P arrivals more than the last: one count per call (none left: no wait)
        calls = patched_source.count(BARRIER)
        assert calls == 0 or patched_source.count("barriers += 1") == calls, name
        compile(patched_source, name, "exec")


def test_a_patch_that_matches_nothing_is_an_error():
    trainer, _ = _trainer(True)
    with pytest.raises(ValueError, match="does not apply"):
        patched(trainer.executor.backend.generated.source, [("no such line", "")])


def _change_of_w(trainer, layout, patches):
    """w after one launch of the patched epoch kernel less w before; the state is put back after."""
    state = trainer.executor.state
    saved = state.clone()
    run, _ = epoch_launch(trainer, layout, patches)
    run()
    change = state.params["w"] - saved.params["w"]
    for mine, theirs in ((state.params, saved.params), (state.globals, saved.globals)):
        for name, value in mine.items():
            value.copy_(theirs[name])
    return change


def test_one_barrier_variants_change_w_as_their_names_say():
    """One program (the interpreter) needs no barrier between a batch's gradients and its update: the
    first removed, w changes exactly as generated; each edge added twice doubles the change."""
    if BACKEND == "triton":
        pytest.skip("with several programs on a GPU the patched kernels race by design")
    trainer, layout = _trainer(True)
    variants = PATCHES["edge updates, each edge added"]
    generated = _change_of_w(trainer, layout, variants["as generated"])
    one_barrier = _change_of_w(trainer, layout, variants["one barrier per batch (the first removed)"])
    twice = _change_of_w(trainer, layout, variants["one barrier per batch, each edge added twice"])
    assert generated.abs().sum() > 0
    assert torch.equal(one_barrier, generated)
    torch.testing.assert_close(twice, 2 * generated, rtol=1e-5, atol=1e-7)
