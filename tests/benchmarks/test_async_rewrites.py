"""benchmarks/async_rewrites.py: every rewrite applies to the async kernel the generator writes now,
and those the interpreter can run (no inline PTX) train exactly like the kernel as generated where
staleness cannot differ (one program, hot sums flushed after every chunk)."""

import pytest
import torch

from alac.data.synthetic import criteo_like
from alac.models import zoo_model
from alac.plan import Plan
from alac.train import Trainer
from benchmarks.async_rewrites import HOT_PAD, REWRITES, SHARED_OFFSET, hot_tile, prefetch, rewritten, rows_once

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
BACKEND = "triton" if torch.cuda.is_available() else "interpret"
PLAN = Plan(semantics="async", batch_size=64, chunk_size=16, hot_size=64, programs=1, flush_every=1)


def _generated_source():
    trainer = Trainer(zoo_model("lr"), lr=0.5, plan=PLAN, backend=BACKEND, device=DEVICE)
    return trainer.executor.backend.generated.source


@pytest.mark.parametrize("name", [name for name, (patch, _) in REWRITES.items() if patch is not None])
def test_every_rewrite_applies_to_the_generated_kernel(name):
    source = _generated_source()
    patched = REWRITES[name][0](source)
    assert patched != source
    compile(patched, name, "exec")


def test_the_shared_memory_rewrites_stay_in_their_region():
    source = REWRITES["hot segment in shared memory, f32 additions"][0](_generated_source())
    assert f"[a+{SHARED_OFFSET}]" in source and f"[a+{SHARED_OFFSET + 4 * HOT_PAD}]" in source


def _losses(patch, monkeypatch):
    import alac.runtime.triton_backend as backend

    # the scratch rows of rows_once lie past each program's hot sums
    monkeypatch.setattr(backend, "HOT_ROW_ALIGNMENT", HOT_PAD)
    data = criteo_like(1024, seed=5, device=DEVICE)
    with rewritten(patch, {}):
        trainer = Trainer(zoo_model("lr"), lr=0.5, plan=PLAN, backend=BACKEND, device=DEVICE)
        layout, labels = trainer.prepare(data)
        trainer.executor.initialize(layout)
        losses = [trainer.executor.train_epoch(layout, labels, epoch, 0.5) for epoch in range(2)]
    return losses, trainer.executor.state.params["w"].clone()


@pytest.mark.parametrize("patch", [prefetch, rows_once, hot_tile])
def test_a_rewrite_the_interpreter_runs_trains_like_the_generated_kernel(patch, monkeypatch):
    losses, w = _losses(None, monkeypatch)
    patched_losses, patched_w = _losses(patch, monkeypatch)
    assert patched_losses == pytest.approx(losses, rel=1e-5)
    torch.testing.assert_close(patched_w, w, rtol=1e-5, atol=1e-7)
