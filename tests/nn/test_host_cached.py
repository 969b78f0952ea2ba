"""alac.nn.host_cached: tables in host memory with a GPU cache of the hot rows train as the hand-written
PyTorch model and its row-wise AdaGrad do (tests/nn/test_aggregate.py's reference), whatever rows are
cached, with the staging area grown on demand; its state_dict is the whole tables, as SparseAggregate's."""

import pytest
import torch

from alac.errors import OptionError
from alac.nn import HostCachedAggregate, SparseAggregate
from tests.nn.test_aggregate import DEVICE, FM, _adagrad, _batch, _hand_written_accums, _loss

N_FEATURES = 50
# the generated kernels in Triton's interpreter without a GPU, compiled on one
KERNELS = "triton" if DEVICE == "cuda" else "interpret"


@pytest.mark.parametrize("backend", ["reference", KERNELS])
@pytest.mark.parametrize("cached", [0, 20, N_FEATURES])
def test_rows_in_host_memory_step_as_dense_gradients_and_adagrad_would(cached, backend):
    lr = 0.3
    hot = torch.randperm(N_FEATURES, generator=torch.Generator().manual_seed(1))[:cached]
    wide = HostCachedAggregate(FM(), N_FEATURES, hot, optimizer="adagrad", lr=lr, seed=3, device=DEVICE,
                               backend=backend)
    deep = torch.nn.Linear(3, 1).to(DEVICE)
    whole = wide.state_dict()
    w, v = whole["w"].to(DEVICE), whole["v"].to(DEVICE)
    reference = SparseAggregate(FM(), N_FEATURES, seed=3, device=DEVICE)
    # drawn as a SparseAggregate holding every row draws them
    torch.testing.assert_close(w, reference.w)
    torch.testing.assert_close(v, reference.v)
    accumulators = (torch.zeros(N_FEATURES, device=DEVICE), torch.zeros(N_FEATURES, device=DEVICE))
    entries = 0
    for step in range(3):
        indices, offsets, values, dense, labels = _batch(step)
        entries += indices.numel()
        accums = wide(indices, offsets, values)
        w_leaf, v_leaf = w.clone().requires_grad_(), v.clone().requires_grad_()
        expected = _hand_written_accums(w_leaf, v_leaf, indices, offsets, values)
        for name in expected:
            torch.testing.assert_close(accums[name], expected[name], rtol=1e-5, atol=1e-6)
        _loss(accums, deep, dense, labels).backward()
        _loss(expected, deep, dense, labels).backward()
        with torch.no_grad():
            eps = 4.0 / (offsets.numel() - 1)
            _adagrad(w, accumulators[0], w_leaf.grad, lr, eps)
            _adagrad(v, accumulators[1], v_leaf.grad, lr, eps)
        whole = wide.state_dict()
        torch.testing.assert_close(whole["w"].to(DEVICE), w, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(whole["v"].to(DEVICE), v, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(whole["v_accumulator"].to(DEVICE), accumulators[1], rtol=1e-5, atol=1e-7)
    # every entry served by the cache's hot rows or by a row staged for its step
    assert wide.cached_entries <= entries and (wide.staged_rows > 0) == (cached < N_FEATURES)
    if cached == N_FEATURES:
        assert wide.cached_entries == entries


def test_a_deferred_step_of_micro_batches_is_the_whole_batchs_step():
    hot = torch.arange(0, N_FEATURES, 3)
    host = HostCachedAggregate(FM(), N_FEATURES, hot, lr=0.3, seed=3, device=DEVICE)
    device = SparseAggregate(FM(), N_FEATURES, lr=0.3, seed=3, device=DEVICE)
    indices, offsets, values, _, labels = _batch(7)
    half = int(offsets[16])
    parts = [(indices[:half], offsets[:17], values[:half]), (indices[half:], offsets[16:] - half, values[half:])]
    for tables in (host, device):
        with tables.deferred():
            for part_indices, part_offsets, part_values in parts:
                accums = tables(part_indices, part_offsets, part_values)
                (accums["wx"] + accums["vx"].sum(1)).sum().backward()
    for name, value in device.state_dict().items():
        torch.testing.assert_close(host.state_dict()[name].to(DEVICE), value, rtol=1e-5, atol=1e-6)


def test_the_state_dict_moves_between_host_and_device_tables():
    trained = SparseAggregate(FM(), N_FEATURES, lr=0.3, seed=5, device=DEVICE)
    indices, offsets, values, _, _ = _batch(2)
    trained(indices, offsets, values)["wx"].sum().backward()
    host = HostCachedAggregate(FM(), N_FEATURES, torch.tensor([3, 1, 4]), seed=9, device=DEVICE)
    host.load_state_dict(trained.state_dict())
    with torch.no_grad():
        for name, value in host(indices, offsets, values).items():
            torch.testing.assert_close(value, trained(indices, offsets, values)[name])
    back = SparseAggregate(FM(), N_FEATURES, seed=9, device=DEVICE)
    back.load_state_dict(host.state_dict())
    torch.testing.assert_close(back.v, trained.v)
    with pytest.raises(RuntimeError, match="size mismatch for v"):
        host.load_state_dict({**trained.state_dict(), "v": torch.zeros(N_FEATURES + 1, 4)})
    with pytest.raises(RuntimeError, match="Missing key"):
        host.load_state_dict({"w": trained.state_dict()["w"]})


@pytest.mark.parametrize("hot", [[0, 0], [-1], [N_FEATURES]])
def test_cached_rows_are_distinct_ids_of_the_table(hot):
    with pytest.raises(OptionError, match="distinct ids"):
        HostCachedAggregate(FM(), N_FEATURES, torch.tensor(hot), device=DEVICE)
