"""Row-wise sharded tables: a model's feature rows (params and optimizer state) split over the ranks,
for tables larger than one GPU (data-parallel training keeps a copy of every row on every rank).

Rank r owns rows r, r + W, r + 2W, ... of the frequency order (round-robin, so that every rank owns
as many hot rows as the others), packed as one [owned rows, width] matrix of every param and state.
A segment of training gathers the rows its chunks touch (and the plan's hot segment, whose rows keep
their ids: the kernels sum gradients of ids below hot_size per program) from their owners with one
all-to-all, trains them on the rank's GPU with the generated kernels as a table of their own (the
segment's edges re-pointed at its rows, alac.runtime.cache_remap), and sends each row's change back
to its owner with a second all-to-all; the owner combines the ranks' changes of a row as the
replicated data-parallel trainer combines its all-reduced ones (alac.data_parallel's aggregations),
so that a sharded run is the replicated run of the same segments. The globals stay replicated and
are all-reduced. A rank holds its share of the rows plus the rows of its segment."""

from __future__ import annotations

import dataclasses

import torch

from alac.runtime.cache_remap import mark_touched, remap
from alac.runtime.state import ModelState

# rows gathered per piece when the whole table is assembled in host memory (checkpoints, snapshots):
# the device holds one piece at a time, not the table
ASSEMBLY_ROWS = 1 << 20


