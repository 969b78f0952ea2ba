"""Data-parallel flow training over ranks (alac.runtime.ranks.distributed): every rank trains its share of
the rows with the generated kernels, the parameters replicated on every rank; every `sync_every`
batches (by default once an epoch) the ranks all-reduce the changes of their parameters and optimizer
state since the last synchronisation and combine them:
- "sequential" (the default): each feature row's summed changes scaled to the change sequential SGD
  over all the ranks' samples would make on a quadratic model of the row (sequential_factor: a row
  few samples touch keeps every rank's steps, a row whose steps saturate on each rank gets their
  mean; benchmarks/dp_aggregation.py: LR as one process, FM closest);
- "rows": each row's mean over the ranks that changed it; "adding": their sum (every rank's steps as
  made, as async training's concurrent programs apply theirs); "averaging": their mean.
Every rank lays its share out in one feature order, its frequencies summed over the ranks, so that a
parameter row means the same feature on every rank; one rank is Trainer exactly. With tables="sharded"
no rank holds every row: each owns a share of the rows and gathers the rows of each segment it trains
from their owners (alac.runtime.rows.sharded), the changes combined as above."""

from __future__ import annotations

import dataclasses
import math
import os

import torch

from alac.errors import OptionError
from alac.runtime.device.memory import available_bytes
from alac.runtime.execution import epoch as runner
from alac.runtime.movement.layout import order_by_frequency
from alac.runtime.movement.streams import StreamedLayout
from alac.runtime.planning.param_planner import ParamPlacement
from alac.runtime.planning.planner import layout_bytes
from alac.runtime.ranks.distributed import check_rows, init_ranks
from alac.runtime.rows.device import DeviceRows
from alac.runtime.rows.sharded import SEGMENT_COPIES, ShardedExecutor, segment_batches
from alac.train.trainer import FINITE_CHECK_VALUES, Trainer

AGGREGATIONS = ("sequential", "rows", "adding", "averaging")
TABLES = ("auto", "replicated", "sharded", "hybrid")
# rows of the sequential factors computed and all-reduced at once (1 GiB of float32 terms a piece)
SEQUENTIAL_PIECE = 1 << 27
# why auto replicates tables that fit (benchmarks/distributed.py's table arms: LR and FM k = 16)
REPLICATED_WHY = ("every row fits each rank's GPU: replicated tables synchronised by one all-reduce trained "
                  "faster than sharded or hybrid ones, whose segments gather and return rows by all-to-alls "
                  "(benchmarks/distributed.py)")


