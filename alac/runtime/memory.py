"""Memory checks made before long work: tables sized by the feature space must fit where they go.

A layout and a model hold dense tables of the declared feature space (counts, the re-index maps,
params and optimizer state), so one stray id of 2,147,483,647 in a LIBSVM file asks for tens of
GiB. That is found here, before the tables are allocated, with the file, line and token of the
largest id.
"""

from __future__ import annotations

import os

import torch

from alac.errors import DataError

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
