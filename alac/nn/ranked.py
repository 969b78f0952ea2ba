"""alac.nn's tables over ranks, PICASSO's hybrid parallelism (§III-B): a SparseAggregate's rows
replicated on every rank, sharded row-wise over them, or hybrid (the hot rows replicated, the cold
ones sharded); the dense part trains data-parallel beside them (DDP, or alac.train.deep_ranks.GradientMean).

Ids below `replicated` (the hot rows, first in the ranks' numbering `order`) are held by every rank;
id g >= replicated by rank (g - replicated) % W alone, at its local row replicated + (g -
replicated) // W (round-robin, so every rank owns as many warm rows as the others). A forward
fetches the sharded rows of a batch's entries from their owners (an all-to-all of ids, one of rows).
The backward sends each entry's value and dLoss/dAccum to the ranks that hold its row (every rank
for a replicated row, by one all-gather; its owner for a sharded one, by one all-to-all), and each
rank steps its rows once on all it received, as one batch of every rank's samples: the step one
process takes on the global batch. Every exchange moves fixed slots (`capacity` entries per rank and
destination, padding sent to a scratch row past the held ones), so a step waits for no count on the
host where the trainer gives the capacity and the global batch (entry_capacity, global_samples). The
ranks' losses combine as DDP combines gradients (the objective is their mean), so each rank's
dLoss/dAccum counts 1/W. A replicated row takes the same step on every rank, but float atomics on a
GPU may round it apart: align() copies rank 0's replicated rows to the others (the trainer calls it
after every epoch).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from alac.errors import OptionError
from alac.nn.aggregate import SparseAggregate, _values
from alac.runtime.execution.state import ModelState

# a padding slot's id: its row is the scratch row, which no entry reads
PADDING = -1
# scratch rows past the held ones that padding slots are spread over (one row took every padding
# entry's atomic additions in turn: benchmarks/deep_ranks.py, alac_sharded)
SCRATCH_ROWS = 1024


@dataclass(frozen=True)
class RankRows:
    """Which of a table's n_features rows rank `rank` of `world` holds: ids below `replicated` (every
    rank's) and its round-robin share of the others."""

    n_features: int
    replicated: int
    rank: int
    world: int

    def __post_init__(self):
        if not (0 <= self.replicated <= self.n_features and 0 <= self.rank < self.world):
            raise OptionError(f"a rank's rows need 0 <= replicated <= n_features and 0 <= rank < world, got {self}")

    @property
    def mode(self):
        return "replicated" if self.replicated == self.n_features else "sharded" if self.replicated == 0 else "hybrid"

    def owned_ids(self, rank=None):
        """The sharded rows' ids that `rank` (default this one) owns, in its local order."""
        first = self.replicated + (self.rank if rank is None else rank)
        return torch.arange(min(first, self.n_features), self.n_features, self.world)

    def held_ids(self):
        """The ids of this rank's local rows, in order: the replicated ones, then its own."""
        return torch.cat([torch.arange(self.replicated), self.owned_ids()])

    def owner(self, ids):
        return torch.remainder(ids - self.replicated, self.world)

    def local(self, ids):
        """Local rows of ids this rank holds."""
        return torch.where(ids < self.replicated, ids,
                           self.replicated + torch.div(ids - self.replicated, self.world, rounding_mode="floor"))


@dataclass(frozen=True)
class ExchangeShape:
    """What a table's exchanges move per entry: its row's param values (param_width of param_dtype)
    and its payload (value and dLoss/dAccum: payload_width float32)."""

    param_width: int
    param_dtype: torch.dtype
    payload_width: int


def payload_width(ir):
    """An entry's payload in a backward exchange: its value and its bag's dLoss/dAccum."""
    return 1 + sum(ir.factor_size if a.vector else 1 for a in ir.accums)


def step_exchanges(shape, world, replicated_capacity, sharded_capacity):
    """A training step's exchanges, in order, as (collective, shape, dtype): the replicated entries'
    ids and payloads all-gathered from [replicated_capacity] slots; the sharded ones' ids and rows
    (forward), ids and payloads (backward) moved all-to-all in [world * sharded_capacity] slots
    (none where a capacity is 0)."""
    exchanges = []
    if replicated_capacity:
        exchanges += [("all_gather", (replicated_capacity,), torch.int64),
                      ("all_gather", (replicated_capacity, shape.payload_width), torch.float32)]
    if sharded_capacity:
        slots = world * sharded_capacity
        ids = ("all_to_all", (slots,), torch.int64)
        exchanges += [ids, ("all_to_all", (slots, shape.param_width), shape.param_dtype),
                      ids, ("all_to_all", (slots, shape.payload_width), torch.float32)]
    return exchanges


