"""Many tables packed as PICASSO packs them (alac.nn): Table, pack_tables (Eq. 1) with
table_accesses (its counts from warm-up batches), KeyedBags (TorchRec's KeyedJaggedTensor layout)
and PackedEmbeddingBags."""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass

import torch

from alac.dsl import Model, Normal, Param
from alac.errors import DataError, OptionError
from alac.nn.aggregate import SparseAggregate, _Batch
from alac.nn.interleave import interleaved_group, pack_groups, wave_values


@dataclass(frozen=True)
class Table:
    """One embedding table of a PackedEmbeddingBags: its rows, dim, optimizer (name, lr), pooling of a
    bag ("sum" or "mean"), the std of its normal initial values and its storage dtype."""

    name: str
    rows: int
    dim: int
    optimizer: str = "adagrad"
    lr: float | None = None
    pooling: str = "sum"
    init_std: float = 0.01
    dtype: str = "float32"      # the rows' storage: float32, bfloat16 or float16 (SparseAggregate's dtype)

    def __post_init__(self):
        if self.rows < 1 or self.dim < 1 or self.pooling not in ("sum", "mean") or \
                self.dtype not in ("float32", "bfloat16", "float16"):
            raise OptionError(f"table {self.name!r}: rows and dim are positive, pooling sum or mean, dtype float32, "
                              f"bfloat16 or float16, got {self}")

    @property
    def packing(self):
        """What tables must share to be packed into one."""
        return self.dim, self.optimizer, self.lr, self.pooling, self.init_std, self.dtype


class _Embeddings(Model):
    """A table's rows, summed per bag."""

    def __init__(self, dim, init_std):
        self.v = Param(size=dim, init=Normal(init_std))

    def aggregate(self, x, p):
        return {"vx": x * p.v}


def pack_tables(tables, accesses=None, max_cost=None):
    """Lists of tables packed together: tables alike in Table.packing, a pack heavier than max_cost by
    PICASSO's Eq. 1 (cost = sum over its tables of dim x the accesses of the table's ids in warm-up
    batches; accesses: {table name: count}) cut into the fewest shards of at most max_cost, tables
    placed heaviest first into the lightest shard (a table heavier than max_cost is a shard alone)."""
    packs = {}
    for table in tables:
        packs.setdefault(table.packing, []).append(table)
    if max_cost is None:
        return list(packs.values())
    missing = {t.name for t in tables} - set(accesses or {})
    if missing:
        raise OptionError(f"cost-split packing needs the accesses of every table: none for {sorted(missing)}")
    result = []
    for members in packs.values():
        cost = {t.name: t.dim * accesses[t.name] for t in members}
        shards = [[] for _ in range(max(1, math.ceil(sum(cost.values()) / max_cost)))]
        loads = [0.0] * len(shards)
        for table in sorted(members, key=lambda t: -cost[t.name]):
            lightest = loads.index(min(loads))
            shards[lightest].append(table)
            loads[lightest] += cost[table.name]
        # the tables of a shard in their given order (their rows' order in the packed table)
        order = {t.name: i for i, t in enumerate(members)}
        result += [sorted(shard, key=lambda t: order[t.name]) for shard in shards if shard]
    return result


def table_accesses(batches):
    """{table name: ids looked up} over warm-up batches (KeyedBags, or {table name: (indices, offsets[,
    values])}): the access counts of PICASSO's Eq. 1 that pack_tables' cost split takes."""
    counts = {}
    for batch in batches:
        if isinstance(batch, KeyedBags):
            lengths = batch.key_lengths
            if lengths is None:       # from the offsets at the keys' bounds: one read of the device
                samples = batch.samples
                bounds = batch.offsets[torch.arange(len(batch.keys) + 1, device=batch.offsets.device) * samples]
                lengths = bounds.diff().tolist()
            pairs = zip(batch.keys, lengths)
        else:
            pairs = ((name, torch.as_tensor(parts[0]).numel()) for name, parts in batch.items())
        for name, count in pairs:
            counts[name] = counts.get(name, 0) + int(count)
    return counts


@dataclass(frozen=True)
class KeyedBags:
    """Every table's bags of one batch in TorchRec's KeyedJaggedTensor layout: keys (table names), the
    bags key-major (bag k * B + i: table keys[k], sample i), offsets [len(keys) * B + 1] into indices
    (int64 ids local to each table) and values (float32, None: ones). One tensor for all tables, so
    that a step's work does not grow with the number of tables."""

    keys: tuple
    indices: torch.Tensor
    offsets: torch.Tensor
    values: torch.Tensor | None = None
    # entries per key where the host knows them (TorchRec's length per key): the packs' bounds need
    # no round trip to the device then
    key_lengths: tuple | None = None

    @classmethod
    def one_hot(cls, keys, ids):
        """The bags of [B, len(keys)] ids: one id per table and sample."""
        return cls(tuple(keys), ids.t().reshape(-1).long(), torch.arange(ids.numel() + 1, device=ids.device),
                   key_lengths=(ids.shape[0],) * len(keys))

    @property
    def samples(self):
        return (self.offsets.numel() - 1) // max(len(self.keys), 1)


