"""alac.nn.SparseAggregate against a hand-written PyTorch wide & deep model: the same accums in
forward, and after loss.backward() the sparse tables stepped as dense autograd gradients and a
hand-written SGD or row-wise AdaGrad step them; the deep part's gradients untouched."""

import pytest
import torch

from alac.dsl import Global, Model, Normal, Param, ops
from alac.errors import DataError, OptionError
from alac.nn import SparseAggregate

K = 4
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


class FM(Model):
    labels = "binary"
    prediction = "probability"

    def __init__(self, l2=0.0):
        self.w = Param(init=Normal(0.1), l2=l2)
        self.v = Param(size=K, init=Normal(0.1), l2=l2)
        self.b = Global()

    def aggregate(self, x, p):
        return {"wx": x * p.w, "vx": x * p.v, "v2x2": x**2 * p.v**2}

    def loss(self, a, g, y):
        return ops.softplus(-y * (g.b + a.wx + 0.5 * ops.sum(a.vx**2 - a.v2x2)))

    def predict(self, a, g):
        return ops.sigmoid(g.b + a.wx + 0.5 * ops.sum(a.vx**2 - a.v2x2))


def _batch(seed, rows=32, n_features=50):
    generator = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, 6, (rows,), generator=generator)
    offsets = torch.cat([torch.zeros(1, dtype=torch.int64), lengths.cumsum(0)])
    indices = torch.randint(0, n_features, (int(offsets[-1]),), generator=generator)
    values = torch.rand(indices.numel(), generator=generator) + 0.5
    dense = torch.randn(rows, 3, generator=generator)
    labels = (torch.rand(rows, generator=generator) < 0.4).float()
    return tuple(t.to(DEVICE) for t in (indices, offsets, values, dense, labels))


def _hand_written_accums(w, v, indices, offsets, values):
    rows = offsets.numel() - 1
    row = torch.repeat_interleave(torch.arange(rows, device=DEVICE), offsets.diff())
    wx = torch.zeros(rows, device=DEVICE).index_add(0, row, values * w[indices])
    vx = torch.zeros(rows, K, device=DEVICE).index_add(0, row, values[:, None] * v[indices])
    v2x2 = torch.zeros(rows, K, device=DEVICE).index_add(0, row, values[:, None] ** 2 * v[indices] ** 2)
    return {"wx": wx, "vx": vx, "v2x2": v2x2}


def _loss(accums, deep, dense, labels):
    # v2x2 weighted per lane: its gradient differs between lanes, unlike in an FM's own loss
    lanes = torch.linspace(0.2, 1.0, K, device=DEVICE)
    logit = accums["wx"] + 0.5 * (accums["vx"] ** 2 - lanes * accums["v2x2"]).sum(1) + deep(dense).squeeze(1)
    return torch.nn.functional.binary_cross_entropy_with_logits(logit, labels)


def _adagrad(table, accumulator, grad, lr, eps):
    """Row-wise AdaGrad as alac documents it: a scalar param's accumulator per coordinate, a vector
    param's one per row fed the row's mean squared gradient."""
    squared = grad * grad if grad.dim() == 1 else (grad * grad).mean(1)
    accumulator += squared
    scale = accumulator.sqrt() + eps
    table -= lr * grad / (scale if grad.dim() == 1 else scale[:, None])


@pytest.mark.parametrize("optimizer", ["sgd", "adagrad"])
def test_backward_steps_the_sparse_rows_as_dense_gradients_and_the_optimizer_would(optimizer):
    lr, n_features = 0.3, 50
    wide = SparseAggregate(FM(), n_features, optimizer=optimizer, lr=lr, seed=3, device=DEVICE)
    deep = torch.nn.Linear(3, 1).to(DEVICE)
    w, v = wide.w.clone(), wide.v.clone()
    accumulators = (torch.zeros(n_features, device=DEVICE), torch.zeros(n_features, device=DEVICE))
    for step in range(3):
        indices, offsets, values, dense, labels = _batch(step)
        accums = wide(indices, offsets, values)
        w_leaf, v_leaf = w.clone().requires_grad_(), v.clone().requires_grad_()
        expected = _hand_written_accums(w_leaf, v_leaf, indices, offsets, values)
        for name in expected:
            torch.testing.assert_close(accums[name], expected[name], rtol=1e-5, atol=1e-6)
        deep.zero_grad()
        _loss(accums, deep, dense, labels).backward()
        deep_grads = [p.grad.clone() for p in deep.parameters()]
        deep.zero_grad()
        _loss(expected, deep, dense, labels).backward()
        for ours, theirs in zip(deep_grads, (p.grad for p in deep.parameters())):
            torch.testing.assert_close(ours, theirs)
        with torch.no_grad():
            if optimizer == "sgd":
                w -= lr * w_leaf.grad
                v -= lr * v_leaf.grad
            else:
                eps = 4.0 / (offsets.numel() - 1)     # 4 mean |x| / B, the value scale left at 1
                _adagrad(w, accumulators[0], w_leaf.grad, lr, eps)
                _adagrad(v, accumulators[1], v_leaf.grad, lr, eps)
        torch.testing.assert_close(wide.w, w, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(wide.v, v, rtol=1e-5, atol=1e-6)
    if optimizer == "adagrad":
        torch.testing.assert_close(wide.w_accumulator, accumulators[0], rtol=1e-5, atol=1e-7)
        torch.testing.assert_close(wide.v_accumulator, accumulators[1], rtol=1e-5, atol=1e-7)


def test_the_tables_are_buffers_not_parameters_and_travel_in_the_state_dict():
    wide = SparseAggregate(FM(), 20, optimizer="adagrad", lr=0.1)
    assert list(wide.parameters()) == []
    state = wide.state_dict()
    assert set(state) == {"w", "v", "w_accumulator", "v_accumulator"} and state["v"].shape == (20, K)
    copy = SparseAggregate(FM(), 20, optimizer="adagrad", lr=0.1, seed=9)
    copy.load_state_dict(state)
    indices, offsets, values, *_ = _batch(0, n_features=20)
    for name, value in wide(indices, offsets, values).items():
        assert torch.equal(value, copy(indices, offsets, values)[name])


def test_bad_batches_are_refused_with_the_value():
    wide = SparseAggregate(FM(), 10, optimizer="adagrad")
    with pytest.raises(DataError, match="feature id 12 is outside the table's 10 rows"):
        wide(torch.tensor([1, 12]), torch.tensor([0, 2]))
    with pytest.raises(DataError, match="offsets must rise from 0"):
        wide(torch.tensor([1, 2]), torch.tensor([0, 3]))
    with pytest.raises(DataError, match="values has"):
        wide(torch.tensor([1, 2]), torch.tensor([0, 2]), torch.ones(3))
    with pytest.raises(OptionError, match="give SparseAggregate an lr"):
        SparseAggregate(FM(), 10, optimizer="sgd")