class Route:
    """A batch's sharded entries placed in slots [W * capacity] by owner (entry order kept within an
    owner); the replicated entries have none."""

    def __init__(self, indices, rows, capacity, overflow):
        """overflow: a device flag set where an owner gets more than `capacity` entries (those are
        not sent; RankedAggregate.check_exchanges raises)."""
        sharded = indices >= rows.replicated
        owner = torch.where(sharded, rows.owner(indices), rows.world)
        self.order = torch.argsort(owner, stable=True)
        ordered = owner[self.order]
        first = torch.searchsorted(ordered, torch.arange(rows.world + 1, device=indices.device))
        slot = torch.arange(indices.numel(), device=indices.device) - first[ordered]
        self.size = rows.world * capacity
        # a replicated entry's slot is one past the end, cut off (no mask: nothing read on the host)
        sent = ordered < rows.world
        overflow |= (sent & (slot >= capacity)).any()
        self.destination = torch.where(sent & (slot < capacity), ordered * capacity + slot, self.size)

    def sent(self, values, padding):
        """The entries' values in their slots (padding elsewhere)."""
        slots = values.new_full((self.size + 1, *values.shape[1:]), padding)
        slots[self.destination] = values[self.order]
        return slots[:self.size]

    def received(self, slots):
        """Slots back to the entries (the replicated entries' rows zero)."""
        padded = torch.cat([slots, slots.new_zeros((1, *slots.shape[1:]))])
        entries = padded.new_empty((self.order.numel(), *padded.shape[1:]))
        entries[self.order] = padded[self.destination]
        return entries


def _packed(values, keep, capacity, padding, overflow):
    """The kept rows of `values` in `capacity` slots, padding after them (overflow: set where they are
    more, as Route's)."""
    # the dropped rows written to one slot past the end, cut off: no count read on the host
    slots = values.new_full((capacity + 1, *values.shape[1:]), padding)
    position = torch.cumsum(keep, 0) - 1
    overflow |= (keep & (position >= capacity)).any()
    slots[torch.where(keep & (position < capacity), position, capacity)] = values
    return slots[:capacity]