class PackedEmbeddingBags(torch.nn.Module):
    """Embedding tables of many fields, packed as PICASSO packs them: tables alike in dim, optimizer,
    lr, pooling and initial std share one SparseAggregate holding their rows end to end, so a batch
    pools every field of a group in one call however many fields there are (one nn.EmbeddingBag per
    field makes a launch per field). forward takes {table name: (indices, offsets[, values])}, the
    same B rows for every table, and gives {table name: [B, dim]}. A pack too heavy for one operation
    is cut into shards of equal cost (pack_tables)."""

    def __init__(self, tables, seed=0, device=None, accesses=None, max_cost=None, backend="auto",
                 interleave_packs=None):
        """accesses, max_cost: split heavy packs (pack_tables); backend: the packs' (SparseAggregate's);
        interleave_packs: PICASSO's K-interleaving of the packs on a GPU (alac.nn.interleave.pack_groups:
        packs whose step's parameters together fill less than one wave of the GPU run side by side, each
        on a stream of its own); None: while a CUDA graph captures the step only, where it pays (eagerly
        the streams' host work costs more than they overlap: benchmarks/pack_interleaving.py)."""
        super().__init__()
        names = [t.name for t in tables]
        if len(set(names)) != len(names) or not names:
            raise OptionError(f"tables need distinct names, got {names}")
        self.tables = {t.name: t for t in tables}
        self.packs = torch.nn.ModuleList()
        self._members = []     # per pack: [(table, first row)]
        for index, members in enumerate(pack_tables(tables, accesses, max_cost)):
            dim, optimizer, lr, _, init_std, dtype = members[0].packing
            starts = [0]
            for table in members[:-1]:
                starts.append(starts[-1] + table.rows)
            self.packs.append(SparseAggregate(_Embeddings(dim, init_std), starts[-1] + members[-1].rows,
                                              optimizer=optimizer, lr=lr, seed=seed + index, device=device,
                                              dtype=getattr(torch, dtype), backend=backend))
            self._members.append(list(zip(members, starts)))
        self._keyed = {}       # (keys, device) -> _key_constants
        self.interleave_packs = interleave_packs
        # K-interleaving's side streams, made here: not while a CUDA graph captures
        table_device = self.packs[0].table_device
        self._streams = [torch.cuda.Stream(table_device) for _ in self.packs] \
            if table_device.type == "cuda" and len(self.packs) > 1 and interleave_packs is not False else []
        self.last_groups = None    # the packs' Eq. 3 groups in the last forward
        # forward checks the ids with a host round trip unless this is off
        self.check_batches = True
        # the tables pack by pack: KeyedBags in this order need no reordering
        self.keys = tuple(table.name for members in self._members for table, _ in members)

    def forward(self, features):
        """features: {table name: (indices, offsets[, values])}, the same B rows for every table, or
        KeyedBags (every table's bags in one tensor: no per-table work at all)."""
        if isinstance(features, KeyedBags):
            return self._forward_keyed(features)
        return self._forward_keyed(self._keyed_from(features), checked=True)

    def _keyed_from(self, features):
        """The KeyedBags of {table name: (indices, offsets[, values])}, keys in the packs' order, every
        table's batch checked with one host round trip (an error names the table)."""
        missing = set(self.tables) - set(features)
        if missing:
            raise DataError(f"no rows given for tables {sorted(missing)}")
        device = self.packs[0].table_device
        batches = {}
        for name in self.keys:
            indices, offsets, *values = features[name]
            batches[name] = _Batch.of(indices, offsets, values[0] if values else None, device)
        samples_of = {name: batch.samples for name, batch in batches.items()}
        if len(set(samples_of.values())) > 1:
            raise DataError(f"every table needs the same rows, got {samples_of}")
        if self.check_batches and bool(torch.stack([batch.trouble(self.tables[name].rows)
                                                    for name, batch in batches.items()]).any()):
            for name, batch in batches.items():
                batch.explain(self.tables[name].rows, name)
        parts = list(batches.values())
        lengths = torch.cat([batch.offsets.diff() for batch in parts])
        values = None if all(batch.values is None for batch in parts) else torch.cat(
            [torch.ones(batch.indices.numel(), device=device) if batch.values is None else batch.values
             for batch in parts])
        return KeyedBags(self.keys, torch.cat([batch.indices for batch in parts]),
                         torch.cat([torch.zeros(1, dtype=torch.int64, device=device), lengths.cumsum(0)]), values,
                         key_lengths=tuple(batch.indices.numel() for batch in parts))

    @contextlib.contextmanager
    def deferred(self):
        """Every pack's SparseAggregate.deferred(): the tables step once when it ends."""
        with contextlib.ExitStack() as stack:
            for pack in self.packs:
                stack.enter_context(pack.deferred())
            yield

    def _key_constants(self, keys, device):
        """Per key of this order, on the device: its pack, first row in the pack, position among the
        pack's tables and rows; whether the keys run pack by pack in the packs' order."""
        cached = self._keyed.get((keys, device))
        if cached is None:
            where = {t.name: (p, start, position, t.rows) for p, members in enumerate(self._members)
                     for position, (t, start) in enumerate(members)}
            columns = list(zip(*(where[key] for key in keys)))
            grouped = list(columns[0]) == sorted(columns[0])
            cached = (*(torch.tensor(c, dtype=torch.int64, device=device) for c in columns), grouped)
            self._keyed[(keys, device)] = cached
        return cached

    def _forward_keyed(self, bags, checked=False):
        """checked: the caller checked the ids (no second round trip for them)."""
        keys = tuple(bags.keys)
        if sorted(keys) != sorted(self.tables) or len(set(keys)) != len(keys):
            raise DataError(f"KeyedBags keys must be the tables {sorted(self.tables)} once each, got {list(keys)}")
        device = self.packs[0].table_device
        batch = _Batch.of(bags.indices, bags.offsets, bags.values, device)
        if batch.samples % len(keys):
            raise DataError(f"KeyedBags offsets hold {batch.samples:,} bags, not {len(keys)} keys x a batch")
        samples = batch.samples // len(keys)
        pack_of, start_of, position_of, rows_of, grouped = self._key_constants(keys, device)
        # each entry's bag by a search (safe on offsets the checks below may yet refuse)
        entries = torch.arange(batch.indices.numel(), device=device)
        bag = (torch.searchsorted(batch.offsets, entries, right=True) - 1).clamp(0, max(batch.samples - 1, 0))
        key = torch.div(bag, samples, rounding_mode="floor")
        sample = bag - key * samples
        rows = rows_of[key]
        trouble = batch.trouble(rows)
        pack = pack_of[key]
        if not grouped:      # entries of a pack together, in their given order within it
            order = torch.argsort(pack, stable=True)
            key, sample, pack, rows = key[order], sample[order], pack[order], rows[order]
            batch = _Batch(batch.indices[order], batch.offsets, None if batch.values is None else batch.values[order])
        ends = self._pack_ends(keys, bags.key_lengths, batch.indices.numel()) if grouped else None
        if ends is None:
            # one host round trip: the checks and where every pack's entries end
            flags = torch.cat([trouble.view(1).long(), torch.bincount(pack, minlength=len(self.packs)).cumsum(0)])
            trouble, *ends = flags.tolist()
        else:
            trouble = self.check_batches and not checked and bool(trouble)
        if trouble:
            self._explain_keyed(keys, batch, key, rows)
        pooled, begins = {}, [0, *ends[:-1]]

        def pool(index):
            module, members = self.packs[index], self._members[index]
            part = slice(begins[index], ends[index])
            ids = batch.indices[part] + start_of[key[part]]
            bag = sample[part] * len(members) + position_of[key[part]]
            x = None if batch.values is None else batch.values[part]
            sums = module.bags(ids, bag, samples * len(members), samples, x)["vx"].view(samples, len(members), -1)
            if members[0][0].pooling == "mean":
                counts = torch.bincount(bag, minlength=samples * len(members)).view(samples, len(members), 1)
                sums = sums / counts.clamp(min=1)
            # unbind: its backward is one stack per pack (a select per table costs three kernels each)
            return zip((table.name for table, _ in members), sums.unbind(1))

        volumes = [(end - begin) * members[0][0].dim for begin, end, members in zip(begins, ends, self._members)]
        self.last_groups = self._groups(volumes, device)
        for group in self.last_groups:
            pooled.update(interleaved_group([lambda index=index: pool(index) for index in group], self._streams))
        return pooled

    def _groups(self, volumes, device):
        """The packs in K-interleaving groups by Eq. 3 (alac.nn.interleave.pack_groups) where
        interleave_packs says so and the tables are on a GPU, else each alone."""
        on = self.interleave_packs
        if on is None:
            on = device.type == "cuda" and torch.cuda.is_current_stream_capturing()
        if not on or not self._streams:
            return [[index] for index in range(len(volumes))]
        return pack_groups(volumes, wave_values(device))

    def _pack_ends(self, keys, key_lengths, entries):
        """Where every pack's entries end, from the host's entries per key (keys in the packs' order),
        or None without them."""
        if key_lengths is None:
            return None
        if len(key_lengths) != len(keys) or sum(key_lengths) != entries:
            raise DataError(f"KeyedBags key_lengths {list(key_lengths)[:4]} ... give {sum(key_lengths):,} entries "
                            f"for {len(keys)} keys, the indices hold {entries:,}")
        ends, total, position = [], 0, 0
        for members in self._members:
            total += sum(key_lengths[position:position + len(members)])
            position += len(members)
            ends.append(total)
        return ends

    def _explain_keyed(self, keys, batch, key, rows):
        batch.explain_offsets()
        outside = (batch.indices < 0) | (batch.indices >= rows)
        first = int(torch.nonzero(outside)[0])
        name = keys[int(key[first])]
        bad = int(batch.indices[first])
        raise DataError(f"table {name!r}: feature id {bad} is outside its {self.tables[name].rows:,} rows",
                        token=str(bad))
