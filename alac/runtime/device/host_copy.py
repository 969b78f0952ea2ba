"""Host to GPU copies of large pageable tensors through a pair of pinned staging buffers.

A pageable `tensor.to("cuda")` goes through the driver's staging, far below the link's speed (most of the SCD
dual's setup on benchmarks/scd.py's webspam-shaped set); copying slices into pinned buffers (CPU copies on
torch's threads) while the previous slice crosses to the device runs at the link's speed without pinning the
whole tensor."""

from __future__ import annotations

import torch

# a staging buffer's bytes (two of them): large enough that each slice's launch costs nothing
STAGING_BYTES = 1 << 24


def to_device(tensor, device):
    """`tensor` on `device`: staged through pinned buffers for a large pageable CPU tensor going to a
    GPU, else tensor.to(device)."""
    device = torch.device(device)
    if tensor is None:
        return None
    size = tensor.numel() * tensor.element_size()
    if device.type != "cuda" or tensor.device.type != "cpu" or tensor.is_pinned() or size < 4 * STAGING_BYTES:
        return tensor.to(device)
    source = tensor.contiguous().view(-1).view(torch.uint8)
    out = torch.empty(tensor.shape, dtype=tensor.dtype, device=device)
    target = out.view(-1).view(torch.uint8)
    stream = torch.cuda.Stream(device)
    stream.wait_stream(torch.cuda.current_stream(device))
    buffers = [torch.empty(STAGING_BYTES, dtype=torch.uint8, pin_memory=True) for _ in range(2)]
    done = [None, None]
    for step, first in enumerate(range(0, size, STAGING_BYTES)):
        slot, count = step % 2, min(STAGING_BYTES, size - first)
        if done[slot] is not None:
            done[slot].synchronize()             # the slice this buffer held has reached the device
        buffers[slot][:count].copy_(source[first:first + count])
        with torch.cuda.stream(stream):
            target[first:first + count].copy_(buffers[slot][:count], non_blocking=True)
            done[slot] = torch.cuda.Event()
            done[slot].record(stream)
    stream.synchronize()        # every slice arrived: out is whole and the buffers idle when freed
    return out