class RankedAggregate(SparseAggregate):
    def __init__(self, model, n_features, ranks, replicated=None, order=None, **options):
        """A SparseAggregate (model, n_features, options as there) of which this rank holds the rows
        RankRows(n_features, replicated, ...) names, and SCRATCH_ROWS scratch rows; ranks:
        alac.runtime.ranks.distributed.Ranks; replicated: the ids below it on every rank (default
        n_features: every row replicated); order: the ids in the ranks' numbering (a permutation, the
        hot ones first; default as given): the batches' ids are renumbered by it, the rows drawn and
        assembled in the given ids."""
        rows = RankRows(int(n_features), int(n_features) if replicated is None else int(replicated), ranks.rank,
                        ranks.world)
        held = rows.held_ids()
        drawn = held if order is None else order.cpu()[held]
        # the scratch rows (drawn as row 0; padding's steps change them, nothing reads them)
        scratch = torch.zeros(SCRATCH_ROWS, dtype=torch.int64) + (drawn[0] if drawn.numel() else 0)
        super().__init__(model, n_features, rows=torch.cat([drawn, scratch]), **options)
        if self.asynchronous:
            raise OptionError("tables over ranks step in sync semantics (one step on every rank's batch)")
        self.ranks, self.rank_rows = ranks, rows
        self._scratch_row = held.numel()
        self.entry_capacity = None      # entries a rank sends one rank at most (None: found every step)
        self.overflow = torch.zeros((), dtype=torch.bool, device=self.table_device)
        self._last_route = (None, None)
        self.global_samples = None      # the samples of a step over every rank (None: summed every step)
        self._order = None if order is None else order.to(self.table_device)
        self._renumbered = None
        if order is not None:
            self._renumbered = torch.empty_like(self._order)
            self._renumbered[self._order] = torch.arange(rows.n_features, device=self.table_device)

    def bags(self, indices, bag, n_bags, samples, values=None):
        """SparseAggregate.bags, the ids in the ranks' numbering."""
        if self._renumbered is not None:
            indices = self._renumbered[indices]
        return super().bags(indices, bag, n_bags, samples, values)

    def rows_for(self, indices):
        """Every entry's row as a table of its own ([entries] rows: the replicated ones read here, the
        sharded ones fetched from their owners) and the entries' indices into it; the module's own
        tables where every row is replicated."""
        rows = self.rank_rows
        if rows.mode == "replicated":
            return self.state, indices
        route = Route(indices, rows, self._capacity(indices.numel()), self.overflow)
        # the backward of these entries sends their changes by the same route
        self._last_route = (indices, route)
        params = self.state.params
        asked = self._local(self._exchange(route.sent(indices, PADDING)))
        answer = torch.cat([value.reshape(value.shape[0], -1)[asked] for value in params.values()], 1)
        fetched = route.received(self._exchange(answer))
        held = indices < rows.replicated
        here = torch.where(held, indices, 0)
        working, column = {}, 0
        for name, value in params.items():
            flat = value.reshape(value.shape[0], -1)
            entry_rows = fetched[:, column:column + flat.shape[1]]
            if rows.replicated:      # hybrid: the replicated entries' rows read here
                entry_rows = torch.where(held[:, None], flat[here], entry_rows)
            working[name] = entry_rows.reshape(-1, *value.shape[1:])
            column += flat.shape[1]
        return ModelState(working, {}, {}), torch.arange(indices.numel(), device=indices.device)

    def _local(self, ids):
        """Local rows of ids this rank holds, padding's the scratch rows in turn."""
        spread = self._scratch_row + torch.remainder(torch.arange(ids.numel(), device=ids.device), SCRATCH_ROWS)
        return torch.where(ids == PADDING, spread.view(ids.shape), self.rank_rows.local(ids))

    def step_exchanges(self):
        """A training step's exchanges at entry_capacity, in order (step_exchanges below)."""
        rows, capacity = self.rank_rows, self.entry_capacity or 0
        params = list(self.state.params.values())
        shape = ExchangeShape(sum(value[0].numel() for value in params), params[0].dtype, payload_width(self.ir))
        return step_exchanges(shape, self.ranks.world, capacity if rows.replicated else 0,
                              capacity if rows.replicated < rows.n_features else 0)

    def bytes_per_step(self):
        """Bytes this rank sends the others in a training step (step_exchanges: `capacity` slots to each)."""
        others, capacity = self.ranks.world - 1, self.entry_capacity or 0
        return sum(others * capacity * math.prod(shape[1:]) * torch.empty((), dtype=dtype).element_size()
                   for _, shape, dtype in self.step_exchanges())

    def held(self, name):
        """The rows of a param or optimizer state this rank holds (without the scratch rows), in
        RankRows.held_ids' order."""
        return getattr(self, name)[:self._scratch_row]

    def check_exchanges(self):
        """OptionError where a step's exchange had more entries for a rank than entry_capacity (one
        host read: the trainer calls it after an epoch)."""
        if bool(self.overflow):
            raise OptionError(f"a rank's batch sent another more than the {self.entry_capacity:,} entries of "
                              "entry_capacity: set it from the batches (alac.train.deep_ranks.fix_exchanges)")

    def exchanged(self, indices, senders):
        """The most entries one rank sends another in a step (its replicated entries to all, each
        sharded one to its owner), over steps whose entries are `indices` (the data's ids) sent by
        `senders` (a step and rank as one number per entry): entry_capacity for them, in one host read."""
        rows = self.rank_rows
        ids = indices if self._renumbered is None else self._renumbered[indices]
        owner = torch.where(ids < rows.replicated, rows.world, rows.owner(ids))
        counts = torch.bincount(senders * (rows.world + 1) + owner)
        return max(1, int(counts.max())) if counts.numel() else 1

    def _capacity(self, entries):
        """Entries per rank and destination in this step's exchanges: entry_capacity where the trainer
        gives it (no host round trip), else the ranks' largest count (one all-reduce read on the host)."""
        if self.entry_capacity is not None:
            return self.entry_capacity
        count = torch.tensor([entries], device=self.ranks.device)
        return max(1, int(self.ranks.all_reduce(count, op="max")))

    def _exchange(self, slots):
        """Slots [W * capacity, ...] sent to their ranks, as many received (equal splits)."""
        part = slots.shape[0] // self.ranks.world
        return self.ranks.all_to_all(slots, [part] * self.ranks.world, [part] * self.ranks.world)

    def _step(self, indices, x, bag, deltas, samples):
        """Every entry's value and dLoss/dAccum (1/W of it) sent where its row is held, and one step of
        each rank's rows on what it received, as one batch of every rank's samples (global_samples
        where the trainer gives it, else the ranks' sum)."""
        rows, ranks = self.rank_rows, self.ranks
        names = list(deltas)
        payload = torch.cat([_values(x, indices)[:, None],
                             *(deltas[name][bag].reshape(bag.numel(), -1) / ranks.world for name in names)], 1)
        if self.global_samples is not None:
            samples = self.global_samples
        else:
            samples = int(ranks.all_reduce(torch.tensor([samples], device=ranks.device)))
        capacity = self._capacity(indices.numel())
        ids, payloads = [], []
        if rows.replicated:
            held = indices < rows.replicated
            ids.append(ranks.all_gather(_packed(indices, held, capacity, PADDING, self.overflow)).flatten())
            payloads.append(ranks.all_gather(_packed(payload, held, capacity, 0.0, self.overflow)).flatten(0, 1))
        if rows.replicated < rows.n_features:
            last, route = self._last_route
            # the forward's entries (held by _last_route, so their memory is not reused by others)
            same = last is not None and last.data_ptr() == indices.data_ptr() and last.shape == indices.shape
            if not same or route.size != rows.world * capacity:
                route = Route(indices, rows, capacity, self.overflow)
            ids.append(self._exchange(route.sent(indices, PADDING)))
            payloads.append(self._exchange(route.sent(payload, 0.0)))
        ids, payload = self._local(torch.cat(ids)), torch.cat(payloads)
        entry_deltas, column = {}, 1
        for name in names:
            width = deltas[name][0].numel()
            entry_deltas[name] = payload[:, column:column + width].reshape(-1, *deltas[name].shape[1:])
            column += width
        super()._step(ids, payload[:, 0].contiguous(), torch.arange(ids.numel(), device=ids.device), entry_deltas,
                      samples)

    def align(self):
        """Rank 0's replicated rows (params and optimizer state) copied to every rank."""
        if self.rank_rows.replicated and self.ranks.world > 1:
            for name in (*self._params, *self._states):
                self.ranks.broadcast(getattr(self, name)[:self.rank_rows.replicated])

    def whole_state(self):
        """Every row's params and optimizer state ({name: tensor over all n_features rows}), assembled
        from the ranks (every rank calls it; each gets the whole)."""
        rows, ranks = self.rank_rows, self.ranks
        owned = [rows.owned_ids(rank).numel() for rank in range(ranks.world)]
        ids = torch.cat([rows.owned_ids(rank) for rank in range(ranks.world)])
        whole = {}
        for name in (*self._params, *self._states):
            value = getattr(self, name)
            gathered = ranks.all_gather_rows(value[rows.replicated:self._scratch_row], owned)
            full = value.new_empty((rows.n_features, *value.shape[1:]))
            full[:rows.replicated] = value[:rows.replicated]
            full[ids.to(value.device)] = gathered
            whole[name] = full if self._order is None else torch.empty_like(full).index_copy_(0, self._order, full)
        return whole

    def load_whole_state(self, whole):
        """This rank's rows taken from a whole table's state (whole_state's form, from any rank count)."""
        held = self.rank_rows.held_ids()
        if self._order is not None:
            held = self._order.cpu()[held]
        for name in (*self._params, *self._states):
            if whole[name].shape[0] != self.rank_rows.n_features:
                raise OptionError(f"a table of {whole[name].shape[0]:,} rows cannot load into one of "
                                  f"{self.rank_rows.n_features:,}")
            getattr(self, name)[:self._scratch_row].copy_(whole[name][held.to(whole[name].device)])
