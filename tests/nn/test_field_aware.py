"""The FFM module (alac.nn.field_aware) against an independent NumPy FFM: libffm's pairwise formula
over the entries of every sample, its gradients written out by hand, float64 SGD steps."""

import numpy as np
import pytest
import torch

from alac.nn.field_aware import FFM
from tests.runtime.movement.test_streams import DEVICE, KERNELS

N_FEATURES, N_FIELDS, K, LR = 40, 3, 2, 0.3


def _numpy_ffm(w, v, bias, rows):
    """Logits of rows [(features, fields, values)] and the mean-BCE gradients (w, v, bias) at labels."""
    logits = []
    for features, fields, values in rows:
        logit = bias + sum(w[i] * x for i, x in zip(features, values))
        for a in range(len(features)):
            for b in range(a + 1, len(features)):
                i, j = features[a], features[b]
                logit += v[i, fields[b]] @ v[j, fields[a]] * values[a] * values[b]
        logits.append(logit)
    return np.array(logits)


def _numpy_gradients(w, v, bias, rows, labels):
    logits = _numpy_ffm(w, v, bias, rows)
    error = (1 / (1 + np.exp(-logits)) - labels) / len(rows)      # d mean BCE / d logit
    gw, gv, gb = np.zeros_like(w), np.zeros_like(v), error.sum()
    for e, (features, fields, values) in zip(error, rows):
        for i, x in zip(features, values):
            gw[i] += e * x
        for a in range(len(features)):
            for b in range(a + 1, len(features)):
                i, j, xx = features[a], features[b], values[a] * values[b]
                gv[i, fields[b]] += e * xx * v[j, fields[a]]
                gv[j, fields[a]] += e * xx * v[i, fields[b]]
    return gw, gv, gb


def _rows(seed, count=10, one_hot=False):
    rng = np.random.default_rng(seed)
    rows = []
    for _ in range(count):
        fields = np.sort(rng.choice(N_FIELDS, rng.integers(2, N_FIELDS + 1), replace=False)) if one_hot else \
            np.sort(rng.integers(0, N_FIELDS, rng.integers(2, 6)))      # a field may repeat
        features = fields * 13 + rng.integers(0, 13, fields.size)
        rows.append((features, fields, rng.uniform(0.5, 1.5, fields.size)))
    return rows, (rng.uniform(size=count) < 0.5).astype(float)


def _batch(rows):
    offsets = np.cumsum([0] + [len(r[0]) for r in rows])
    def joined(part, dtype=None):
        return torch.as_tensor(np.concatenate([r[part] for r in rows]), dtype=dtype, device=DEVICE)

    return joined(0), torch.as_tensor(offsets, device=DEVICE), joined(1), joined(2, torch.float32)


@pytest.mark.parametrize(("backend", "semantics"), [("reference", "sync"), (KERNELS, "sync"), (KERNELS, "async")])
@pytest.mark.parametrize("one_hot", [False, True])
def test_ffm_logits_and_sgd_steps_equal_a_numpy_ffm(one_hot, backend, semantics):
    """Rows with a field repeated, and (one_hot: the model without pairs within a field) one-hot rows;
    the tables on their reference programs and on their generated kernels, sync and async (SGD's
    changes add up: stepping every entry at once is the batch's step)."""
    model = FFM(N_FEATURES, N_FIELDS, k=K, optimizer="sgd", lr=LR, device=DEVICE, init_std=0.3, one_hot=one_hot,
                backend=backend, semantics=semantics)
    model.tables.w.copy_(torch.randn(N_FEATURES, generator=torch.Generator().manual_seed(1)) * 0.2)
    w = model.tables.w.double().cpu().numpy().copy()
    v = model.tables.v.double().cpu().numpy().reshape(N_FEATURES, N_FIELDS, K).copy()
    bias = 0.0
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    for step in range(3):
        rows, labels = _rows(step, one_hot=one_hot)
        indices, offsets, fields, values = _batch(rows)
        logits = model(indices, offsets, fields, values)
        np.testing.assert_allclose(logits.detach().double().cpu().numpy(), _numpy_ffm(w, v, bias, rows), rtol=1e-4,
                                   atol=1e-5)
        optimizer.zero_grad()
        target = torch.as_tensor(labels, device=DEVICE).float()
        torch.nn.functional.binary_cross_entropy_with_logits(logits, target).backward()
        optimizer.step()
        gw, gv, gb = _numpy_gradients(w, v, bias, rows, labels)
        w, v, bias = w - LR * gw, v - LR * gv, bias - LR * gb
        np.testing.assert_allclose(model.tables.w.double().cpu().numpy(), w, rtol=1e-4, atol=1e-6)
        np.testing.assert_allclose(model.tables.v.double().cpu().numpy().reshape(v.shape), v, rtol=1e-4, atol=1e-6)
        np.testing.assert_allclose(float(model.bias.detach()), bias, rtol=1e-4, atol=1e-6)
