"""Memory for tables: checks made before long work, and host memory the GPU reaches.

A layout and a model hold dense tables of the declared feature space (counts, the re-index maps,
params and optimizer state), so one stray id of 2,147,483,647 in a LIBSVM file asks for tens of
GiB. That is found here, before the tables are allocated, with the file, line and token of the
largest id. Tables in host memory are page-locked so that GPU kernels read and write them through
their unified (UVA) addresses.
"""

from __future__ import annotations

import math
import os
import weakref

import torch

from alac.errors import AlacError, DataError

# Per feature: an int64 count, int32 new-to-old and old-to-new maps, and the sort's int64 temporaries.
LAYOUT_BYTES_PER_FEATURE = 8 + 4 + 4 + 16


def available_bytes(device):
    """Memory free for new tables on device: the GPU's free memory, or the host's available memory."""
    device = torch.device(device)
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return free + torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def _gib(count):
    return f"{count / 2**30:,.1f} GiB"


def check_feature_tables(n_features, bytes_per_feature, what, device, dataset=None):
    """DataError unless n_features rows of bytes_per_feature fit on device (dataset: where the ids
    came from, to point at the largest)."""
    need = n_features * bytes_per_feature
    free = available_bytes(device)
    if free is None or need <= free:
        return
    location = {}
    if dataset is not None and dataset.nnz:
        entry = int(torch.argmax(dataset.indices))
        row = int(torch.searchsorted(dataset.indptr.cpu(), torch.tensor(entry), right=True)) - 1
        location = {"path": dataset.source.path, "line": dataset.source.line_of_row(row),
                    "token": dataset.entry_token(entry)}
    raise DataError(f"{n_features:,} feature ids need {_gib(need)} for {what}, more than the "
                    f"{_gib(free)} free on {torch.device(device)}"
                    + ("; the largest id is here" if location else "")
                    + ": renumber the features densely or hash them into fewer ids", **location)


# torch's pinned-memory allocator rounds every block up to a power of two (a 42 GB table would take
# 64 GB of page-locked memory): tables from this size on are registered with CUDA in place instead
REGISTER_FROM_BYTES = 1 << 30
_HOST_REGISTER_MAPPED_PORTABLE = 3


def pinned_empty(shape, dtype=torch.float32):
    """An uninitialised host tensor in page-locked memory that GPU kernels can map."""
    nbytes = math.prod(shape) * torch.empty((), dtype=dtype).element_size()
    if nbytes < REGISTER_FROM_BYTES:
        return torch.empty(shape, dtype=dtype, pin_memory=True)
    values = torch.empty(shape, dtype=dtype)
    runtime = torch.cuda.cudart()
    error = runtime.cudaHostRegister(values.data_ptr(), nbytes, _HOST_REGISTER_MAPPED_PORTABLE)
    if int(error) != 0:
        raise AlacError(f"CUDA could not page-lock {_gib(nbytes)} of host memory (error {int(error)}): too little "
                        "host memory is free to hold the table there")
    weakref.finalize(values, runtime.cudaHostUnregister, values.data_ptr())
    return values


def pinned_copy(values):
    """values copied into page-locked host memory (pinned_empty)."""
    out = pinned_empty(values.shape, values.dtype)
    out.copy_(values)
    return out


class _MappedArray:
    """A pinned host tensor described as CUDA memory (its UVA address), kept alive with the view."""

    def __init__(self, host):
        self.host = host
        self.__cuda_array_interface__ = {"data": (host.data_ptr(), False), "shape": tuple(host.shape),
                                         "strides": None, "typestr": host.numpy().__array_interface__["typestr"],
                                         "version": 3}


def mapped_view(host, device):
    """host as a tensor on `device`: a GPU tensor over the same pinned pages when device is a GPU (its
    kernels gather and scatter rows over PCIe, no host thread or staging copy involved), else host."""
    if torch.device(device).type != "cuda" or host.device.type == "cuda":
        return host
    return torch.as_tensor(_MappedArray(host), device=device)


# GPU tables start at a multiple of 2 MiB: the async LR epoch was slower with w at some addresses, never
# at these (w moved alone under a trained plan; benchmarks/distributed.py's one-GPU queued arm, and
# flow.py's alac_async_hot, ran at the slower speed before)
TABLE_ALIGNMENT_BYTES = 2 << 20


def aligned_empty(shape, device, dtype=torch.float32):
    """An uninitialised tensor on `device` whose first value is TABLE_ALIGNMENT_BYTES-aligned on a GPU
    when it takes that much or more (a view into a block that much larger; a smaller table, or one
    elsewhere, is a plain tensor)."""
    size = torch.empty((), dtype=dtype).element_size()
    if torch.device(device).type != "cuda" or math.prod(shape) * size < TABLE_ALIGNMENT_BYTES:
        return torch.empty(shape, dtype=dtype, device=device)
    spare = TABLE_ALIGNMENT_BYTES // size
    block = torch.empty(math.prod(shape) + spare, dtype=dtype, device=device)
    start = (-block.data_ptr() % TABLE_ALIGNMENT_BYTES) // size
    return block[start:start + math.prod(shape)].view(shape)
