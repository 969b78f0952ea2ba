"""alac.nn: a DSL model's Aggregate as a torch module, for models with a deep part.

    wide = SparseAggregate(FM(k=16), n_features=1_000_000, optimizer="adagrad", lr=0.05)
    accums = wide(indices, offsets, values)          # {"wx": [B], "vx": [B, 16], "v2x2": [B, 16]}
    logit = accums["wx"] + 0.5 * (accums["vx"] ** 2 - accums["v2x2"]).sum(1) + deep(dense)
    loss = F.binary_cross_entropy_with_logits(logit, labels)
    loss.backward()                                  # the sparse rows are updated here
    dense_optimizer.step()                           # any torch.optim for the deep part

forward sums the model's per-edge contributions into its accums for a batch of sparse rows given as
CSR (int64 indices, offsets of B + 1 entries, optional float32 values); backward takes dLoss/dAccum
from autograd and applies the model's optimizer (its rule, state and L1/L2) to the rows the batch
touched, at the params of that moment: no dense gradient tensor, no separate optimizer step. The
tables and optimizer state are buffers (in state_dict, moved by .to()); the model's globals, loss
and predict are not used and may be left out (the deep part has its own biases and loss); with
fields, every field of a sample pools into its own bag. The sums and updates run as the
model's reference programs (vectorized torch gathers and index_add, alac.runtime.reference), the
programs every generated kernel is tested against.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass

import torch

from alac.dsl import Model, Normal, Param
from alac.errors import DataError, OptionError
from alac.ir.model_ir import delta_name
from alac.ir.pipeline import lower
from alac.optimizers import get_optimizer
from alac.runtime.executor import step_settings
from alac.runtime.layout import default_device
from alac.runtime.memory import check_feature_tables
from alac.runtime.reference import ReferenceBackend
from alac.runtime.state import ModelState, row_bytes_of


@dataclass
class _Batch:
    """A batch of sparse rows as CSR on the tables' device: int64 indices and offsets, float32 values
    or None. Its checks make one host round trip (trouble); explain finds what failed."""

    indices: torch.Tensor
    offsets: torch.Tensor
    values: torch.Tensor | None

    @classmethod
    def of(cls, indices, offsets, values, device):
        """The batch with its shapes checked (nothing waits for the device)."""
        indices, offsets = torch.as_tensor(indices, device=device), torch.as_tensor(offsets, device=device)
        if indices.dim() != 1 or offsets.dim() != 1 or indices.is_floating_point() or offsets.is_floating_point() \
                or offsets.numel() < 1:
            raise DataError("indices and offsets are 1-D integer tensors (CSR: offsets has one entry per row "
                            "and one more)")
        if values is not None:
            values = torch.as_tensor(values, dtype=torch.float32, device=device)
            if values.shape != indices.shape:
                raise DataError(f"values has {tuple(values.shape)} entries for {tuple(indices.shape)} indices")
        return cls(indices.long(), offsets.long(), values)

    @property
    def samples(self):
        return self.offsets.numel() - 1

    def trouble(self, rows):
        """A device bool: offsets not rising from 0 to the indices, or an id outside [0, rows)."""
        offsets, indices = self.offsets, self.indices
        return (offsets[0] != 0) | (offsets[-1] != indices.numel()) | (offsets.diff() < 0).any() \
            | ((indices < 0) | (indices >= rows)).any()

    def explain(self, rows, table=None):
        """DataError for what trouble found, if it is this batch's (table: the name in the message)."""
        self.explain_offsets(table)
        indices = self.indices
        outside = (indices < 0) | (indices >= rows)
        if bool(outside.any()):
            bad = int(indices[outside][0])
            where = "the table's" if table is None else "its"
            raise DataError(f"{'' if table is None else f'table {table!r}: '}feature id {bad} is outside {where} "
                            f"{rows:,} rows", token=str(bad))

    def explain_offsets(self, table=None):
        offsets, indices = self.offsets, self.indices
        if int(offsets[0]) != 0 or int(offsets[-1]) != indices.numel() or bool((offsets.diff() < 0).any()):
            raise DataError(f"{'' if table is None else f'table {table!r}: '}offsets must rise from 0 to the "
                            f"{indices.numel():,} indices, got {offsets[:4].tolist()} ... {offsets[-2:].tolist()}")

    def samples_of_entries(self):
        """The sample of every entry (output_size given: no host round trip)."""
        return torch.repeat_interleave(torch.arange(self.samples, device=self.indices.device), self.offsets.diff(),
                                       output_size=self.indices.numel())


