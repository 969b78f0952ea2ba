"""Where a field model's tables live in one process: on its GPU, or, where they are larger than the
GPU's budget for them, in host memory with the most-read rows cached on the GPU (alac.nn.host_cached,
PICASSO's HybridHash with the hot rows chosen from the training data's counts, as FAE chooses them)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from alac.errors import OptionError
from alac.runtime.device.memory import available_bytes
from alac.train.deep_ranks import TABLE_SHARE

# the cache's map from a row to its slot: an int32 per row of the table, on the GPU
SLOT_BYTES = 4


@dataclass(frozen=True)
class TableMemory:
    """hot: the ids cached on the GPU, the rows in host memory (None: every row on the GPU);
    staging_rows: the cache's slots for a step's other rows; reason: why, for the run's output."""

    hot: torch.Tensor | None
    staging_rows: int
    reason: str

    def describe(self):
        if self.hot is None:
            return f"tables on the GPU ({self.reason})"
        return f"tables in host memory, {self.hot.numel():,} rows cached on the GPU ({self.reason})"


def plan_table_memory(indices, n_features, row_bytes, step_entries, budget, device):
    """The TableMemory of a table of n_features rows of row_bytes (params and optimizer state) whose
    training entries are `indices` (None: unknown, a restored model's: the first ids are cached);
    step_entries: the most entries a step takes; budget: bytes the tables may take on the GPU (None:
    TABLE_SHARE of its free memory; off a GPU none applies unless given)."""
    table = n_features * row_bytes
    if budget is None:
        free = available_bytes(device) if torch.device(device).type == "cuda" else None
        if free is None:
            return TableMemory(None, 0, "no GPU budget")
        budget, why = int(TABLE_SHARE * free), f"{TABLE_SHARE:.0%} of the GPU's free memory"
    else:
        why = "the GPU budget given"
    if table <= budget:
        return TableMemory(None, 0, f"{table:,} bytes of rows within {why}, {budget:,} bytes")
    # a cached row: its params and state, and the step's gradient buffer (at most as large); the
    # staging slots of one step's rows the same
    per_row = 2 * row_bytes
    capacity = (budget - SLOT_BYTES * n_features) // per_row - step_entries
    if capacity < 0:
        need = SLOT_BYTES * n_features + per_row * step_entries
        raise OptionError(f"a GPU budget of {budget:,} bytes cannot hold the host tables' cache: its map of "
                          f"{n_features:,} rows and one step's {step_entries:,} rows take {need:,} bytes; give the "
                          "tables more (--gpu-memory) or take smaller batches")
    capacity = min(capacity, n_features)
    if indices is None:
        hot, served = torch.arange(capacity), "no access counts (a restored model)"
    else:
        counts = torch.bincount(indices.long(), minlength=n_features).cpu()
        hot = torch.argsort(counts, descending=True, stable=True)[:capacity]
        share = float(counts[hot].sum()) / max(1, int(counts.sum()))
        served = f"the most read, {share:.1%} of the training entries"
    return TableMemory(hot, step_entries, f"{table:,} bytes of rows exceed {why}, {budget:,} bytes; {served}")
