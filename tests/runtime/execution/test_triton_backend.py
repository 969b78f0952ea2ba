"""The Triton backend's binding: allocated once per training layout, untouched by predictions."""

import pytest

from alac.plan import Plan
from alac.runtime.execution.executor import Executor
from tests.codegen.test_kernels import KERNEL_BACKEND, awkward_dataset, laid_out
from tests.zoo_models import ZOO

pytestmark = pytest.mark.skipif(KERNEL_BACKEND is None, reason="needs a GPU or TRITON_INTERPRET=1")


@pytest.mark.parametrize("plan", [Plan(chunk_size=8, batch_size=16, grid_barrier=False),
                                  Plan(chunk_size=8, batch_size=16, semantics="async", hot_size=4)])
def test_predicting_another_layout_keeps_the_training_buffers(plan):
    """A validation pass between epochs must not re-allocate the training buffers (nor drop the epoch's
    CUDA graph bound to them): it once cost the per-batch-launch plan 7.8x its epoch time (H100)."""
    device, layout, labels = laid_out(awkward_dataset(1, n_rows=48), "binary")
    _, other, _ = laid_out(awkward_dataset(2, n_rows=30), "binary")
    executor = Executor(ZOO["lr"](), plan, backend=KERNEL_BACKEND, device=device)
    executor.train_epoch(layout, labels, 0, 0.1)
    buffers, bound, graph = executor.backend._by_role, executor.backend._bound, executor.backend._graph
    executor.predict(other)
    executor.train_epoch(layout, labels, 1, 0.1)
    assert executor.backend._by_role is buffers and executor.backend._bound is bound
    assert executor.backend._graph is graph