class SparseAggregate(torch.nn.Module):
    def __init__(self, model, n_features, optimizer="adagrad", lr=None, seed=0, device=None, value_scale=1.0,
                 dtype=torch.float32):
        """model: an alac.dsl.Model (its aggregate is what is used; loss and predict may be left out);
        n_features: rows of its tables; lr: the sparse step (None: the optimizer's default);
        value_scale: the data's mean |x| (AdaGrad's eps is in its units); dtype: the params' storage
        (float32, bfloat16 or float16: half the bytes, read into float32 sums and updated in float32;
        the optimizer's state stays float32)."""
        if dtype not in TABLE_DTYPES:
            raise OptionError(f"table dtype is one of {', '.join(map(str, TABLE_DTYPES))}, got {dtype}")
        super().__init__()
        self.model = model
        self.optimizer = get_optimizer(optimizer)
        self.ir = lower(model, self.optimizer, aggregate_only=True)
        if lr is None and self.optimizer.default_lr is None:
            raise OptionError(f"give SparseAggregate an lr: optimizer {self.optimizer.name} has no default")
        self.lr = self.optimizer.default_lr if lr is None else lr
        self.n_features = int(n_features)
        self.value_scale = value_scale
        # the deep part's dLoss/dAccum vary over a vector accum's lanes, whatever the model's loss says
        self._reference = ReferenceBackend(self.ir, given_deltas=True)
        device = torch.device(device) if device is not None else default_device()
        # refused before allocation when the rows and their optimizer state do not fit
        narrower = (4 - torch.empty((), dtype=dtype).element_size()) * sum(p.size for p in self.ir.params)
        check_feature_tables(self.n_features, row_bytes_of(self.ir) - narrower, f"the tables of {self.ir.name}",
                             device)
        state = ModelState.initial(model, torch.arange(self.n_features), device, seed, self.ir.optimizer)
        self._params = tuple(state.params)
        self._states = tuple(state.states)
        for name, tensor in state.params.items():
            self.register_buffer(name, tensor.to(dtype))
        for name, tensor in state.states.items():
            self.register_buffer(name, tensor)
        # a leaf that requires grad, so that autograd calls backward though the tables do not
        self._anchor = torch.zeros(0, requires_grad=True)
        self._deferred = None       # inside deferred(): the recorded (indices, x, deltas, samples)
        self.check_batches = True   # forward checks its batch (ids, offsets, fields) with one host round trip

    @property
    def state(self):
        """The tables and optimizer state as a ModelState over this module's buffers."""
        return ModelState({name: getattr(self, name) for name in self._params}, {},
                          {name: getattr(self, name) for name in self._states})

    def forward(self, indices, offsets, values=None, fields=None, n_fields=None):
        """{accum name: [B] or [B, k] float32} of the B rows indices[offsets[i]:offsets[i + 1]]; with
        fields (the field in [0, n_fields) of every entry) pooled per field: [B, n_fields] or
        [B, n_fields, k], every field's bag of one sample in one operation (DeepFM's embeddings)."""
        batch = _Batch.of(indices, offsets, values, self.table_device)
        if fields is not None:
            fields = torch.as_tensor(fields, device=batch.indices.device)
            if n_fields is None or fields.shape != batch.indices.shape or fields.is_floating_point():
                raise DataError(f"fields are one integer per index ({tuple(batch.indices.shape)}) with n_fields "
                                f"given, got {tuple(fields.shape)} and n_fields={n_fields}")
            fields = fields.long()
        # the one host round trip of the checks (the details only on a failure); skipped where the
        # caller vouches for its batches (check_batches False), so that the host may queue steps ahead
        if self.check_batches and self._trouble(batch, fields, n_fields):
            batch.explain(self.n_features)
            if fields is not None:
                bad = fields[(fields < 0) | (fields >= n_fields)][0]
                raise DataError(f"field {int(bad)} is outside [0, {n_fields})", token=str(int(bad)))
        bag = batch.samples_of_entries()
        if fields is not None:
            bag = bag * n_fields + fields
        shape = (batch.samples,) if fields is None else (batch.samples, n_fields)
        return {name: value.view(*shape, *value.shape[1:])
                for name, value in self.bags(batch.indices, bag, math.prod(shape), batch.samples,
                                             batch.values).items()}

    def _trouble(self, batch, fields, n_fields):
        trouble = batch.trouble(self.n_features)
        if fields is not None:
            trouble = trouble | ((fields < 0) | (fields >= n_fields)).any()
        return bool(trouble)

    @property
    def table_device(self):
        return getattr(self, self._params[0]).device

    def bags(self, indices, bag, n_bags, samples, values=None):
        """{accum name: [n_bags] or [n_bags, k]}: entry e (feature indices[e], value values[e] or 1)
        summed into bag[e]; samples (the batch size) sets the optimizer's per-batch hypers. Inputs as
        forward checks them (int64, on the tables' device)."""
        x = torch.ones(indices.numel(), device=indices.device) if values is None else values
        outputs = _Aggregate.apply(self, indices, bag, n_bags, samples, x, self._anchor)
        return dict(zip((a.name for a in self.ir.accums), outputs))

    def settings(self, samples):
        """The step's coefficients for a batch of samples (AdaGrad's eps is per batch size)."""
        return step_settings(self.model, self.ir, self.optimizer, max(1, samples), self.value_scale)

    @contextlib.contextmanager
    def deferred(self):
        """Within it, backward records the rows' gradients instead of stepping them; on leaving it
        (without an error) the optimizer steps once on them all, as on one batch of every recorded
        call's samples: the micro-batches of one step then train as the whole batch would."""
        if self._deferred is not None:
            raise OptionError("deferred() is already active on this module")
        self._deferred = []
        try:
            yield
            recorded, self._deferred = self._deferred, None
            if recorded:
                if self.table_device.type == "cuda":
                    # made on a side stream (K-interleaving): not reused before this stream has read them
                    stream = torch.cuda.current_stream()
                    for indices, x, deltas, _ in recorded:
                        for tensor in (indices, x, *deltas.values()):
                            tensor.record_stream(stream)
                indices, x, deltas, samples = zip(*recorded)
                indices, x = torch.cat(indices), torch.cat(x)
                deltas = {name: torch.cat([d[name] for d in deltas]) for name in deltas[0]}
                self._step(indices, x, deltas, sum(samples))
        finally:
            self._deferred = None

    def _step(self, indices, x, deltas, samples):
        state = self.state
        gathered = {name: value[indices].float() for name, value in state.params.items()}
        self._reference.apply(state, indices, x, gathered, deltas, self.lr, 1.0, self.settings(samples))


