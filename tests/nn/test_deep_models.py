"""Wide & Deep, DeepFM and the DLRM-like model (alac.nn.deep_models) against hand-written PyTorch models
of the same architecture on dense embedding tables: the same logits, and after two steps (SGD on the
tables through backward, torch SGD on the MLPs) the same tables and MLP weights."""

import copy

import pytest
import torch

from alac.nn.deep_models import DeepFM, DLRMLike, WideAndDeep

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
N_FEATURES, N_FIELDS, K, N_DENSE, LR = 90, 3, 4, 2, 0.1


def _batch(seed, rows=24):
    generator = torch.Generator().manual_seed(seed)
    counts = torch.randint(1, 3, (rows, N_FIELDS), generator=generator)
    fields = torch.repeat_interleave(torch.arange(N_FIELDS).repeat(rows), counts.flatten())
    indices = fields * 30 + torch.randint(0, 30, (fields.numel(),), generator=generator)
    offsets = torch.cat([torch.zeros(1, dtype=torch.int64), counts.sum(1).cumsum(0)])
    dense = torch.randn(rows, N_DENSE, generator=generator)
    labels = (torch.rand(rows, generator=generator) < 0.5).float()
    return tuple(t.to(DEVICE) for t in (indices, offsets, fields, dense, labels))


def _field_bags(table, indices, offsets, fields, power=1):
    rows = offsets.numel() - 1
    bag = torch.repeat_interleave(torch.arange(rows, device=DEVICE), offsets.diff()) * N_FIELDS + fields
    values = table[indices] ** power
    return torch.zeros((rows * N_FIELDS, *values.shape[1:]), device=DEVICE).index_add(0, bag, values) \
        .view(rows, N_FIELDS, *values.shape[1:])


def _wide_and_deep(model, w, v, indices, offsets, fields, dense):
    vx = _field_bags(v, indices, offsets, fields)
    return model.bias + _field_bags(w, indices, offsets, fields).sum(1) + model.deep(vx.flatten(1)).squeeze(1)


def _deepfm(model, w, v, indices, offsets, fields, dense):
    vx = _field_bags(v, indices, offsets, fields)
    pairs = sum((vx[:, i] * vx[:, j]).sum(1) for i in range(N_FIELDS) for j in range(i + 1, N_FIELDS))
    # a field with two ids pairs them too: FM's interactions are over every pair of entries
    within = 0.5 * (vx**2 - _field_bags(v, indices, offsets, fields, power=2)).sum((1, 2))
    return model.bias + _field_bags(w, indices, offsets, fields).sum(1) + pairs + within \
        + model.deep(vx.flatten(1)).squeeze(1)


def _dlrm(model, w, v, indices, offsets, fields, dense):
    vx = _field_bags(v, indices, offsets, fields)
    bottom = model.bottom(dense)
    vectors = [bottom] + [vx[:, f] for f in range(N_FIELDS)]
    dots = [(vectors[i] * vectors[j]).sum(1) for i in range(len(vectors)) for j in range(i + 1, len(vectors))]
    return model.top(torch.cat([bottom, torch.stack(dots, 1)], 1)).squeeze(1)


