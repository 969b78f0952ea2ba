"""Row-wise sharded tables: a model's feature rows (params and optimizer state) split over the ranks,
for tables larger than one GPU (data-parallel training keeps a copy of every row on every rank).

Rank r owns rows r, r + W, r + 2W, ... of the frequency order (round-robin, so that every rank owns
as many hot rows as the others), packed as one [owned rows, width] matrix of every param and state.
A segment of training gathers the rows its chunks touch (and the plan's hot segment, whose rows keep
their ids: the kernels sum gradients of ids below hot_size per program) from their owners with one
all-to-all, trains them on the rank's GPU with the generated kernels as a table of their own (the
segment's edges re-pointed at its rows, alac.runtime.rows.cache_remap), and sends each row's change back
to its owner with a second all-to-all; the owner combines the ranks' changes of a row as the
replicated data-parallel trainer combines its all-reduced ones (alac.train.data_parallel's aggregations),
so that a sharded run is the replicated run of the same segments. The globals stay replicated and
are all-reduced. A rank holds its share of the rows plus the rows of its segment.

PICASSO's hybrid (replicate_hot): the hot segment's rows, which nearly every segment reads, are
replicated on every rank and their changes all-reduced, only the cold rows sharded and moved by the
all-to-alls."""

from __future__ import annotations

import contextlib
import dataclasses
import math

import torch

from alac.errors import OptionError
from alac.runtime.device.memory import available_bytes
from alac.runtime.execution.epoch import Segment
from alac.runtime.execution.state import DRAW_ROWS, ModelState
from alac.runtime.rows.cache_remap import mark_touched, remap
from alac.runtime.rows.store import RowStore

# rows gathered per piece when the whole table is assembled in host memory (checkpoints, snapshots):
# the device holds one piece at a time, not the table
ASSEMBLY_ROWS = 1 << 20
# copies of a segment's rows on the device while it trains: gathered, the working state, its packed
# form after training, and their change
SEGMENT_COPIES = 4
# a segment's distinct rows vary around their expectation (segment_batches): room for a quarter more
SEGMENT_ROWS_MARGIN = 1.25


def expected_rows(frequency, edges):
    """The expected distinct rows among `edges` edges drawn as a layout's edges fall (row r with
    probability frequency[r] / all edges): sum_r 1 - (1 - p_r)^edges."""
    p = frequency.double() / max(float(frequency.sum()), 1.0)
    return float(-torch.expm1(edges * torch.log1p(-p.clamp(max=1 - 1e-12))).sum())


def segment_batches(frequency, edges_per_batch, batches, max_rows, fixed_rows=0):
    """The most batches (up to `batches`) a segment may hold for fixed_rows plus its expected distinct
    rows, with SEGMENT_ROWS_MARGIN, to stay within max_rows; 0 when one batch does not."""
    def fits(count):
        return fixed_rows + SEGMENT_ROWS_MARGIN * expected_rows(frequency, count * edges_per_batch) <= max_rows

    if not fits(1):
        return 0
    low, high = 1, max(1, batches)
    while low < high:
        middle = (low + high + 1) // 2
        low, high = (middle, high) if fits(middle) else (low, middle - 1)
    return low


