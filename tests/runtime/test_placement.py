"""Params in host memory: the kernels read and update rows in pinned host memory through mapped
pointers, and train exactly as with the rows on the device (sync semantics)."""

import pytest
import torch

from alac import checkpoint
from alac.errors import OptionError
from alac.plan import Plan
from alac.runtime.executor import Executor
from alac.train import Trainer
from tests.codegen.test_kernels import KERNEL_BACKEND, awkward_dataset, laid_out
from tests.zoo_models import ZOO

pytestmark = pytest.mark.skipif(KERNEL_BACKEND is None, reason="needs a GPU or TRITON_INTERPRET=1")


def trained(model, plan, optimizer="sgd", epochs=2):
    kind = "real" if model == "fm_squared" else "binary"
    device, layout, labels = laid_out(awkward_dataset(2, n_rows=60, labels=kind), kind)
    executor = Executor(ZOO[model](), plan, backend=KERNEL_BACKEND, device=device, seed=4, optimizer=optimizer)
    losses = [executor.train_epoch(layout, labels, epoch, 0.3) for epoch in range(epochs)]
    return executor, losses, executor.predict_slots(layout)


@pytest.mark.parametrize("model,host,optimizer", [("lr", ("w",), "sgd"), ("fm", ("w", "v"), "adagrad"),
                                                  ("fm_squared", ("v",), "sgd")])
def test_host_rows_train_exactly_as_device_rows(model, host, optimizer):
    """Deterministic sync plans sum in a fixed order: host and device placement agree bit for bit."""
    plan = Plan(chunk_size=8, batch_size=16, deterministic=True)
    on_device, device_losses, device_prediction = trained(model, plan, optimizer)
    placed = Plan(chunk_size=8, batch_size=16, deterministic=True, placement=tuple((n, "host") for n in host))
    on_host, host_losses, host_prediction = trained(model, placed, optimizer)
    assert host_losses == device_losses and device_losses[1] != device_losses[0]
    assert torch.equal(host_prediction, device_prediction)
    for name in on_device.state.params:
        assert torch.equal(on_host.state.params[name].cpu(), on_device.state.params[name].cpu()), name
    for name in on_device.state.states:
        assert torch.equal(on_host.state.states[name].cpu(), on_device.state.states[name].cpu()), name
    if KERNEL_BACKEND == "triton":
        for name in host:
            value = on_host.state.params[name]
            assert value.device.type == "cpu" and value.is_pinned(), name
        placed = {a.placement for a in on_host.backend.generated.manifest if a.role == "param" and a.of in host}
        assert placed == {"host"}


def test_host_rows_in_the_default_sync_plan_train_as_device_rows():
    """With atomics in the gradient sums the order of additions varies on a GPU: equal to rounding."""
    _, device_losses, device_prediction = trained("fm", Plan(chunk_size=8, batch_size=16, edge_updates=False))
    _, host_losses, host_prediction = trained("fm", Plan(chunk_size=8, batch_size=16, placement=(("w", "host"),)))
    assert host_losses == pytest.approx(device_losses, rel=1e-5)
    torch.testing.assert_close(host_prediction, device_prediction, rtol=1e-5, atol=1e-6)


def test_host_params_are_named_in_the_kernels_and_manifest():
    executor, _, _ = trained("lr", Plan(chunk_size=8, batch_size=16, placement=(("w", "host"),)), epochs=1)
    generated = executor.backend.generated
    assert "_host_w_" in generated.train[0].name and "host=w" in generated.source.splitlines()[1]
    placements = {(a.role, a.of): a.placement for a in generated.manifest}
    assert placements[("param", "w")] == "host" and placements[("global", "b")] == "device"
    assert placements[("grad", "b")] == "device"


@pytest.mark.parametrize("plan,message", [
    (dict(semantics="async", placement=(("w", "host"),)), "sync plans only"),
    (dict(placement=(("w", "disk"),)), "'device' or 'host'"),
    (dict(placement=("w",)), "'device' or 'host'"),
])
def test_unsupported_placements_are_refused(plan, message):
    with pytest.raises(OptionError, match=message):
        Plan(chunk_size=8, batch_size=16, **plan)


def test_placements_of_unknown_params_and_with_exact_l2_are_refused():
    with pytest.raises(OptionError, match="not params of model 'lr'"):
        Executor(ZOO["lr"](), Plan(placement=(("v", "host"),)), backend="reference", device="cpu")
    with pytest.raises(OptionError, match="exact L2"):
        Executor(ZOO["lr"](), Plan(placement=(("w", "host"),)), backend="reference", device="cpu", exact_l2=True)


def test_a_checkpoint_keeps_the_placement(tmp_path):
    dataset = awkward_dataset(3, n_rows=40)
    plan = Plan(chunk_size=8, batch_size=16, placement=(("w", "host"),))
    trainer = Trainer(ZOO["lr"](), lr=0.3, plan=plan, backend=KERNEL_BACKEND, seed=1)
    trainer.fit(dataset, epochs=2)
    checkpoint.save(trainer, tmp_path / "model.alac", {"model": "lr", "arguments": {"l2": 0.0}})
    loaded = checkpoint.load(tmp_path / "model.alac", ZOO["lr"](), backend=KERNEL_BACKEND)
    assert loaded.plan.host_params == ("w",)
    assert torch.equal(loaded.predict(dataset), trainer.predict(dataset))
    if KERNEL_BACKEND == "triton":
        assert loaded.executor.state.params["w"].is_pinned()
