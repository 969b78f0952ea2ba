"""alac.nn's tables over ranks, PICASSO's hybrid parallelism (§III-B): a SparseAggregate's rows
replicated on every rank, sharded row-wise over them, or hybrid (the hot rows replicated, the cold
ones sharded); the dense part trains under DistributedDataParallel beside them.

Ids below `replicated` (the hot rows of a space numbered by frequency, alac.data.compact) are held by
every rank; id g >= replicated by rank (g - replicated) % W alone, at its local row replicated +
(g - replicated) // W (round-robin, so every rank owns as many warm rows as the others). A forward
fetches the sharded rows a batch reads from their owners (an all-to-all of ids, one of rows). The
backward sends each entry's value and dLoss/dAccum to the ranks that hold its row (every rank for a
replicated row, by one all-gather; its owner for a sharded one, by one all-to-all), and each rank
steps its rows once on all it received, as one batch of every rank's samples: the step one process
takes on the global batch. The ranks' losses combine as DDP combines gradients (the objective is
their mean), so each rank's dLoss/dAccum counts 1/W. A replicated row takes the same step on every
rank, but float atomics on a GPU may round it apart: align() copies rank 0's replicated rows to the
others (the trainer calls it after every epoch).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from alac.errors import OptionError
from alac.nn.aggregate import SparseAggregate, _values
from alac.runtime.execution.state import ModelState

MODES = ("replicated", "sharded", "hybrid")


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


class RankedAggregate(SparseAggregate):
    def __init__(self, model, n_features, ranks, replicated=None, order=None, **options):
        """A SparseAggregate (model, n_features, options as there) of which this rank holds the rows
        RankRows(n_features, replicated, ...) names; ranks: alac.runtime.ranks.distributed.Ranks;
        replicated: the ids below it on every rank (default n_features: every row replicated);
        order: the ids in the ranks' numbering (a permutation, the hot ones first; default as given):
        the batches' ids are renumbered by it, the rows drawn and assembled in the given ids."""
        rows = RankRows(int(n_features), int(n_features) if replicated is None else int(replicated), ranks.rank,
                        ranks.world)
        held = rows.held_ids()
        super().__init__(model, n_features, rows=held if order is None else order.cpu()[held], **options)
        if self.asynchronous:
            raise OptionError("tables over ranks step in sync semantics (one step on every rank's batch)")
        self.ranks, self.rank_rows = ranks, rows
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
        """The batch's rows as a table of its distinct ids (the sharded ones fetched from their owners)
        and the entries' indices into it; every row local where every row is replicated."""
        rows = self.rank_rows
        if rows.mode == "replicated":
            return self.state, indices
        distinct, inverse = torch.unique(indices, return_inverse=True)
        held_here = int((distinct < rows.replicated).sum())       # sorted: the replicated ids first
        wanted = distinct[held_here:]
        owner = rows.owner(wanted)
        order = torch.argsort(owner, stable=True)
        sent, received = self._counts(owner)
        asked = self.ranks.all_to_all(wanted[order], sent, received)
        params = self.state.params
        local = rows.local(asked)
        answer = torch.cat([value[local].reshape(local.numel(), -1) for value in params.values()], 1)
        answered = self.ranks.all_to_all(answer, received, sent)
        fetched = torch.empty_like(answered)
        fetched[order] = answered
        working, column = {}, 0
        for name, value in params.items():
            width = value[0].numel()
            part = fetched[:, column:column + width].reshape(-1, *value.shape[1:])
            working[name] = torch.cat([value[distinct[:held_here]], part])
            column += width
        return ModelState(working, {}, {}), inverse

    def _counts(self, owner):
        """(rows this rank sends to each rank, rows it receives from each) for rows of these owners."""
        sent = torch.bincount(owner, minlength=self.ranks.world)
        received = self.ranks.all_to_all(sent, [1] * self.ranks.world, [1] * self.ranks.world)
        return sent.tolist(), received.tolist()

    def _step(self, indices, x, bag, deltas, samples):
        """Every entry's value and dLoss/dAccum (1/W of it) sent where its row is held, and one step of
        each rank's rows on what it received, as one batch of every rank's samples."""
        rows, ranks = self.rank_rows, self.ranks
        names = list(deltas)
        payload = torch.cat([_values(x, indices)[:, None],
                             *(deltas[name][bag].reshape(bag.numel(), -1) / ranks.world for name in names)], 1)
        replicated = indices < rows.replicated
        counts = ranks.all_gather(torch.tensor([samples, int(replicated.sum())], device=indices.device)).tolist()
        ids, payloads = [], []
        if rows.replicated:
            hot_counts = [count for _, count in counts]
            ids.append(ranks.all_gather_rows(indices[replicated], hot_counts))
            payloads.append(ranks.all_gather_rows(payload[replicated], hot_counts))
        if rows.replicated < rows.n_features:
            cold = ~replicated
            owner = rows.owner(indices[cold])
            order = torch.argsort(owner, stable=True)
            sent, received = self._counts(owner)
            ids.append(rows.local(ranks.all_to_all(indices[cold][order], sent, received)))
            payloads.append(ranks.all_to_all(payload[cold][order], sent, received))
        ids, payload = torch.cat(ids), torch.cat(payloads)
        entry_deltas, column = {}, 1
        for name in names:
            width = deltas[name][0].numel()
            entry_deltas[name] = payload[:, column:column + width].reshape(-1, *deltas[name].shape[1:])
            column += width
        super()._step(ids, payload[:, 0].contiguous(), torch.arange(ids.numel(), device=ids.device), entry_deltas,
                      sum(count for count, _ in counts))

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
            gathered = ranks.all_gather_rows(value[rows.replicated:], owned)
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
            getattr(self, name).copy_(whole[name][held.to(whole[name].device)])