TABLE_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


class _Aggregate(torch.autograd.Function):
    """Accums summed per bag; backward applies the optimizer to the entries' rows."""

    @staticmethod
    def forward(ctx, module, indices, bag, n_bags, samples, x, anchor):
        accums, _ = module._reference.accums(module.state, indices, x, bag, n_bags)
        ctx.module, ctx.samples = module, samples
        ctx.save_for_backward(indices, bag, x)
        return tuple(accums[a.name] for a in module.ir.accums)

    @staticmethod
    def backward(ctx, *grads):
        module = ctx.module
        indices, bag, x = ctx.saved_tensors
        deltas = {}
        for accum, grad in zip(module.ir.accums, grads):
            lanes = (module.ir.factor_size,) if accum.vector else ()
            deltas[delta_name(accum.name)] = torch.zeros((bag.numel(), *lanes), device=x.device) if grad is None \
                else grad[bag]
        if module._deferred is not None:
            module._deferred.append((indices, x, deltas, ctx.samples))
        else:
            module._step(indices, x, deltas, ctx.samples)
        return None, None, None, None, None, None, torch.zeros(0)


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

    def __init__(self, tables, seed=0, device=None, accesses=None, max_cost=None):
        """accesses, max_cost: split heavy packs (pack_tables)."""
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
                                              dtype=getattr(torch, dtype)))
            self._members.append(list(zip(members, starts)))
        self._keyed = {}       # (keys, device) -> _key_constants
        # KeyedBags with key_lengths: the ids are checked with a host round trip unless this is off
        self.check_batches = True
        # the tables pack by pack: KeyedBags in this order need no reordering
        self.keys = tuple(table.name for members in self._members for table, _ in members)

    def forward(self, features):
        """features: {table name: (indices, offsets[, values])} or KeyedBags (the fast path: a few
        operations per pack, however many tables)."""
        if isinstance(features, KeyedBags):
            return self._forward_keyed(features)
        missing = set(self.tables) - set(features)
        if missing:
            raise DataError(f"no rows given for tables {sorted(missing)}")
        batches, trouble = {}, []
        for pack, members in zip(self.packs, self._members):
            for table, _ in members:
                indices, offsets, *values = features[table.name]
                batch = _Batch.of(indices, offsets, values[0] if values else None, pack.table_device)
                trouble.append(batch.trouble(table.rows))
                batches[table.name] = batch
        samples_of = {name: batch.samples for name, batch in batches.items()}
        if len(set(samples_of.values())) > 1:
            raise DataError(f"every table needs the same rows, got {samples_of}")
        if bool(torch.stack(trouble).any()):     # one host round trip for every table's checks
            for name, batch in batches.items():
                batch.explain(self.tables[name].rows, name)
        samples = next(iter(samples_of.values()))
        pooled = {}
        for pack, members in zip(self.packs, self._members):
            parts = [(batches[table.name], start, position) for position, (table, start) in enumerate(members)]
            indices = torch.cat([batch.indices + start for batch, start, _ in parts])
            bag = torch.cat([batch.samples_of_entries() * len(members) + position for batch, _, position in parts])
            x = torch.cat([torch.ones(batch.indices.numel(), device=batch.indices.device) if batch.values is None
                           else batch.values for batch, _, _ in parts])
            sums = pack.bags(indices, bag, samples * len(members), samples, x)["vx"]
            sums = sums.view(samples, len(members), -1)
            if members[0][0].pooling == "mean":
                counts = torch.bincount(bag, minlength=samples * len(members)).view(samples, len(members), 1)
                sums = sums / counts.clamp(min=1)
            pooled.update((table.name, value) for (table, _), value in zip(members, sums.unbind(1)))
        return pooled

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

    def _forward_keyed(self, bags):
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
            trouble = self.check_batches and bool(trouble)
        if trouble:
            self._explain_keyed(keys, batch, key, rows)
        pooled, begin = {}, 0
        for index, (module, members) in enumerate(zip(self.packs, self._members)):
            part = slice(begin, ends[index])
            begin = ends[index]
            ids = batch.indices[part] + start_of[key[part]]
            bag = sample[part] * len(members) + position_of[key[part]]
            x = torch.ones(ids.numel(), device=device) if batch.values is None else batch.values[part]
            sums = module.bags(ids, bag, samples * len(members), samples, x)["vx"].view(samples, len(members), -1)
            if members[0][0].pooling == "mean":
                counts = torch.bincount(bag, minlength=samples * len(members)).view(samples, len(members), 1)
                sums = sums / counts.clamp(min=1)
            # unbind: its backward is one stack per pack (a select per table costs three kernels each)
            pooled.update((table.name, value) for (table, _), value in zip(members, sums.unbind(1)))
        return pooled

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
