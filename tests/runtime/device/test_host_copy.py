import pytest
import torch

from alac.runtime.device.host_copy import STAGING_BYTES, to_device

GPU = torch.cuda.is_available()


@pytest.mark.skipif(not GPU, reason="needs a CUDA GPU")
@pytest.mark.parametrize("dtype", [torch.int32, torch.float32, torch.int64])
def test_a_large_tensor_staged_to_the_gpu_arrives_whole(dtype):
    # an odd number of elements: the last slice is partial and not a multiple of the element size
    count = (9 * STAGING_BYTES) // torch.tensor([], dtype=dtype).element_size() + 12_345
    host = torch.randint(-2**30, 2**30, (count,), dtype=torch.int64).to(dtype)
    moved = to_device(host, "cuda")
    assert moved.device.type == "cuda" and moved.dtype == dtype
    assert torch.equal(moved.cpu(), host)


def test_small_cpu_and_absent_tensors_are_moved_as_they_are():
    small = torch.arange(10, dtype=torch.float32)
    assert torch.equal(to_device(small, "cpu"), small) and to_device(None, "cpu") is None
    rows = torch.arange(12).reshape(3, 4)
    assert torch.equal(to_device(rows, "cuda" if GPU else "cpu").cpu(), rows)
