"""An oracle independent of the IR for every zoo model: each model's loss written by hand in
PyTorch over `embedding_bag` (as a plain PyTorch user would write it, not generated from the IR),
differentiated by autograd. One full-batch SGD step of the reference executor must equal the
hand-written step, which checks the IR's derived gradients, their scaling and the update together;
the losses the executor reports must equal the hand-written losses."""

import pytest
import torch
import torch.nn.functional as F

from alac.plan import Plan
from alac.runtime.execution.executor import Executor, LabelMap
from alac.runtime.movement.layout import LayoutOptions, build_layout
from tests.codegen.test_kernels import awkward_dataset
from tests.zoo_models import ZOO

LABEL_KINDS = {"lr": "binary", "lsvm": "binary", "lsr": "real", "fm": "binary", "fm_squared": "real",
               "poisson": "count"}


def hand_written_losses(model, params, data, y):
    """Per-row losses of the model at params {"w": [n], "v": [n, k] (FM), "b": []} on the CSR data,
    in the original feature ids; y in the model's label convention (+1/-1 for binary)."""
    ids, offsets = data.indices.long(), data.indptr[:-1].long()
    x = data.values_or_ones().float()
    z = F.embedding_bag(ids, params["w"][:, None], offsets, mode="sum", per_sample_weights=x)[:, 0] + params["b"]
    if "v" in params:
        # Rendle's O(nk) form of sum_{i<j} <v_i, v_j> x_i x_j
        vx = F.embedding_bag(ids, params["v"], offsets, mode="sum", per_sample_weights=x)
        v2x2 = F.embedding_bag(ids, params["v"] ** 2, offsets, mode="sum", per_sample_weights=x ** 2)
        z = z + 0.5 * (vx ** 2 - v2x2).sum(dim=1)
    if model in ("lr", "fm"):
        return F.softplus(-y * z)
    if model == "lsvm":
        return torch.clamp(1 - y * z, min=0)
    if model in ("lsr", "fm_squared"):
        return 0.5 * (y - z) ** 2
    if model == "poisson":
        return torch.exp(z) - y * z
    raise AssertionError(model)


def executor_params(executor, layout):
    """The executor's params in the original feature ids (its layout re-indexes them by frequency)."""
    params = {}
    for name, value in executor.state.params.items():
        original = torch.zeros_like(value)
        original[layout.new_to_old.long()] = value
        params[name] = original
    params.update({name: value[0].clone() for name, value in executor.state.globals.items()})
    return params


@pytest.mark.parametrize("model", sorted(ZOO))
def test_one_sgd_step_equals_autograd_on_the_hand_written_model(model):
    data = awkward_dataset(4, n_rows=48, labels=LABEL_KINDS[model])
    labels = LabelMap.fit(LABEL_KINDS[model], data.labels)
    layout = build_layout(data, LayoutOptions(chunk_size=8), device="cpu")
    # one batch holds every row: the step is full-batch gradient descent on the mean loss
    executor = Executor(ZOO[model](), Plan(chunk_size=8, batch_size=64), backend="reference", device="cpu", seed=3)
    executor.initialize(layout)
    # start away from zero so every term of every gradient is live
    generator = torch.Generator().manual_seed(0)
    for value in (*executor.state.params.values(), *executor.state.globals.values()):
        value.copy_(0.3 * torch.randn(value.shape, generator=generator))
    before = {name: value.clone().requires_grad_() for name, value in executor_params(executor, layout).items()}
    y = labels.model_labels(data.labels).float()
    losses = hand_written_losses(model, before, data, y)
    losses.mean().backward()

    lr = 0.05
    reported = executor.train_epoch(layout, labels.model_labels(layout.labels), 0, lr)
    after = executor_params(executor, layout)
    assert reported == pytest.approx(float(losses.detach().mean()), rel=1e-5)
    for name, value in before.items():
        expected = value.detach() - lr * value.grad
        torch.testing.assert_close(after[name], expected, rtol=1e-5, atol=1e-6, msg=f"{model}: {name}")
        # the step moved the param: the comparison above is not of two unchanged copies
        assert float((after[name] - value.detach()).abs().max()) > 1e-4, name


def test_rows_are_grouped_without_a_host_round_trip_as_torch_unique_groups_them():
    from alac.runtime.execution.reference import _last_group_beyond, _row_groups

    feature = torch.tensor([5, 2, 5, 9, 2, 2, 7])
    rows, inverse, valid, last = _row_groups(feature)
    unique, unique_inverse = torch.unique(feature, return_inverse=True)
    assert torch.equal(rows[valid], unique) and torch.equal(inverse, unique_inverse)
    assert torch.equal(rows[inverse], feature) and int(last) == unique.numel() - 1
    # the slots past the distinct rows name the last row and write its values
    assert bool((rows[~valid] == unique[-1]).all())
    values = torch.arange(7.0)[:, None].expand(7, 3)
    assert torch.equal(_last_group_beyond(values, valid, last)[~valid], values[unique.numel() - 1].expand(3, 3))
