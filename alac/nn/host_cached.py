"""alac.nn's tables beyond the GPU's memory: every row in host memory, the hot ones cached on the GPU
(PICASSO's HybridHash, §IV, for a SparseAggregate).

Each param and optimizer state lives whole in page-locked host memory, which GPU kernels read and write
through its mapped (UVA) address. The GPU holds the `hot` rows (the caller's choice: the deep trainer
takes the rows its training data reads most, FAE's static choice, since it counts the whole data before
it trains) and a staging area. A forward gives each of its batch's other rows a staging slot (one per
entry at most, found without a host read, so that a step replays from a CUDA graph), gathers those rows
from host memory there and points the entries at cache slots; the step trains the cache's rows as a
SparseAggregate trains its own, then writes the staged rows back. Every row has one current copy, so the
module trains as a SparseAggregate that holds every row on the GPU (tests/nn/test_host_cached.py, to
float tolerance). Its state_dict is the whole tables in the ids' order, as a SparseAggregate's:
checkpoints move between the two.
"""

from __future__ import annotations

import torch

from alac.errors import OptionError
from alac.nn.aggregate import SparseAggregate
from alac.runtime.device.memory import mapped_view, pinned_copy
from alac.runtime.execution.state import ModelState
from alac.runtime.rows.cache_remap import move_rows

# staging slots past the needed ones when the staging area grows (fewer re-allocations)
STAGING_MARGIN = 0.25
# programs of a step's row moves at most (one per block of rows: the move has the GPU to itself, where
# the wide models' moves beside a persistent kernel take MOVE_PROGRAMS; benchmarks/deep_host_tables.py)
STAGING_PROGRAMS = 1 << 16