class RowShards:
    """Which rank owns which rows, and the two all-to-alls that move rows to their readers and their
    changes back to their owners."""

    def __init__(self, ranks, n_rows, device):
        self.ranks, self.n_rows = ranks, n_rows
        self.owned = torch.arange(ranks.rank, n_rows, ranks.world, device=device)

    def _route(self, rows):
        """(order of rows by owner, rows sent to each owner, rows each rank asks of this one, their
        local indices here) for sorted distinct rows."""
        world = self.ranks.world
        order = torch.argsort(rows % world, stable=True)
        send = torch.bincount(rows % world, minlength=world).tolist()
        receive = self.ranks.all_to_all(torch.tensor(send, dtype=torch.int64).view(-1, 1), [1] * world,
                                        [1] * world).view(-1).tolist()
        asked = self.ranks.all_to_all(rows[order] // world, send, receive)
        return order, send, receive, asked

    def gather(self, rows, table):
        """The rows (sorted distinct global ids) of every rank's table (this rank's: [owned, width]),
        and the route that scatter sends their changes back along."""
        order, send, receive, asked = self._route(rows)
        answered = self.ranks.all_to_all(table[asked], receive, send)
        values = torch.empty_like(answered)
        values[order] = answered
        return values, (order, send, receive, asked)

    def scatter(self, route, changes):
        """The changes of the gathered rows sent to their owners: (local indices here, [n, width]
        changes) from every rank, in rank order."""
        order, send, receive, asked = route
        return asked, self.ranks.all_to_all(changes[order], send, receive)


class ShardedExecutor:
    """An Executor over sharded rows: `working` (an Executor on the rank's GPU) trains each segment's
    gathered rows; the shard is this rank's rows. Answers as an Executor does where the Trainer asks
    (initialize, predict, sample_loss, state: the whole table assembled in host memory)."""

    # the whole state is assembled in host memory (snapshots check there is room)
    host_rows = True

    def __init__(self, working, ranks):
        self.working, self.ranks = working, ranks
        self.shards = self.table = self.globals = None
        self._columns = ()     # (name, "params" or "states", shape of a row) of the packed table's columns
        # (layout, its edge ids re-pointed at a segment's rows, rows' slots, touched marks) of the last two
        # layouts (training and validation): made once per layout, not per segment
        self._scratch = []

    def __getattr__(self, name):
        # what the Trainer reads of an executor (ir, plan, optimizer, seed, device, loss_sum, settings, ...)
        # is the working executor's
        return getattr(self.working, name)

    # counters the Trainer also sets (a restored snapshot's): the working executor's
    value_scale = property(lambda self: self.working.value_scale,
                           lambda self, value: setattr(self.working, "value_scale", value))
    batches_done = property(lambda self: self.working.batches_done,
                            lambda self, value: setattr(self.working, "batches_done", value))

    def _pack(self, state, rows=None):
        """Every param and state of a state as one [rows, width] matrix (of the rows given)."""
        values = [getattr(state, part)[name] for name, part, _ in self._columns]
        if rows is not None:
            values = [value[rows] for value in values]
        return torch.cat([value.reshape(value.shape[0], -1) for value in values], dim=1)

    def _unpack(self, table):
        """{"params": ..., "states": ...} of a packed matrix, each tensor a copy of its own (the
        kernels' layout; training them leaves the matrix as it was)."""
        parts, start = {"params": {}, "states": {}}, 0
        for name, part, row in self._columns:
            width = row[0] if row else 1
            parts[part][name] = table[:, start:start + width].reshape(-1, *row).clone(
                memory_format=torch.contiguous_format)
            start += width
        return parts

    @property
    def state(self):
        """Every row's state in host memory (None before initialize), assembled piece by piece."""
        if self.table is None:
            return None
        pieces = []
        for first in range(0, self.shards.n_rows, ASSEMBLY_ROWS):
            rows = torch.arange(first, min(first + ASSEMBLY_ROWS, self.shards.n_rows), device=self.device)
            pieces.append(self.shards.gather(rows, self.table)[0].cpu())
        parts = self._unpack(torch.cat(pieces))
        return ModelState(parts["params"], {k: v.cpu().clone() for k, v in self.globals.items()}, parts["states"])

    @state.setter
    def state(self, value):
        """A whole state (a snapshot, a checkpoint): this rank keeps its rows of it."""
        if value is None:
            self.table = self.globals = None
            return
        self._columns = tuple((name, part, tuple(tensor.shape[1:])) for part in ("params", "states")
                              for name, tensor in getattr(value, part).items())
        where = next(iter(value.params.values())).device
        self.table = self._pack(value, self.shards.owned.to(where)).to(self.device)
        self.globals = {k: v.to(self.device).clone() for k, v in value.globals.items()}

    def initialize(self, layout, value_scale=None):
        """Initial rows drawn as a one-device run draws them (in host memory, then this rank's kept)."""
        self.value_scale = layout.value_scale() if value_scale is None else value_scale
        self.shards = RowShards(self.ranks, layout.n_features, self.device)
        whole = ModelState.initial(self.working.model, layout.new_to_old, "cpu", self.seed, self.working.ir.optimizer)
        self.state = whole
        self.batches_done = 0

    # -- a segment's rows ---------------------------------------------------------------------------

    def _scratch_of(self, layout):
        found = next((entry for entry in self._scratch if entry[0] is layout), None)
        if found is None:
            found = (layout, torch.full_like(layout.edge_feature, -1),
                     torch.full((layout.n_features,), -1, dtype=torch.int32, device=self.device),
                     torch.zeros(layout.n_features, dtype=torch.uint8, device=self.device))
            self._scratch = [*self._scratch[-1:], found]
        return found

    def _rows_of(self, layout, chunks):
        """The rows the chunks touch and the plan's hot segment, sorted."""
        seen = self._scratch_of(layout)[3]
        mark_touched(layout, chunks, seen)
        seen[:min(self.plan.hot_size, layout.n_features)] = 1
        rows = torch.nonzero(seen).squeeze(1)
        seen.zero_()
        return rows

    def _working_layout(self, layout, chunks, rows):
        """The layout with the chunks' edges re-pointed at the rows' positions in `rows`."""
        _, edges, slot_of, _ = self._scratch_of(layout)
        slot_of[rows] = torch.arange(rows.numel(), dtype=torch.int32, device=self.device)
        remap(layout, chunks, slot_of, edges, rows.numel(), self.plan.chunks_per_batch)
        slot_of[rows] = -1
        return dataclasses.replace(layout, edge_feature=edges, n_features=rows.numel())

    def _gathered(self, layout, chunks):
        rows = self._rows_of(layout, chunks)
        values, route = self.shards.gather(rows, self.table)
        parts = self._unpack(values)
        self.working.state = ModelState(parts["params"], self.globals, parts["states"])
        return rows, values, route, self._working_layout(layout, chunks, rows)

    def train_segment(self, layout, labels, epoch, lr, chunks, factors):
        """Train the chunks (whole batches of the layout's chunk order) on their gathered rows and
        combine the ranks' changes at the rows' owners; factors(movers) gives what the summed changes
        are multiplied by ({"rows": a float or [owned] tensor, "global": a float}; movers: how many
        ranks changed each owned row). Returns the ranks' summed loss of the segment (a device scalar)."""
        rows, before, route, working_layout = self._gathered(layout, chunks)
        globals_before = {k: v.clone() for k, v in self.globals.items()}
        self.working.queue_epoch(working_layout, labels, epoch, lr, chunks)
        after = self._pack(self.working.state)
        asked, changes = self.shards.scatter(route, after - before)
        summed = torch.zeros_like(self.table).index_add_(0, asked, changes)
        # the ranks that changed each row, by its first param's columns (as the replicated trainer counts)
        first = self._columns[0][2][0] if self._columns[0][2] else 1
        movers = torch.zeros(self.table.shape[0], device=self.device).index_add_(
            0, asked, (changes[:, :first] != 0).any(dim=1).float())
        flat = torch.cat([*(self.working.state.globals[k] - globals_before[k] for k in self.globals),
                          self.working.loss_sum.reshape(1)])
        reduced = self.ranks.all_reduce(flat, in_place=True)
        factor = factors(movers)
        if isinstance(factor["rows"], torch.Tensor):
            self.table.addcmul_(summed, factor["rows"].view(-1, 1))
        else:
            self.table.add_(summed, alpha=factor["rows"])
        for (name, value), change in zip(self.globals.items(), reduced[:-1]):
            torch.add(globals_before[name], change, alpha=factor["global"], out=value)
        return reduced[-1]

    def sample_loss(self, layout, labels, max_rows=4096):
        """The divergence guard's loss of the first chunks of the epoch-0 order, on their gathered rows."""
        chunks = layout.chunk_order(0, self.seed)[:max(1, max_rows // layout.chunk_size)]
        *_, working_layout = self._gathered(layout, chunks)
        return self.working.sample_loss(working_layout, labels, max_rows)

    def predict(self, layout):
        """Predictions of a layout's rows from the rows it touches (gathered once)."""
        chunks = torch.arange(layout.n_chunks, device=self.device)
        *_, working_layout = self._gathered(layout, chunks)
        return self.working.predict(working_layout)