@pytest.mark.parametrize(("make", "reference", "with_dense"), [
    (lambda: WideAndDeep(N_FEATURES, N_FIELDS, k=K, hidden=(8,), optimizer="sgd", lr=LR, device=DEVICE),
     _wide_and_deep, False),
    (lambda: DeepFM(N_FEATURES, N_FIELDS, k=K, hidden=(8,), optimizer="sgd", lr=LR, device=DEVICE), _deepfm, False),
    (lambda: DLRMLike(N_FEATURES, N_FIELDS, N_DENSE, k=K, bottom=(6,), top=(8,), optimizer="sgd", lr=LR,
                      device=DEVICE), _dlrm, True),
])
def test_a_deep_model_trains_as_its_hand_written_pytorch_twin(make, reference, with_dense):
    torch.manual_seed(1)
    model = make()
    # random wide weights, so that the wide part counts from the first step
    model.tables.w.copy_(torch.randn(N_FEATURES, device=DEVICE) * 0.1)
    twin = copy.deepcopy(model)
    w, v = model.tables.w.clone().requires_grad_(), model.tables.v.clone().requires_grad_()
    ours = torch.optim.SGD(model.parameters(), lr=LR)
    theirs = torch.optim.SGD([*twin.parameters(), w, v], lr=LR)
    for step in range(2):
        indices, offsets, fields, dense, labels = _batch(step)
        logits = model(indices, offsets, fields, dense=dense) if with_dense else model(indices, offsets, fields)
        expected = reference(twin, w, v, indices, offsets, fields, dense)
        torch.testing.assert_close(logits, expected, rtol=1e-5, atol=1e-5)
        for optimizer, out in ((ours, logits), (theirs, expected)):
            optimizer.zero_grad()
            torch.nn.functional.binary_cross_entropy_with_logits(out, labels).backward()
            optimizer.step()
        torch.testing.assert_close(model.tables.w, w.detach(), rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(model.tables.v, v.detach(), rtol=1e-5, atol=1e-6)
        for mine, twins in zip(model.parameters(), twin.parameters()):
            torch.testing.assert_close(mine, twins, rtol=1e-5, atol=1e-6)


def test_the_dense_part_composes_with_torch_compile_and_autocast():
    """The MLP under torch.compile gives the eager model's logits and steps; under autocast (bfloat16 on
    a CPU, float16 on a GPU) the tables still take float32 gradients and step."""
    torch.manual_seed(2)
    eager = DeepFM(N_FEATURES, N_FIELDS, k=K, hidden=(8,), optimizer="sgd", lr=LR, device=DEVICE)
    compiled = copy.deepcopy(eager)
    compiled.deep = torch.compile(compiled.deep)
    indices, offsets, fields, dense, labels = _batch(0)
    for model in (eager, compiled):
        torch.nn.functional.binary_cross_entropy_with_logits(model(indices, offsets, fields), labels).backward()
    torch.testing.assert_close(compiled.tables.v, eager.tables.v, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(compiled(indices, offsets, fields), eager(indices, offsets, fields),
                               rtol=1e-5, atol=1e-5)
    before = eager.tables.v.clone()
    with torch.autocast(DEVICE, dtype=torch.float16 if DEVICE == "cuda" else torch.bfloat16):
        logits = eager(indices, offsets, fields)
        loss = torch.nn.functional.binary_cross_entropy_with_logits(logits.float(), labels)
    loss.backward()
    assert eager.tables.v.dtype == torch.float32 and not torch.equal(eager.tables.v, before)
    torch.testing.assert_close(logits.float(), compiled(indices, offsets, fields), rtol=0.05, atol=0.05)


def _ddp_rank(rank, folder):
    """One of two gloo ranks: DeepFM with its MLP under DistributedDataParallel, two SGD steps on the
    rank's own batches; its MLP and tables saved for the parent to compare."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    dist.init_process_group("gloo", init_method=f"file://{folder}/rendezvous", rank=rank, world_size=2)
    try:
        torch.manual_seed(1)
        model = DeepFM(N_FEATURES, N_FIELDS, k=K, hidden=(8,), optimizer="sgd", lr=LR, device="cpu")
        model.deep = DistributedDataParallel(model.deep)
        optimizer = torch.optim.SGD(model.parameters(), lr=LR)
        for step in range(2):
            indices, offsets, fields, _, labels = (t.cpu() for t in _batch(10 * rank + step))
            optimizer.zero_grad()
            torch.nn.functional.binary_cross_entropy_with_logits(model(indices, offsets, fields), labels).backward()
            optimizer.step()
        torch.save({"deep": [p.detach() for p in model.deep.parameters()], "v": model.tables.v.clone()},
                   f"{folder}/rank{rank}.pt")
    finally:
        dist.destroy_process_group()


def test_the_dense_part_composes_with_ddp_while_each_rank_steps_its_tables(tmp_path):
    """DDP over the MLP (gloo, two CPU ranks): the ranks' MLPs stay equal (their gradients averaged)
    while each rank's tables take its own batches' steps inside backward."""
    torch.multiprocessing.spawn(_ddp_rank, args=(str(tmp_path),), nprocs=2)
    first, second = (torch.load(tmp_path / f"rank{rank}.pt") for rank in (0, 1))
    for mine, theirs in zip(first["deep"], second["deep"]):
        torch.testing.assert_close(mine, theirs)
    assert not torch.allclose(first["v"], second["v"])
