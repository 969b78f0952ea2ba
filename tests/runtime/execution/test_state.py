"""ModelState's tables on a GPU start at aligned addresses."""

import pytest
import torch

from alac.ir.pipeline import lower
from alac.models import zoo_model
from alac.runtime.execution.state import ModelState


def test_gpu_tables_start_at_aligned_addresses():
    """Tables of TABLE_ALIGNMENT_BYTES or more drawn on a GPU start on such a boundary; globals and
    tables already on the device are kept as they are."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    from alac.runtime.device.memory import TABLE_ALIGNMENT_BYTES

    model = zoo_model("fm", k=4)
    ir = lower(model, "adagrad")
    torch.empty(1000, device="cuda")       # so that the next block is not aligned by chance
    state = ModelState.initial(model, torch.arange(TABLE_ALIGNMENT_BYTES // 4), "cuda", optimizer=ir.optimizer)
    for table in (*state.params.values(), *state.states.values()):
        assert table.data_ptr() % TABLE_ALIGNMENT_BYTES == 0
    kept = ModelState.placed(state.params, state.globals, state.states, "cuda")
    assert kept.params["v"] is state.params["v"] and kept.globals["b"] is state.globals["b"]


def test_tables_off_a_gpu_are_plain_tensors():
    model = zoo_model("fm", k=4)
    ir = lower(model, "adagrad")
    state = ModelState.initial(model, torch.randperm(30), "cpu", optimizer=ir.optimizer)
    for table in (*state.params.values(), *state.states.values()):
        assert table.is_contiguous() and table.storage_offset() == 0
