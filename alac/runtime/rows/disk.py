"""Rows in memory-mapped files on local disk behind the HybridHash cache: a model larger than host
memory (FBGEMM's SSD table is the anchor). The cache on the GPU is HybridHash's (alac.runtime.rows.
hybrid_hash), its segments and re-ranks unchanged; the table it loads misses from and writes rows back
to is a file per param and optimizer state instead of pinned host memory. A row crosses as the CPU
gathers it from the file's mapping (the OS pages it in) and copies it to the GPU, and back; the host
holds no more of the table than the page cache keeps. Predictions, the divergence guard's sample and
checkpoints read the files through the same executor (the reference executor on the CPU), so every
row has one current copy and the parameters are those of an all-GPU run of the same batches.

The files live in a folder of Plan.rows_folder (the system's temporary folder by default) named with
the process id (alac.temporary): a later run removes those whose process died.
"""

from __future__ import annotations

import shutil
import tempfile
import weakref
from pathlib import Path

import numpy as np
import torch

from alac.errors import OptionError
from alac.runtime.execution.executor import Executor
from alac.runtime.execution.state import ModelState
from alac.runtime.rows.cached_executor import CachedExecutor
from alac.runtime.rows.hybrid_hash import HybridHash
from alac.temporary import remove_stale_folders, temporary_folder_name

# rows drawn into the files (or copied into them from a restored state) at a time
PIECE_ROWS = 1 << 20
FOLDER_NAME = "alac-rows"


def rows_folder(parent):
    """A new folder for one table's files under parent (None: the system's temporary folder), those of
    dead processes removed first; it is removed when the table is."""
    parent = Path(parent or tempfile.gettempdir())
    parent.mkdir(parents=True, exist_ok=True)
    remove_stale_folders(parent, FOLDER_NAME)
    folder = parent / temporary_folder_name(FOLDER_NAME)
    folder.mkdir()
    return folder


class FileTable(Executor):
    """The reference executor on the CPU over a state whose params and optimizer states are
    memory-mapped files: what HybridHash calls its host table (`whole`)."""

    def __init__(self, model, plan, seed, optimizer, schedule, exact_l2, parent):
        super().__init__(model, plan, "reference", "cpu", seed, optimizer, schedule, exact_l2)
        self.parent = parent
        self.folder = None

    def _files(self, shapes):
        """Empty file-backed tensors of these {name: (part, shape)}, in a new folder (the old one gone)."""
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)
        self.folder = rows_folder(self.parent)
        weakref.finalize(self, shutil.rmtree, self.folder, True)
        need = sum(4 * int(np.prod(shape)) for _, shape in shapes.values())
        free = shutil.disk_usage(self.folder).free
        if need > free:
            raise OptionError(f"the model's rows take {need / 2**30:,.1f} GiB on disk and {self.folder.parent} has "
                              f"{free / 2**30:,.1f} GiB free: give --rows-dir a folder with room")
        tables = {"params": {}, "states": {}}
        for name, (part, shape) in shapes.items():
            array = np.lib.format.open_memmap(self.folder / f"{name}.npy", mode="w+", dtype=np.float32, shape=shape)
            tables[part][name] = torch.from_numpy(array)
        return tables

    def initialize(self, layout, value_scale=None):
        """Every row drawn into the files, piece by piece, as ModelState.initial draws it in memory."""
        self.value_scale = layout.value_scale() if value_scale is None else value_scale
        n = layout.n_features
        first = ModelState.initial(self.model, layout.new_to_old, "cpu", self.seed, self.ir.optimizer,
                                   rows=torch.arange(min(n, 1)))
        shapes = {name: ("params", (n, *values.shape[1:])) for name, values in first.params.items()}
        shapes.update({name: ("states", (n, *values.shape[1:])) for name, values in first.states.items()})
        tables = self._files(shapes)
        for start in range(0, n, PIECE_ROWS):
            piece = ModelState.initial(self.model, layout.new_to_old, "cpu", self.seed, self.ir.optimizer,
                                       rows=torch.arange(start, min(start + PIECE_ROWS, n)))
            for part in ("params", "states"):
                for name, values in getattr(piece, part).items():
                    tables[part][name][start:start + values.shape[0]] = values
        self.state = ModelState(tables["params"], first.globals, tables["states"])
        self.batches_done = 0

    def take(self, state):
        """Make a restored state (a checkpoint's, a snapshot's) this table's, copied into new files."""
        tables = self._files({**{k: ("params", tuple(v.shape)) for k, v in state.params.items()},
                              **{k: ("states", tuple(v.shape)) for k, v in state.states.items()}})
        for part in ("params", "states"):
            for name, values in getattr(state, part).items():
                for start in range(0, values.shape[0], PIECE_ROWS):
                    tables[part][name][start:start + PIECE_ROWS] = values[start:start + PIECE_ROWS].cpu()
        self.state = ModelState(tables["params"], {k: v.to("cpu", copy=True) for k, v in state.globals.items()},
                                tables["states"])


class DiskHash(HybridHash):
    """HybridHash over a FileTable: rows load and store through the CPU (the GPU cannot map a file)."""

    def _tensors(self):
        """(file-backed table, cache) per param and state."""
        whole, working = self.whole.state, self.working.state
        return [(whole.params[k], working.params[k]) for k in whole.params] + \
               [(whole.states[k], working.states[k]) for k in whole.states]

    def _load(self, rows, slots):
        ids = rows.cpu()
        real = ids >= 0
        ids = ids[real]
        for table, cache in self._tensors():
            values = table[ids].to(cache.device)
            if isinstance(slots, slice):
                cache[slots.start:slots.start + rows.numel()][real.to(cache.device)] = values
            else:
                cache[slots[real.to(slots.device)]] = values
        self.statistics.rows_in += ids.numel()

    def _store(self, rows, slots, traffic=True):
        ids = rows.cpu()
        real = ids >= 0
        for table, cache in self._tensors():
            values = (cache[slots.start:slots.start + rows.numel()] if isinstance(slots, slice) else cache[slots]).cpu()
            table[ids[real]] = values[real]
        if traffic:
            self.statistics.rows_out += int(real.sum())


class DiskRows(CachedExecutor):
    kind = "disk"
    # the table is larger than host memory: no copy of it is made there (no divergence snapshots)
    snapshots = False

    def __init__(self, model, plan, backend, device, seed, optimizer, schedule, exact_l2, placement):
        super().__init__(model, plan, backend, device, seed, optimizer, schedule, exact_l2, placement)
        self.whole = FileTable(model, self.whole.plan, seed, optimizer, schedule, exact_l2, plan.rows_folder)
        self.cache = DiskHash(self.whole, self.working, placement.shape)

    def _take(self, value):
        """A restored state goes into new files (a snapshot or a checkpoint is in memory, not mapped)."""
        if value is None:
            self.whole.state = None
            return
        self.whole.take(value)
        if self._initialized:
            self._restored()

    state = CachedExecutor.state.setter(_take)

    def sample_loss(self, layout, labels, max_rows=4096):
        return self._current().sample_loss(layout.to("cpu"), labels.cpu(), max_rows)

    def predict_slots(self, layout, labels=None):
        return self._current().predict_slots(layout.to("cpu"), None if labels is None else labels.cpu()).to(
            self.device)

    def predict(self, layout):
        return self._current().predict(layout.to("cpu")).to(self.device)