class DataParallelTrainer(Trainer):
    def __init__(self, model, ranks=None, sync_every=None, aggregation="sequential", curvature=0.25,
                 tables="auto", rows="whole", **options):
        """Trainer's options (every rank's plan the same but for its hot size: the ranks' smallest is
        taken); ranks: alac.runtime.ranks.distributed.Ranks (default init_ranks()); sync_every:
        batches between synchronisations (None: once an epoch); aggregation: "sequential", "rows",
        "adding" or "averaging" of the ranks' changes (the module's docstring), curvature the loss's
        curvature "sequential" assumes of a row (the logistic loss's largest, 1/4); tables: "replicated"
        (every rank holds every row), "sharded" (each rank its share: alac.runtime.rows.sharded),
        "hybrid" (the plan's hot segment replicated, the cold rows sharded) or "auto" (replicated where
        the rows fit the plan's GPU budget for them, else hybrid, synchronised every segment_batches
        batches unless sync_every says); sharded and hybrid tables' whole state, as checkpoints and
        parameters() read it, is assembled by every rank together.
        rows: "whole" (fit(train, ...) takes the whole training set on every rank and trains this
        rank's share of its rows, contiguous, as torch.tensor_split cuts them) or "own" (each rank's
        fit gets its own rows, as DistributedSampler hands DDP ranks theirs: a set too large for one
        process is made or read by each rank in its part)."""
        ranks = ranks or init_ranks()
        if aggregation not in AGGREGATIONS:
            raise OptionError(f"aggregation is one of {', '.join(AGGREGATIONS)}, got {aggregation!r}")
        if tables not in TABLES:
            raise OptionError(f"tables are one of {', '.join(TABLES)}, got {tables!r}")
        check_rows(rows)
        if sync_every is not None and (not isinstance(sync_every, int) or sync_every < 1):
            raise OptionError(f"sync_every is a number of batches >= 1 (or None: once an epoch), got {sync_every!r}")
        if ranks.world > 1 and ranks.backend == "nccl" and "device" not in options:
            options["device"] = ranks.device
        super().__init__(model, **options)
        if ranks.world > 1 and self.plan.host_params:
            raise OptionError("data-parallel training keeps every parameter on each rank's GPU: host_params is "
                              "for one rank")
        self.ranks, self.sync_every, self.aggregation, self.curvature = ranks, sync_every, aggregation, curvature
        self.tables, self.rows = tables, rows
        if ranks.world > 1 and aggregation == "sequential":
            self._log_q()           # its step checked before any training
        agreed = ranks.agreed_plan(self.plan)
        # the executor built for this rank's own plan gives way to one of the agreed plan (and its tables)
        first, _, *rest = self._executor_arguments
        self.plan, self._executor_arguments = agreed, (first, agreed, *rest)
        self.executor = self._device_store()
        # (training set, this rank's share of its rows): held, so that the identity test stays sound
        self._share = None
        # (layout, (share, log q), each row's factor) of the sequential aggregation (_sequential_rows)
        self._terms = None
        # (layout, the rows of every rank's share of it) (_rows_over_ranks)
        self._rows = None

    def describe(self):
        """The run's first line: the ranks and how their parameters are synchronised."""
        if self.ranks.world == 1:
            return f"alac: {self.ranks.describe()} trains"
        share = "its own rows" if self.rows == "own" else "its share of the rows"
        every = "every epoch" if self.sync_every is None else f"every {self.sync_every} batches"
        how = {"rows": "each row's mean over the ranks that changed it", "adding": "their sum",
               "averaging": "their mean",
               "sequential": "each row's sum scaled to sequential SGD's change on a quadratic model"}[self.aggregation]
        if self.sharded_tables:
            hot = "; the hot segment replicated, its changes all-reduced" if self.executor.replicate_hot else ""
            return (f"alac: {self.ranks.describe()} train, each {share}; the tables sharded "
                    f"row-wise over the ranks, each segment's rows gathered from their owners and their changes "
                    f"sent back {every} by all-to-alls ({how}){hot}")
        # auto is settled once the data is laid out: this says what it may become
        unsettled = "; the tables replicated, or hybrid where the rows exceed the GPU budget for them" \
            if self.tables == "auto" else ""
        return (f"alac: {self.ranks.describe()} train, each {share}; parameters and optimizer "
                f"state synchronised {every} by an all-reduce of their changes ({how}){unsettled}")

    @property
    def sharded_tables(self):
        """Whether no rank holds every row (sharded or hybrid tables, chosen or settled by auto)."""
        return self.executor.sharded

    def prepare(self, train):
        prepared = self._prepare_share(train)
        if self.sharded_tables and isinstance(self.train_layout, StreamedLayout):
            raise OptionError("sharded tables train resident shares of the rows: this rank's share exceeds the "
                              "memory budget for the training data and would stream (a larger budget, or more ranks)")
        return prepared

    def _prepare_share(self, train):
        if self.ranks.world == 1:
            return super().prepare(train)
        if not hasattr(train, "take"):
            # a block store: its order is the whole data's; every rank trains its part of the blocks
            prepared = super().prepare(train)
            if self.train_layout.part is None and self.rows == "whole":
                self.train_layout.take_part(self.ranks.rank, self.ranks.world)
            return prepared
        if self._share is not None and self._share[0] is train:
            share = self._share[1]
        else:
            if self.rows == "own":
                self.ranks.check_one_feature_space(train.n_features)
                share = train
            else:
                rows = torch.arange(train.n_rows, device=train.device).tensor_split(self.ranks.world)[self.ranks.rank]
                share = train.take(rows)
            if self.feature_order is None:
                self.feature_order = self._common_feature_order(share)
                self.feature_ids = share.feature_ids
            self._share = (train, share)
        prepared = super().prepare(share)
        if self.tables == "replicated" and self.placement is not None and self.placement.mode != "device":
            raise OptionError(f"the model's rows take more than one GPU's budget for them ({self.placement.mode} "
                              "placement): each rank holds every row with replicated tables; tables=\"sharded\" "
                              "or \"hybrid\" splits them over the ranks")
        return prepared

    def _common_feature_order(self, share):
        """new_to_old (on the CPU) by the ranks' summed feature counts: the same on every rank. Its own
        function so that the counts and the order's other tables (8 bytes a feature each) are freed
        before the layout is built."""
        counts = torch.bincount(share.indices.to(self.device), minlength=share.n_features)
        _, new_to_old, _ = order_by_frequency(self.ranks.all_reduce(counts, in_place=True))
        return new_to_old.cpu()

    def _device_store(self):
        """Rows on the device: every row on each rank, or sharded / hybrid tables (ShardedExecutor)."""
        rows = DeviceRows(*self._executor_arguments)
        if self.tables in ("sharded", "hybrid"):
            return ShardedExecutor(rows, self.ranks, replicate_hot=self.tables == "hybrid")
        return rows

    def _agree(self, plan):
        return self.ranks.agreed_plan(plan)

    def _auto_tables(self, streamed):
        return self.ranks.world > 1 and self.tables == "auto" and not streamed

    def _rows_budget(self, train, streamed):
        """tables="auto" over several ranks without a budget: this GPU's free memory (the layout's already
        counted) decides whether every row fits a rank: replicated tables of a larger model would stop at
        initialization."""
        if self._auto_tables(streamed) and self.plan.memory_budget is None and self.device.type == "cuda":
            return available_bytes(self.device) + layout_bytes(train, self.plan.chunk_size)
        return None

    def _use_store(self, run, train, streamed):
        """tables="auto" over several ranks: replicated where every row fits the GPU budget for them,
        else hybrid (_shard_over_ranks); elsewhere Trainer's store."""
        if not self._auto_tables(streamed):
            super()._use_store(run, train, streamed)
        elif run.placement.mode == "device":
            self.placement, self.tables = dataclasses.replace(run.placement, reasons=(*run.placement.reasons, (
                "tables", f"replicated over {self.ranks.world} ranks", REPLICATED_WHY))), "replicated"
        else:
            self._shard_over_ranks(run.placement)

    def _shard_over_ranks(self, placement):
        """Hybrid tables for rows over the GPU budget: the hot segment and this rank's share of the cold
        rows held, each segment's rows in what they leave (sync_every from segment_batches, the ranks'
        smallest, unless given)."""
        layout, world, row_bytes = self.train_layout, self.ranks.world, placement.row_bytes
        n, hot = layout.n_features, min(self.plan.hot_size, layout.n_features)
        held = (hot + -(-(n - hot) // world)) * row_bytes
        room = (placement.budget_bytes - held) // (SEGMENT_COPIES * row_bytes)
        batches = -(-layout.n_chunks // self.plan.chunks_per_batch)
        every = self.sync_every or (segment_batches(layout.frequency, layout.stats.nnz / batches, batches, room, hot)
                                    if room > 0 else 0)
        every, _ = self.ranks.extremes(every)
        if every < 1:
            raise OptionError(f"{n:,} parameter rows of {row_bytes} bytes leave no room for a batch's rows in the "
                              f"{placement.budget_bytes:,}-byte GPU budget for them, even sharded over {world} ranks "
                              f"({held:,} bytes a rank): more ranks or a larger budget")
        self.sync_every, self.tables = every, "hybrid"
        self.executor = ShardedExecutor(DeviceRows(*self._executor_arguments), self.ranks, replicate_hot=True)
        why = (f"{n:,} rows x {row_bytes} bytes exceed the {placement.budget_bytes:,}-byte budget: each of {world} "
               f"ranks holds the {hot:,} hot rows and its share of the cold ones, {held:,} bytes")
        self.placement = ParamPlacement("hybrid tables", row_bytes, n * row_bytes, placement.budget_bytes, reasons=(
            ("placement", f"hybrid tables over {world} ranks", why),
            ("sync every", f"{every} batches", "the most whose rows are expected to fit what the shard leaves")))

    def _train_group(self, labels, count):
        if self.ranks.world == 1 and not self.sharded_tables:
            return super()._train_group(labels, count)
        if isinstance(self.train_layout, StreamedLayout):
            return [self._streamed_epoch(epoch) for epoch in range(self.epoch, self.epoch + count)]
        layout, executor = self.train_layout, self.executor
        per_sync = None if self.sync_every is None else self.sync_every * self.plan.chunks_per_batch
        # the epochs' loss sums over the ranks, added up on the device (each segment's rides on its
        # synchronisation's all-reduce): one read at the group's end, as Trainer's queued epochs
        loss_sums = torch.zeros(count, dtype=torch.float64, device=self.device)
        if self.sharded_tables:
            # the store combines the ranks' changes after each of its segments
            executor.synchronise(per_sync, self._factors)
            for index, epoch in enumerate(range(self.epoch, self.epoch + count)):
                loss_sums[index] += runner.queue_epoch(executor, layout, labels, epoch, self.lr)
            return (loss_sums / self._rows_over_ranks()).tolist()
        for index, epoch in enumerate(range(self.epoch, self.epoch + count)):
            order = layout.chunk_order(epoch, executor.seed)
            for segment in (order,) if per_sync is None else order.split(per_sync):
                share = segment.numel() / order.numel()
                before = self._tensors(clone=True)
                executor.queue_epoch(layout, labels, epoch, self.lr, order=segment)
                loss_sums[index] += self._aggregate(before, share, executor.loss_sum)
        return (loss_sums / self._rows_over_ranks()).tolist()

    def _group_size(self, grouped, remaining, seconds):
        """Trainer's, the ranks' smallest: each rank measures its own epochs, and a group's end holds
        collectives (sharded tables' finiteness check) that every rank must reach together."""
        count = super()._group_size(grouped, remaining, seconds)
        if not grouped or seconds is None:
            return count
        return self.ranks.extremes(count)[0]

    def _rows_over_ranks(self):
        """The rows the ranks train together (one all-reduce per training layout)."""
        if self._rows is None or self._rows[0] is not self.train_layout:
            total = self.ranks.all_reduce(torch.tensor([self.train_layout.n_rows], device=self.device))
            self._rows = (self.train_layout, int(total[0]))
        return self._rows[1]

    def _streamed_epoch(self, epoch):
        """An epoch of this rank's share streamed block by block (its layout over the GPU budget), the
        ranks synchronised at its end; the ranks' mean training loss."""
        before = self._tensors(clone=True)
        loss = self.executor.train_streamed_epoch(self.train_layout, self._block_labels, epoch, self.lr)
        loss_sum = torch.tensor([loss * self.train_layout.n_rows], device=self.device)
        return float(self._aggregate(before, loss_sum=loss_sum)) / self._rows_over_ranks()

    def _sample_loss(self, labels):
        """The divergence guard's yardstick, the same on every rank: the ranks' mean."""
        loss = super()._sample_loss(labels)
        if self.ranks.world == 1:
            return loss
        return float(self.ranks.all_reduce(torch.tensor([loss], dtype=torch.float64))[0]) / self.ranks.world

    def _sharded(self):
        return self.sharded_tables and self._has_state()

    def _checkpoint_in_memory(self):
        """Sharded tables: each rank snapshots its own rows (ShardSnapshot), not the whole table, where
        the shards of every rank on this host fit its memory at once (4 ranks of 40 GB each, snapshotted
        three times, overran a 512 GB host in benchmarks/distributed.py's placement run)."""
        if self._sharded():
            size = self.executor.held_bytes() * int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
            if not self._snapshot_fits(size):
                return None
            return self.executor.snapshot(), self.epoch, self.executor.batches_done, len(self.history)
        return super()._checkpoint_in_memory()

    def _agreed(self, fits):
        # a restore runs every rank's collectives: all ranks snapshot, or none
        return self.ranks.extremes(int(fits))[0] == 1

    def _said(self, text):
        if self.ranks.rank == 0:
            super()._said(text)

    def _finite_state(self):
        if self._sharded():
            return self.executor.finite(FINITE_CHECK_VALUES)
        return super()._finite_state()

    def _tensors(self, clone=False):
        state = self.executor.state
        tensors = {**{("param", k): v for k, v in state.params.items()},
                   **{("global", k): v for k, v in state.globals.items()},
                   **{("state", k): v for k, v in state.states.items()}}
        return {k: v.clone() for k, v in tensors.items()} if clone else tensors

    def _aggregate(self, before, share=1.0, loss_sum=None):
        """Each tensor set to its value before the segment plus the ranks' changes, combined by
        self.aggregation; every change (for "rows" the rows' movers, and the segment's loss sum) in one
        buffer, written there by the subtraction itself, so that a synchronisation is one all-reduce
        and two passes over the params (a separate loss all-reduce and its read took a share of an LR
        epoch worth saving: benchmarks/distributed.py). share: the segment's part of
        the epoch's chunks; loss_sum: this rank's (a one-element device tensor). Returns the ranks'
        summed loss (a device scalar; 0 without loss_sum)."""
        tensors = self._tensors()
        sizes = [tensor.numel() for tensor in tensors.values()]
        rows = next(tensor for (kind, _), tensor in tensors.items() if kind == "param").shape[0]
        flat = torch.empty(sum(sizes) + (rows if self.aggregation == "rows" else 0) + 1, device=self.device)
        changes = {}
        for (key, tensor), part in zip(tensors.items(), flat[:sum(sizes)].split(sizes)):
            changes[key] = torch.sub(tensor, before[key], out=part.view_as(tensor))
        if self.aggregation == "rows":
            # the ranks that changed each row: of the first param's rows (every param and state of the
            # model is indexed by the same feature rows)
            first = next(v for (kind, _), v in changes.items() if kind == "param")
            flat[sum(sizes):-1] = first != 0 if first.dim() == 1 else (first != 0).any(dim=1)
        flat[-1:] = 0.0 if loss_sum is None else loss_sum
        reduced = self.ranks.all_reduce(flat, in_place=True)
        factor = self._factors(reduced[sum(sizes):-1], share)
        for (key, tensor), change in zip(tensors.items(), reduced[:sum(sizes)].split(sizes)):
            change = change.view_as(tensor)
            row_factor = factor["rows"] if key[0] != "global" else factor["global"]
            if isinstance(row_factor, torch.Tensor):
                torch.addcmul(before[key], change, row_factor.view(-1, *([1] * (change.dim() - 1))), out=tensor)
            else:
                torch.add(before[key], change, alpha=row_factor, out=tensor)
        return reduced[-1]

    def _sequential_rows(self, share):
        """Each row's sequential_factor for a segment of this share of the epoch: from its expected
        occurrences summed over the ranks and the share of its way to the optimum they take, 1 - q^n.
        It changes with neither the epoch nor the parameters: one all-reduce per layout and share (at 4M
        rows a third of LR's synchronisation otherwise)."""
        layout, log_q = self.train_layout, self._log_q()
        if self._terms is not None and self._terms[0] is layout and self._terms[1] == (share, log_q):
            return self._terms[2]
        if isinstance(layout, StreamedLayout):
            # a block store's frequencies are the whole data's: this rank's part of them, expected
            frequency = layout.host.frequency * (layout.n_rows / layout.host.n_rows)
        else:
            frequency = layout.frequency
        factor = torch.empty(frequency.numel(), dtype=torch.float32, device=self.device)
        # in pieces: over 2.1 billion rows (distributed.py's placement run) whole-space temporaries took 40 GB
        for first in range(0, frequency.numel(), SEQUENTIAL_PIECE):
            occurrences = frequency[first:first + SEQUENTIAL_PIECE].to(self.device, torch.float32) * share
            terms = self.ranks.all_reduce(torch.cat([occurrences, -torch.expm1(occurrences * log_q)]), in_place=True)
            factor[first:first + occurrences.numel()] = sequential_factor(*terms.split(occurrences.numel()), log_q)
        self._terms = (layout, (share, log_q), factor)
        return factor

    def _log_q(self):
        """log(1 - eta h): eta the step a sample's gradient takes (the batch-mean gradient's lr / B), h
        the loss's curvature the sequential combination assumes (`curvature`)."""
        step = self.lr / self.plan.batch_size * self.curvature
        if not 0 < step < 1:
            raise OptionError(f"the sequential combination needs 0 < lr / batch_size x curvature < 1, got {self.lr:g} "
                              f"/ {self.plan.batch_size} x {self.curvature:g} = {step:g}: choose another aggregation, "
                              "or a smaller learning rate or curvature")
        return math.log1p(-step)

    def _factors(self, movers, share, owned=None):
        """What the summed changes are multiplied by, per feature row and for the globals; movers: the
        number of ranks that changed each row (aggregation "rows"); owned: the rows the factors are of
        (sharded tables: a rank's own), all by default."""
        world = self.ranks.world
        if self.aggregation == "adding":
            return {"rows": 1.0, "global": 1.0}
        if self.aggregation == "averaging":
            return {"rows": 1.0 / world, "global": 1.0 / world}
        if self.aggregation == "rows":
            return {"rows": 1.0 / movers.clamp_min(1), "global": 1.0 / world}
        # every sample moves the globals: each rank's segment rows are their occurrences
        rows = self.train_layout.n_rows * share
        factor = self._sequential_rows(share)
        return {"rows": factor if owned is None else factor[owned],
                "global": float(sequential_factor(torch.tensor(world * rows), torch.tensor(world * -math.expm1(
                    rows * self._log_q())), self._log_q()))}


def sequential_factor(occurrences, reached, log_q):
    """The factor that turns the sum of W ranks' changes of a row into the change sequential SGD over
    all their samples would make, on a diagonal quadratic model of curvature h: a rank's n steps of
    size eta take the row a share 1 - q^n (q = 1 - eta h) of its way to the optimum, so the ranks'
    summed changes are D sum_r (1 - q^n_r) and the sequential one D (1 - q^(sum_r n_r)).
    occurrences: sum_r n_r; reached: sum_r (1 - q^n_r). 1 where no rank saw the row in the linear
    regime (q^n near 1: the changes add up), 1 / W where every rank's steps saturated it."""
    total = -torch.expm1(occurrences * log_q)
    return torch.where(reached > 0, total / reached.clamp_min(1e-30), torch.ones_like(total))