class HostCachedAggregate(SparseAggregate):
    def __init__(self, model, n_features, hot, staging_rows=0, **options):
        """A SparseAggregate (model, n_features, options as there) whose rows live in host memory, the
        rows `hot` (distinct ids) cached on its device with `staging_rows` slots for a batch's other
        rows (one per entry at most: a batch's entries; grown when a batch has more, which a CUDA graph
        captured before must not meet)."""
        hot = torch.as_tensor(hot, dtype=torch.int64).cpu()
        if hot.dim() != 1 or (hot.numel() and (int(hot.min()) < 0 or int(hot.max()) >= n_features)) or \
                torch.unique(hot).numel() != hot.numel():
            raise OptionError(f"the cached rows are distinct ids in [0, {n_features:,}), got {hot.numel():,} ids")
        self.capacity = hot.numel()
        # the staging slots drawn as a valid row (row 0); a batch's rows overwrite them before any read
        placeholder = torch.zeros(max(0, int(staging_rows)), dtype=torch.int64)
        super().__init__(model, n_features, rows=torch.cat([hot, placeholder]), **options)
        device, dtype = self.table_device, getattr(self, self._params[0]).dtype
        # drawn straight into page-locked memory where the device is a GPU (its kernels reach it mapped;
        # no second copy of a table the size of the host's memory), else into host memory
        whole = ModelState.initial(model, torch.arange(self.n_features), device, options.get("seed", 0),
                                   self.ir.optimizer, host=self._params)
        narrow = pinned_copy if device.type == "cuda" else (lambda value: value)
        self._host = {name: value if value.dtype == dtype else narrow(value.to(dtype))
                      for name, value in whole.params.items()}
        self._host.update(whole.states)
        self._reachable = {name: mapped_view(value, device) for name, value in self._host.items()}
        self._hot = hot.to(device)
        # a row's cache slot (-1: in host memory); one spare entry past the rows takes the writes of
        # entries that have none to make
        self._slot_of = torch.full((self.n_features + 1,), -1, dtype=torch.int32, device=device)
        self._slot_of[self._hot] = torch.arange(self.capacity, dtype=torch.int32, device=device)
        for name in (*self._params, *self._states):
            getattr(self, name)[:self.capacity] = self._reachable[name][self._hot]
        self._staged = None         # the last forward's (indices, cache slots of its entries, rows it staged)
        # on the device (no host read): rows gathered from host memory and the entries they served
        self._counts = torch.zeros(2, dtype=torch.int64, device=device)
        self._entries = 0           # entries looked up

    @property
    def staged_rows(self):
        return int(self._counts[0])

    @property
    def staged_entries(self):
        return int(self._counts[1])

    @property
    def cached_entries(self):
        """Entries the hot rows served."""
        return self._entries - self.staged_entries

    def rows_for(self, indices):
        """The cache's tables with the batch's other rows staged in them, and its entries' slots."""
        slot, rows = self._slots(indices)
        self._stage(self._params, rows)
        self._staged = (indices, slot, rows)
        return self.state, slot

    def _slots(self, indices):
        """Every entry's cache slot, and per entry the row it stages (-1: none): a hot row's slot, else
        one staging slot per row, that of one of its entries (the slot past the hot ones at the entry's
        position; whichever entry's write lands), found with no host read, so that a step replays from
        a CUDA graph."""
        self._ensure_staging(indices.numel())
        slot_of = self._slot_of
        cold = slot_of[indices] < 0
        position = self.capacity + torch.arange(indices.numel(), dtype=torch.int32, device=indices.device)
        writes = torch.where(cold, indices, self.n_features)
        slot_of[writes] = position
        slot = slot_of[indices]
        rows = torch.where(cold & (slot == position), indices, -1)
        slot_of.index_fill_(0, writes, -1)      # (a scalar assigned by indexing copies from the host)
        self._counts += torch.stack([(rows >= 0).sum(), cold.sum()])
        self._entries += indices.numel()
        return slot.long(), rows

    def _step(self, indices, x, bag, deltas, samples):
        """SparseAggregate's step on the cache's rows, the staged ones written back to host memory."""
        if indices.numel() == 0:
            return
        last, slot, rows = self._staged or (None, None, None)
        if last is None or last.data_ptr() != indices.data_ptr() or last.shape != indices.shape:
            # a deferred step's entries (several forwards' joined): their rows staged again, unchanged
            slot, rows = self._slots(indices)
            self._stage(self._params, rows)
        # the optimizer's state staged only for a step (a forward reads the params)
        self._stage(self._states, rows)
        super()._step(slot, x, bag, deltas, samples)
        for name in (*self._params, *self._states):
            move_rows(self._reachable[name], getattr(self, name), rows, self.capacity, to_listed=True,
                      programs=STAGING_PROGRAMS)
        self._staged = None

    def _stage(self, names, rows):
        """The rows of the tables `names` that `rows` names (per staging slot, -1: none) copied from host
        memory into the staging slots."""
        for name in names:
            move_rows(self._reachable[name], getattr(self, name), rows, self.capacity, to_listed=False,
                      programs=STAGING_PROGRAMS)

    def _ensure_staging(self, rows):
        """The cache's tables grown to hold `rows` staging slots past the hot ones."""
        have = getattr(self, self._params[0]).shape[0] - self.capacity
        if rows <= have:
            return
        size = self.capacity + int(rows * (1 + STAGING_MARGIN))
        for name in (*self._params, *self._states):
            old = getattr(self, name)
            grown = old.new_zeros((size, *old.shape[1:]))
            grown[:self.capacity] = old[:self.capacity]
            self._buffers[name] = grown

    def whole(self, name):
        """A param's or optimizer state's every row in the ids' order (host memory)."""
        if self.table_device.type == "cuda":
            torch.cuda.synchronize(self.table_device)      # the write-backs queued on the device
        value = self._host[name].clone()
        value[self._hot.cpu()] = getattr(self, name)[:self.capacity].cpu()
        return value

    def _save_to_state_dict(self, destination, prefix, keep_vars):
        for name in (*self._params, *self._states):
            destination[prefix + name] = self.whole(name)

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                              error_msgs):
        names = (*self._params, *self._states)
        if self.table_device.type == "cuda":
            torch.cuda.synchronize(self.table_device)
        for name in names:
            key, host = prefix + name, self._host[name]
            if key not in state_dict:
                missing_keys.append(key)
                continue
            value = state_dict[key]
            if tuple(value.shape) != tuple(host.shape):
                error_msgs.append(f"size mismatch for {key}: a table of {tuple(value.shape)} given for one of "
                                  f"{tuple(host.shape)}")
                continue
            host.copy_(value)
            getattr(self, name)[:self.capacity] = value[self._hot.cpu()].to(self.table_device)
        if strict:
            unexpected_keys.extend(key for key in state_dict if key.startswith(prefix)
                                   and "." not in key[len(prefix):] and key[len(prefix):] not in names)