class RowShards:
    """Which rank owns which rows, and the two all-to-alls that move rows to their readers and their
    changes back to their owners."""

    def __init__(self, ranks, n_rows, device, first=0):
        """Rows first .. n_rows - 1 sharded (those before it are not: replicated hot rows): rank r owns
        rows first + r, first + r + world, ..."""
        self.ranks, self.n_rows, self.first, self.device = ranks, n_rows, first, device
        self.count = len(range(first + ranks.rank, n_rows, ranks.world))   # the rows this rank owns

    def global_ids(self, local):
        """The global ids of this rank's rows at local indices (a tensor)."""
        return self.first + self.ranks.rank + local * self.ranks.world

    @property
    def owned(self):
        """Every row this rank owns, ascending: made when asked (a tensor of them, kept, took 4.3 GB a rank
        of 2.1 billion rows over 4)."""
        return self.global_ids(torch.arange(self.count, device=self.device))

    def _route(self, rows):
        """(order of rows by owner, rows sent to each owner, rows each rank asks of this one, their
        local indices here) for sorted distinct rows."""
        world = self.ranks.world
        offset = rows - self.first
        order = torch.argsort(offset % world, stable=True)
        send = torch.bincount(offset % world, minlength=world).tolist()
        receive = self.ranks.all_to_all(torch.tensor(send, dtype=torch.int64).view(-1, 1), [1] * world,
                                        [1] * world).view(-1).tolist()
        asked = self.ranks.all_to_all(offset[order] // world, send, receive)
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


def _columns_of(state):
    """(name, "params" or "states", shape of a row) of each tensor of a state: a packed table's columns."""
    return tuple((name, part, tuple(tensor.shape[1:])) for part in ("params", "states")
                 for name, tensor in getattr(state, part).items())


@dataclasses.dataclass(frozen=True)
class ShardSnapshot:
    """One rank's rows and the globals, copied to host memory (the Trainer's in-memory snapshots of a
    sharded model: each rank keeps its own, no rank the whole table)."""

    table: torch.Tensor
    hot_table: torch.Tensor
    globals: dict


class ShardedExecutor(RowStore):
    """An Executor over sharded rows: `working` (an Executor on the rank's GPU) trains each segment's
    gathered rows; the shard is this rank's rows. Answers as an Executor does where the Trainer asks
    (initialize, predict, sample_loss, state: the whole table assembled in host memory)."""

    # the whole state is assembled in host memory (snapshots check there is room)
    host_rows = True
    sharded = True

    def __init__(self, working, ranks, replicate_hot=False):
        """replicate_hot: the plan's hot segment replicated on every rank (PICASSO's hybrid)."""
        self.working, self.ranks, self.replicate_hot = working, ranks, replicate_hot
        self.kind = "hybrid" if replicate_hot else "sharded"
        self.shards = self.table = self.globals = None
        self.hot, self.hot_table = 0, None     # replicated rows 0 .. hot - 1, packed
        self.sync_chunks, self.factors = None, None   # synchronise
        self._whole = None                     # the whole state, while assembled() holds it
        self._columns = ()     # (name, "params" or "states", shape of a row) of the packed table's columns
        # _scratch_of's entries of the last two layouts (training and validation), not made per segment
        self._scratch = []

    def __getattr__(self, name):
        # what the Trainer reads of an executor (ir, plan, optimizer, seed, device, loss_sum, settings, ...)
        # is the working executor's (none before __init__ made it: copies and unpickling ask first)
        if name == "working":
            raise AttributeError(name)
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
        return torch.cat([value.reshape(value.shape[0], math.prod(row)) for value, (_, _, row)
                          in zip(values, self._columns)], dim=1)

    def _unpack(self, table):
        """{"params": ..., "states": ...} of a packed matrix, each tensor a copy of its own (the
        kernels' layout; training them leaves the matrix as it was)."""
        parts, start = {"params": {}, "states": {}}, 0
        for name, part, row in self._columns:
            width = math.prod(row)
            parts[part][name] = table[:, start:start + width].reshape(-1, *row).clone(
                memory_format=torch.contiguous_format)
            start += width
        return parts

    @property
    def state(self):
        """Every row's state in host memory (None before initialize), assembled piece by piece by every
        rank together (inside assembled(), the one it holds)."""
        if self._whole is not None:
            return self._whole
        if self.table is None:
            return None
        pieces = [self.hot_table.cpu()]
        for first in range(self.hot, self.shards.n_rows, ASSEMBLY_ROWS):
            rows = torch.arange(first, min(first + ASSEMBLY_ROWS, self.shards.n_rows), device=self.device)
            pieces.append(self.shards.gather(rows, self.table)[0].cpu())
        parts = self._unpack(torch.cat(pieces))
        return ModelState(parts["params"], {k: v.cpu().clone() for k, v in self.globals.items()}, parts["states"])

    @state.setter
    def state(self, value):
        """A whole state (a checkpoint's) or this rank's ShardSnapshot: this rank keeps its rows of it."""
        if value is None:
            self.table = self.globals = None
            return
        if isinstance(value, ShardSnapshot):
            self.table, self.hot_table = value.table.to(self.device), value.hot_table.to(self.device)
            self.globals = {k: v.to(self.device).clone() for k, v in value.globals.items()}
            return
        self._columns = _columns_of(value)
        first = next(iter(value.params.values()))
        if self.shards is None or self.shards.n_rows != first.shape[0]:
            # a state of a table not initialized here (a checkpoint's): its rows shared out as initialize does
            self._share_rows(first.shape[0])
        where = first.device
        self.hot_table = self._pack(value, torch.arange(self.hot, device=where)).to(self.device)
        self.table = self._pack(value, self.shards.owned.to(where)).to(self.device)
        self.globals = {k: v.to(self.device).clone() for k, v in value.globals.items()}

    def has_state(self):
        """Whether this rank holds its rows (initialized or given a state), without assembling them."""
        return self.table is not None

    def held_bytes(self):
        """The bytes of the rows this rank holds (its shard and the replicated hot rows)."""
        return sum(t.numel() * t.element_size() for t in (self.table, self.hot_table))

    def snapshot(self):
        """This rank's rows and the globals in host memory (ShardSnapshot), copied once."""
        def copied(tensor):
            return tensor.to("cpu", copy=True)
        return ShardSnapshot(copied(self.table), copied(self.hot_table),
                             {k: copied(v) for k, v in self.globals.items()})

    def finite(self, piece_values):
        """Whether every row and global is finite, on every rank (sums of pieces of piece_values, no
        mask the size of the table)."""
        local = all(bool(torch.isfinite(piece.sum())) for table in (self.table, self.hot_table, *self.globals.values())
                    for piece in table.reshape(-1).split(piece_values))
        return float(self.ranks.all_reduce(torch.tensor([float(not local)], device=self.device), op="max")[0]) == 0

    @contextlib.contextmanager
    def assembled(self):
        """The whole state assembled once, by every rank together: inside, reading it (a checkpoint,
        parameters(), predictions) needs no other rank, so that one rank alone may write the outputs."""
        self._whole = self.state
        try:
            yield self._whole
        finally:
            self._whole = None

    def _share_rows(self, n_rows):
        self.hot = min(self.plan.hot_size, n_rows) if self.replicate_hot else 0
        self.shards = RowShards(self.ranks, n_rows, self.device, first=self.hot)

    def initialize(self, layout, value_scale=None):
        """The hot rows and this rank's share of the others, drawn as a one-device run draws them, piece
        by piece on this rank's device (the whole table may exceed every GPU and the host's memory over
        the ranks)."""
        self.value_scale = layout.value_scale() if value_scale is None else value_scale
        self._share_rows(layout.n_features)
        self.batches_done = 0
        model, optimizer = self.working.model, self.working.ir.optimizer
        if layout.n_features <= DRAW_ROWS:
            # one CPU generator draws such a table whole (no row alone): it fits host memory
            self.state = ModelState.initial(model, layout.new_to_old, "cpu", self.seed, optimizer)
            return
        hot = ModelState.initial(model, layout.new_to_old, self.device, self.seed, optimizer,
                                 rows=torch.arange(self.hot))
        self._columns = _columns_of(hot)
        self.hot_table, self.globals = self._pack(hot), hot.globals
        count = self.shards.count
        self.table = torch.empty(count, self.hot_table.shape[1], device=self.device)
        for first in range(0, count, ASSEMBLY_ROWS):
            rows = self.shards.global_ids(torch.arange(first, min(first + ASSEMBLY_ROWS, count), device=self.device))
            self.table[first:first + rows.numel()] = self._pack(ModelState.initial(
                model, layout.new_to_old, self.device, self.seed, optimizer, rows=rows))

    # -- a segment's rows ---------------------------------------------------------------------------

    def _scratch_of(self, layout):
        """(layout, its edge ids re-pointed at a segment's rows, rows' slots, touched marks): the edge
        ids made once per layout (the last two: training and validation), the two per-row tensors once
        for every layout of the feature space (a pair per layout took 10.6 GB a rank more on the
        2.1-billion-row placement run, benchmarks/distributed.py --parts placement)."""
        found = next((entry for entry in self._scratch if entry[0] is layout), None)
        if found is None:
            shared = next((entry[2:] for entry in self._scratch if entry[2].numel() == layout.n_features), None)
            if shared is None:
                shared = (torch.full((layout.n_features,), -1, dtype=torch.int32, device=self.device),
                          torch.zeros(layout.n_features, dtype=torch.uint8, device=self.device))
            found = (layout, torch.full_like(layout.edge_feature, -1), *shared)
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

    def _gathered(self, layout, chunks, training=False):
        """The rows of the chunks: (their values, the cold ones' route, the working layout), the
        working executor's state made of the values (the replicated hot rows, then the gathered ones;
        inside assembled(), all of them from the whole state, with no route); training: checked to fit
        first (a segment of fewer rows is the cure)."""
        rows = self._rows_of(layout, chunks)
        if training:
            self._check_fits(rows.numel())
        if self._whole is not None:
            values, route = self._pack(self._whole, rows.cpu()).to(self.device), None
        else:
            gathered, route = self.shards.gather(rows[self.hot:], self.table)
            values = torch.cat([self.hot_table, gathered])
        parts = self._unpack(values)
        self.working.state = ModelState(parts["params"], self.globals, parts["states"])
        return values, route, self._working_layout(layout, chunks, rows)

    def _check_fits(self, rows):
        """An OptionError on every rank, before any allocation, when a segment's rows do not fit a
        rank's free device memory (all ranks stop together: one alone would leave the others waiting in
        the next collective)."""
        need = SEGMENT_COPIES * rows * self.table.shape[1] * self.table.element_size()
        free = available_bytes(self.device)
        short = torch.tensor([float(free is not None and need > free)], device=self.device)
        if self.ranks.all_reduce(short, op="max")[0] > 0:
            raise OptionError(f"a segment touches {rows:,} parameter rows here, {need / 2**30:,.1f} GiB on "
                              f"{self.device} while it trains, more than a rank's free memory: synchronise more often "
                              "(sync_every, --sync-every) so that a segment touches fewer rows")

    def synchronise(self, chunks, factors):
        """Train epochs in segments of `chunks` chunks of their order (None: the whole epoch), the ranks'
        changes combined after each; factors(movers, share, rows) gives what the summed changes of rows
        are multiplied by ({"rows": a float or a tensor of one per row, "global": a float}; movers: how
        many ranks changed each of the rows; share: the segment's share of the epoch's chunks)."""
        self.sync_chunks, self.factors = chunks, factors

    def segments(self, layout, labels, epoch, lr, order=None):
        """The row store's generator of an epoch's segments (alac.runtime.execution.epoch): each run of
        sync_chunks chunks trains on its gathered rows, and the ranks' changes are combined at the rows'
        owners (the replicated hot rows' by an all-reduce). Returns the ranks' summed loss (a device
        scalar)."""
        order = layout.chunk_order(epoch, self.seed) if order is None else order
        loss = torch.zeros((), dtype=torch.float64, device=self.device)
        for chunks in (order,) if self.sync_chunks is None else order.split(self.sync_chunks):
            share = chunks.numel() / order.numel()
            before, route, working_layout = self._gathered(layout, chunks, training=True)
            globals_before = {k: v.clone() for k, v in self.globals.items()}
            yield Segment(self.working, working_layout, labels, epoch, lr, chunks=chunks)
            loss += self._combine(before, route, globals_before,
                                  lambda movers, rows, share=share: self.factors(movers, share, rows))
        return loss

    def _combine(self, before, route, globals_before, factors):
        """The ranks' changes of a trained segment combined at the rows' owners; returns the ranks'
        summed loss of the segment."""
        change = self._pack(self.working.state) - before
        asked, changes = self.shards.scatter(route, change[self.hot:])
        # sums over the rows asked for only: one of the whole shard doubled its memory (37.6 GiB a rank
        # in benchmarks/distributed.py's placement run)
        touched, position = torch.unique(asked, return_inverse=True)
        summed = changes.new_zeros(touched.numel(), changes.shape[1]).index_add_(0, position, changes)
        movers = changes.new_zeros(touched.numel()).index_add_(0, position, self._moved(changes))
        hot = change[:self.hot]
        flat = torch.cat([hot.reshape(-1), self._moved(hot),
                          *(self.globals[k] - globals_before[k] for k in self.globals),
                          self.working.loss_sum.reshape(1)])
        reduced = self.ranks.all_reduce(flat, in_place=True)
        hot_summed, hot_movers, global_changes = reduced[:hot.numel()].view_as(hot), \
            reduced[hot.numel():hot.numel() + self.hot], reduced[hot.numel() + self.hot:-1]
        # in place, the touched rows distinct: no copy of them
        self.table.index_add_(0, touched, _scaled(summed, factors(movers, self.shards.global_ids(touched))["rows"]))
        factor = factors(hot_movers, torch.arange(self.hot, device=self.device))
        self.hot_table.add_(_scaled(hot_summed, factor["rows"]))
        # every sample moves the globals: their factor is the same whichever rows the factors were of
        for (name, value), moved in zip(self.globals.items(), global_changes):
            torch.add(globals_before[name], moved, alpha=factor["global"], out=value)
        return reduced[-1]

    def _moved(self, changes):
        """1 for each row whose first param changed (the rows a rank moved, as the replicated trainer
        counts them), else 0."""
        first = math.prod(self._columns[0][2])
        return (changes[:, :first] != 0).any(dim=1).float()

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


def _scaled(summed, factor):
    """The summed changes times their factor: a float, or one per row (scaled in place)."""
    if isinstance(factor, torch.Tensor):
        return summed.mul_(factor.view(-1, 1))
    return summed.mul_(factor)
