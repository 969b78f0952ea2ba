"""The resident sync LR kernel of benchmarks/sync_resident.py trains an epoch as the reference
executor's sync mini-batch SGD does: the same parameters and loss over the same batches."""

import pytest
import torch

from alac.data.synthetic import criteo_like
from alac.models import zoo_model
from alac.plan import Plan
from alac.runtime.execution.executor import Executor, LabelMap
from alac.runtime.execution.schedule import batch_scales
from alac.runtime.movement.layout import LayoutOptions, build_layout
from benchmarks.sync_resident import resident_epoch

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


@pytest.mark.parametrize("values", [False, True])
def test_an_epoch_of_the_resident_kernel_is_the_references_sync_epoch(values):
    data = criteo_like(300 if DEVICE == "cpu" else 3000, n_fields=5, seed=2, device="cpu")
    if values:
        weights = torch.rand(data.nnz, generator=torch.Generator().manual_seed(3))
        data = type(data)(**{**data.__dict__, "values": weights})
    # under the interpreter the programs run one after another: one program, one chunk a batch
    chunk, per_batch = 8, (1 if DEVICE == "cpu" else 4)
    layout = build_layout(data, LayoutOptions(chunk_size=chunk), DEVICE)
    labels = LabelMap.fit("binary", data.labels).model_labels(layout.labels)
    reference = Executor(zoo_model("lr"), Plan(batch_size=chunk * per_batch, chunk_size=chunk), backend="reference",
                         device=DEVICE, seed=1, optimizer="sgd")
    reference.initialize(layout)
    w, b = reference.state.params["w"].clone(), reference.state.globals["b"].clone()
    order = layout.chunk_order(0, 1)
    reference.queue_epoch(layout, labels, 0, 0.5, order)
    scales = batch_scales(layout, order, per_batch).float()
    loss = resident_epoch(layout, labels, w, b, order, torch.full_like(scales, 0.5), scales, per_batch, per_batch)
    assert not torch.equal(w, torch.zeros_like(w))
    torch.testing.assert_close(w, reference.state.params["w"], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(b, reference.state.globals["b"], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(loss, reference.loss_sum.reshape(loss.shape), rtol=1e-5, atol=1e-5)


def test_a_batch_needs_a_program_per_chunk():
    data = criteo_like(64, n_fields=3, seed=2, device="cpu")
    layout = build_layout(data, LayoutOptions(chunk_size=8), "cpu")
    with pytest.raises(ValueError, match="4 chunks a batch need as many programs"):
        resident_epoch(layout, layout.labels, torch.zeros(layout.n_features), torch.zeros(1),
                       layout.chunk_order(0), None, None, 4, 2)
