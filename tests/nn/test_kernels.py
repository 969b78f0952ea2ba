"""alac.nn on its generated kernels (alac.codegen.bag_kernels, launched by alac.runtime.execution.bag_launcher):
the same accums, tables and optimizer state as the reference programs, which tests/nn/test_aggregate.py checks
against hand-written PyTorch. Triton's interpreter without a GPU, compiled kernels with one."""

import pytest
import torch

from alac.errors import OptionError
from alac.nn import PackedEmbeddingBags, SparseAggregate, Table
from alac.nn.deep_models import DeepFM, FieldTables
from tests.runtime.movement.test_streams import DEVICE, KERNELS


def _pair(optimizer, k=5, dtype=torch.float32, rows=60):
    return [SparseAggregate(FieldTables(k, squares=True), rows, optimizer=optimizer, lr=0.1, seed=2, device=DEVICE,
                            backend=backend, dtype=dtype) for backend in ("reference", KERNELS)]


def _batch(generator, samples=12, per_sample=4, rows=60, values=False):
    """Bags of per_sample entries with repeated ids (a row summed from several entries)."""
    indices = torch.randint(0, rows, (samples * per_sample,), generator=generator).to(DEVICE)
    offsets = torch.arange(0, samples * per_sample + 1, per_sample, device=DEVICE)
    x = torch.rand(samples * per_sample, generator=generator).to(DEVICE) if values else None
    return indices, offsets, x


def _loss(accums):
    # every accum reaches the loss, the vector ones lane by lane
    return accums["wx"].sum() + (accums["vx"] ** 2).sum() - 0.3 * (accums["v2x2"] * accums["vx"]).sum()


def _assert_same(expected, actual, dtype=torch.float32):
    # a narrow table's values may round to neighbouring values (the interpreter truncates to bfloat16)
    tolerance = {"rtol": 1e-5, "atol": 1e-6} if dtype == torch.float32 else {"rtol": 2**-6, "atol": 1e-4}
    for (name, a), (_, b) in zip(expected.state_dict().items(), actual.state_dict().items()):
        torch.testing.assert_close(b.float(), a.float(), **tolerance, msg=name)


@pytest.mark.parametrize("optimizer", ["sgd", "adagrad", "ftrl", "adam"])
@pytest.mark.parametrize("values", [False, True])
def test_kernels_train_the_tables_as_the_reference_programs_do(optimizer, values):
    generator = torch.Generator().manual_seed(0)
    reference, kernels = _pair(optimizer)
    for _ in range(3):
        indices, offsets, x = _batch(generator, values=values)
        accums = [module(indices, offsets, x) for module in (reference, kernels)]
        for name in accums[0]:
            torch.testing.assert_close(accums[1][name], accums[0][name], rtol=1e-5, atol=1e-6)
        for module_accums in accums:
            _loss(module_accums).backward()
    _assert_same(reference, kernels)


def test_kernels_pool_per_field_and_step_once_in_a_deferred_step():
    """Per-field bags (DeepFM's embeddings) and two calls in deferred(): one step on both."""
    generator = torch.Generator().manual_seed(1)
    reference, kernels = _pair("adagrad", k=4)
    for _ in range(2):
        indices, offsets, _ = _batch(generator)
        fields = torch.arange(4, device=DEVICE).repeat(12)
        for module in (reference, kernels):
            with module.deferred():
                _loss(module(indices, offsets, fields=fields, n_fields=4)).backward()
                module(indices[:8], offsets[:3])["vx"].sum().backward()
    _assert_same(reference, kernels)


def test_narrow_tables_on_kernels_sum_and_update_in_float32():
    generator = torch.Generator().manual_seed(2)
    reference, kernels = _pair("adagrad", k=6, dtype=torch.bfloat16)
    for _ in range(2):
        indices, offsets, x = _batch(generator, values=True)
        for module in (reference, kernels):
            _loss(module(indices, offsets, x)).backward()
    assert kernels.v.dtype == torch.bfloat16 and kernels.v_accumulator.dtype == torch.float32
    _assert_same(reference, kernels, torch.bfloat16)


def test_a_deepfm_and_packed_tables_take_the_kernels():
    torch.manual_seed(0)
    models = []
    for backend in ("reference", KERNELS):
        torch.manual_seed(0)
        models.append(DeepFM(40, 3, k=4, hidden=(8,), lr=0.05, seed=1, device=DEVICE, backend=backend))
    ids = torch.randint(0, 40, (30,), device=DEVICE)
    offsets = torch.arange(0, 31, 3, device=DEVICE)
    fields = torch.arange(3, device=DEVICE).repeat(10)
    logits = [model(ids, offsets, fields) for model in models]
    torch.testing.assert_close(logits[1], logits[0], rtol=1e-5, atol=1e-6)
    for logit in logits:
        logit.sum().backward()
    _assert_same(models[0].tables, models[1].tables)
    packed = PackedEmbeddingBags([Table("a", 10, 4, lr=0.1), Table("b", 7, 4, lr=0.1)], device=DEVICE,
                                 backend=KERNELS)
    assert packed.packs[0]._kernels is not None


