"""The lowering pipeline runs once per model object, optimizer and form in a run, however many
executors a run builds (a trainer's store, a HybridHash cache's host table and GPU cache)."""

import torch

import alac.ir.pipeline as pipeline
from alac.data.synthetic import criteo_like
from alac.plan import Plan
from alac.train.trainer import Trainer
from tests.zoo_models import ZOO


def test_a_run_through_a_cache_lowers_its_model_once(monkeypatch):
    traced = []
    real = pipeline.trace
    monkeypatch.setattr(pipeline, "trace", lambda model, *a: traced.append(model) or real(model, *a))
    data = criteo_like(1000, n_fields=5, seed=4, device="cpu")
    model = ZOO["fm"]()
    trainer = Trainer(model, lr=0.3, epochs=1, plan=Plan(chunk_size=8, batch_size=32, memory_budget=120_000),
                      backend="reference", device="cpu", seed=1, optimizer="adagrad")
    trainer.fit(data)
    assert trainer.placement.mode == "hybrid_hash"
    assert traced == [model]
    # the same IR object for the same model and optimizer; another optimizer or model is lowered anew
    assert pipeline.lower(model, "adagrad") is trainer.executor.ir
    assert pipeline.lower(model, "sgd") is not trainer.executor.ir
    other = ZOO["fm"]()
    assert pipeline.lower(other, "adagrad") is not trainer.executor.ir
    assert pipeline.lower(other, "adagrad").hash == trainer.executor.ir.hash
    assert len(traced) == 3
    assert torch.isfinite(trainer.predict(data)).all()
