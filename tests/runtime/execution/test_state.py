"""ModelState's packed rows: one [n, W] table whose rows hold a feature's params and optimizer state."""

import pytest
import torch

from alac.ir.pipeline import lower
from alac.models import zoo_model
from alac.runtime.execution.state import ModelState, packed_row_width, table_widths


@pytest.mark.parametrize("widths, width", [([1], 1), ([1, 1], 2), ([1, 1, 1], 4), ([1, 16], 32), ([16, 1, 1, 1], 32),
                                           ([1, 3], 4), ([1, 6], 8), ([1, 64, 1, 1], 96), ([5, 5], 16)])
def test_packed_rows_align_vectors_and_round_to_lines(widths, width):
    assert packed_row_width(widths) == width


@pytest.mark.parametrize("optimizer", ["sgd", "adagrad", "ftrl"])
def test_packing_keeps_every_value_in_aligned_views_of_one_table(optimizer):
    model = zoo_model("fm", k=6)
    ir = lower(model, optimizer)
    state = ModelState.initial(model, torch.randperm(50), "cpu", seed=1, optimizer=ir.optimizer)
    for table in state.states.values():
        table.uniform_()
    packed = state.packed()
    tables = {**packed.params, **packed.states}
    width = packed_row_width(table_widths(ir))
    assert packed.row_width == width
    assert len({t.untyped_storage().data_ptr() for t in tables.values()}) == 1
    for name, table in tables.items():
        original = state.params.get(name, state.states.get(name))
        torch.testing.assert_close(table, original, rtol=0, atol=0)
        assert table.stride(0) == width
        if table.dim() == 2:
            # a vector starts 16 bytes into the row at a multiple of 16
            assert (table.data_ptr() - packed.params["v"].data_ptr()) % 16 == 0
    assert packed.params["v"].storage_offset() == 0
    # a copy (a checkpoint's snapshot) holds its own values only
    snapshot = packed.to("cpu")
    assert snapshot.params["w"].is_contiguous() and snapshot.params["w"].untyped_storage().nbytes() == 4 * 50


def test_pinned_host_tables_stay_apart():
    if not torch.cuda.is_available():
        pytest.skip("pinned memory needs CUDA")
    model = zoo_model("fm", k=4)
    ir = lower(model, "adagrad")
    state = ModelState.initial(model, torch.arange(20), "cuda", optimizer=ir.optimizer, host=("v",))
    packed = state.packed()
    assert packed.params["v"].is_pinned() and packed.params["v"].is_contiguous()
    assert packed.params["w"].is_cuda and packed.params["w"].stride(0) == packed_row_width([1, 1])


def test_gpu_tables_start_at_aligned_addresses():
    """Tables drawn on a GPU start on a TABLE_ALIGNMENT_BYTES boundary; globals and tables already
    on the device are kept as they are."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    from alac.runtime.device.memory import TABLE_ALIGNMENT_BYTES

    model = zoo_model("fm", k=4)
    ir = lower(model, "adagrad")
    torch.empty(1000, device="cuda")       # so that the next block is not aligned by chance
    state = ModelState.initial(model, torch.arange(300), "cuda", optimizer=ir.optimizer)
    for table in (*state.params.values(), *state.states.values(), *state.packed().params.values()):
        assert table.data_ptr() % TABLE_ALIGNMENT_BYTES == 0 or table.dim() == 1 and table.stride(0) > 1
    kept = ModelState.placed(state.params, state.globals, state.states, "cuda")
    assert kept.params["v"] is state.params["v"] and kept.globals["b"] is state.globals["b"]