def test_the_default_backend_is_the_kernels_on_a_gpu_and_the_torch_programs_elsewhere():
    assert SparseAggregate(FieldTables(2), 10, lr=0.1, device="cpu")._kernels is None
    if torch.cuda.is_available():
        assert SparseAggregate(FieldTables(2), 10, lr=0.1, device="cuda")._kernels is not None


def test_a_backend_that_cannot_run_on_the_tables_device_is_refused():
    with pytest.raises(OptionError, match="backend is one of auto, reference, triton, interpret"):
        SparseAggregate(FieldTables(2), 10, lr=0.1, device="cpu", backend="cuda")
    with pytest.raises(OptionError, match="runs on a CUDA device"):
        SparseAggregate(FieldTables(2), 10, lr=0.1, device="cpu", backend="triton")


@pytest.mark.parametrize("optimizer", ["sgd", "adagrad", "ftrl", "adam"])
def test_async_kernels_step_every_entry_as_the_sync_step_does_when_no_row_repeats(optimizer):
    """Batches whose entries are distinct rows: one entry per row, so stepping every entry's gradient
    at once is the batch's step; with rows repeated, still a descent."""
    generator = torch.Generator().manual_seed(3)
    reference = SparseAggregate(FieldTables(5, squares=True), 60, optimizer=optimizer, lr=0.1, seed=2, device=DEVICE)
    asynchronous = SparseAggregate(FieldTables(5, squares=True), 60, optimizer=optimizer, lr=0.1, seed=2,
                                   device=DEVICE, backend=KERNELS, semantics="async")
    assert not hasattr(asynchronous._kernels, "_scratch") or asynchronous._kernels._scratch is None
    for _ in range(3):
        indices = torch.randperm(60, generator=generator)[:48].to(DEVICE)
        offsets = torch.arange(0, 49, 4, device=DEVICE)
        for module in (reference, asynchronous):
            _loss(module(indices, offsets)).backward()
    assert asynchronous._kernels._scratch is None          # no gradient sums kept
    _assert_same(reference, asynchronous)
    repeated = torch.randint(0, 5, (48,), generator=generator).to(DEVICE)
    before = float(_loss(asynchronous(repeated, offsets)).detach())
    for _ in range(5):
        _loss(asynchronous(repeated, offsets)).backward()
    assert float(_loss(asynchronous(repeated, offsets)).detach()) < before


def test_async_tables_need_the_kernels_and_float32_rows():
    with pytest.raises(OptionError, match="async on the generated kernels"):
        SparseAggregate(FieldTables(2), 10, lr=0.1, device="cpu", semantics="async")
    with pytest.raises(OptionError, match="float32 tables"):
        SparseAggregate(FieldTables(2), 10, lr=0.1, device=DEVICE, backend=KERNELS, semantics="async",
                        dtype=torch.bfloat16)


@pytest.mark.parametrize("backend", ["reference", KERNELS])
def test_adam_moves_a_row_of_constant_gradient_by_lr_every_step(backend):
    """Adam's closed form: under a constant gradient m̂ / √v̂ = 1 at every step, so each step moves the
    row by lr (less lr·eps/g). With 1 - beta traced, the step simplified to 1 + beta·c - beta, which
    cancels: 20 steps were off by 1e-5, and an H100's FMA rounded it differently from torch."""
    aggregate = SparseAggregate(FieldTables(2), 10, optimizer="adam", lr=0.1, seed=0, device=DEVICE, backend=backend)
    before = aggregate.state_dict()["w"].clone()
    indices, offsets = torch.tensor([1, 1, 3], device=DEVICE), torch.tensor([0, 3], device=DEVICE)
    for _ in range(20):
        aggregate(indices, offsets)["wx"].sum().backward()
    moved = before - aggregate.state_dict()["w"]
    expected = torch.zeros(10, device=DEVICE)
    expected[[1, 3]] = 20 * 0.1
    torch.testing.assert_close(moved, expected, rtol=0, atol=1e-6)


def test_a_copied_module_on_the_kernels_trains_on_its_own_tables_as_the_original_does():
    import copy

    generator = torch.Generator().manual_seed(4)
    original = SparseAggregate(FieldTables(3, squares=True), 40, lr=0.1, seed=1, device=DEVICE, backend=KERNELS)
    indices, offsets, _ = _batch(generator, rows=40)
    _loss(original(indices, offsets)).backward()
    twin = copy.deepcopy(original)
    assert twin._kernels is not original._kernels and twin._kernels.kernels is original._kernels.kernels
    indices, offsets, _ = _batch(generator, rows=40)
    for module in (original, twin):
        _loss(module(indices, offsets)).backward()
    _assert_same(original, twin)
    assert all(a.data_ptr() != b.data_ptr() for a, b in zip(original.state_dict().values(), twin.state_dict().values()))
