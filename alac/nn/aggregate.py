"""SparseAggregate: a DSL model's Aggregate as a torch module whose backward steps the rows (alac.nn)."""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass

import torch

from alac.errors import DataError, OptionError
from alac.ir.names import delta_name
from alac.ir.pipeline import lower
from alac.optimizers import get_optimizer
from alac.runtime.device.memory import check_feature_tables
from alac.runtime.execution.executor import step_settings
from alac.runtime.execution.reference import ReferenceBackend
from alac.runtime.execution.state import ModelState, row_bytes_of
from alac.runtime.movement.layout import default_device


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
    graphable = True    # a step queues no host read, so a CUDA graph may replay it (alac.nn.GraphedStep)

    def __init__(self, model, n_features, optimizer="adagrad", lr=None, seed=0, device=None, value_scale=1.0,
                 dtype=torch.float32, backend="auto", semantics="sync", rows=None):
        """model: an alac.dsl.Model (its aggregate is what is used; loss and predict may be left out);
        n_features: rows of its tables; lr: the sparse step (None: the optimizer's default);
        value_scale: the data's mean |x| (AdaGrad's eps is in its units); dtype: the params' storage
        (float32, bfloat16 or float16: half the bytes, read into float32 sums and updated in float32;
        the optimizer's state stays float32); backend: "auto" (the generated kernels on a GPU, faster than the torch
        programs in benchmarks/fields.py, the torch programs elsewhere), "reference" (the model's torch
        programs),
        "triton" (its generated kernels, alac.codegen.bag_kernels: three launches a step, and a
        gradient buffer the size of the tables) or "interpret" (the same kernels in Triton's
        interpreter, on the CPU); semantics: "sync" (every touched row stepped once on its summed
        gradient, as one batch) or, on the kernels, "async" (every entry's gradient stepped at once, a
        row's entries racing as Hogwild's do; no gradient buffer, float32 tables); rows: the ids of the
        rows this module holds, drawn as the whole table draws them (default: every row; a rank's share,
        alac.nn.ranked)."""
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
        self._kernels = _kernels_for(backend, self.ir, device, dtype)
        if semantics not in ("sync", "async") or (semantics == "async" and (self._kernels is None or
                                                                           dtype != torch.float32)):
            raise OptionError(f"SparseAggregate semantics is sync, or async on the generated kernels (backend "
                              f"triton or interpret) with float32 tables; got {semantics!r} with backend {backend!r} "
                              f"and {dtype}")
        self.asynchronous = semantics == "async"
        # refused before allocation when the rows and their optimizer state do not fit
        narrower = (4 - torch.empty((), dtype=dtype).element_size()) * self.ir.row_floats
        held = self.n_features if rows is None else rows.numel()
        check_feature_tables(held, row_bytes_of(self.ir) - narrower, f"the tables of {self.ir.name}", device)
        state = ModelState.initial(model, torch.arange(self.n_features), device, seed, self.ir.optimizer, rows=rows)
        self._params = tuple(state.params)
        self._states = tuple(state.states)
        for name, tensor in state.params.items():
            self.register_buffer(name, tensor.to(dtype))
        for name, tensor in state.states.items():
            self.register_buffer(name, tensor)
        # a leaf that requires grad, so that autograd calls backward though the tables do not; on the
        # tables' device, so that a backward that stepped them on a side stream joins the caller's stream
        self._anchor = torch.zeros(0, device=device, requires_grad=True)
        self._deferred = None       # inside deferred(): the recorded (indices, x, bag, deltas, samples)
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

    def rows_for(self, indices):
        """(the state a batch's entries read, their indices into it): this module's own tables."""
        return self.state, indices

    @property
    def table_device(self):
        return getattr(self, self._params[0]).device

    def bags(self, indices, bag, n_bags, samples, values=None):
        """{accum name: [n_bags] or [n_bags, K]}: entry e (feature indices[e], value values[e] or 1)
        summed into bag[e]; samples (the batch size) sets the optimizer's per-batch hypers. Inputs as
        forward checks them (int64, on the tables' device)."""
        outputs = _Aggregate.apply(self, indices, bag, n_bags, samples, values, self._anchor)
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
                    for indices, x, bag, deltas, _ in recorded:
                        for tensor in (indices, x, bag, *deltas.values()):
                            if tensor is not None:
                                tensor.record_stream(stream)
                self._step(*_joined(recorded))
        finally:
            self._deferred = None

    def _step(self, indices, x, bag, deltas, samples):
        """The optimizer on the rows of the entries (indices, x or None for ones, bag) from their
        bags' dLoss/dAccum (deltas: {accum name: [n_bags] or [n_bags, K]})."""
        if indices.numel() == 0:
            return
        state = self.state
        if self._kernels is not None:
            self._kernels.apply(state, indices, x, bag, deltas, self.lr, 1.0, self.settings(samples),
                                self.asynchronous)
            return
        gathered = {name: value[indices].float() for name, value in state.params.items()}
        per_entry = {delta_name(name): d[bag] for name, d in deltas.items()}
        self._reference.apply(state, indices, _values(x, indices), gathered, per_entry, self.lr, 1.0,
                              self.settings(samples))


TABLE_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
BACKENDS = ("auto", "reference", "triton", "interpret")


def _kernels_for(backend, ir, device, dtype):
    """The generated kernels' launcher of a backend (None: the reference programs)."""
    if backend not in BACKENDS:
        raise OptionError(f"SparseAggregate backend is one of {', '.join(BACKENDS)}, got {backend!r}")
    if backend == "auto":
        backend = "triton" if device.type == "cuda" else "reference"
    if backend == "reference":
        return None
    if (backend == "triton") != (device.type == "cuda"):
        raise OptionError(f"backend {backend!r} runs on {'a CUDA device' if backend == 'triton' else 'the CPU'}; "
                          f"the tables are on {device}")
    from alac.runtime.execution.bag_launcher import BagLauncher

    return BagLauncher(ir, interpret=backend == "interpret", param_dtype=dtype)


def _values(x, indices):
    """The entries' values: x, or ones where it is None (unit values)."""
    return torch.ones(indices.numel(), device=indices.device) if x is None else x


def _joined(recorded):
    """The recorded calls of a deferred step as one: entries end to end, every call's bags after the
    previous calls' (its bags renumbered), their dLoss/dAccum stacked; the samples summed."""
    indices, x, bags, deltas, samples = zip(*recorded)
    first, renumbered = 0, []
    for bag, d in zip(bags, deltas):
        renumbered.append(bag + first)
        first += next(iter(d.values())).shape[0]
    values = None if all(v is None for v in x) else torch.cat([_values(v, i) for i, v in zip(indices, x)])
    return (torch.cat(indices), values, torch.cat(renumbered),
            {name: torch.cat([d[name] for d in deltas]) for name in deltas[0]}, sum(samples))


class _Aggregate(torch.autograd.Function):
    """Accums summed per bag; backward applies the optimizer to the entries' rows."""

    @staticmethod
    def forward(ctx, module, indices, bag, n_bags, samples, x, anchor):
        state, rows = module.rows_for(indices)
        if indices.numel() == 0:
            # a rank's empty share of a batch (alac.nn.ranked): nothing to launch, every bag 0
            accums = {a.name: torch.zeros((n_bags, module.ir.factor_size) if a.vector else (n_bags,),
                                          device=indices.device) for a in module.ir.accums}
        elif module._kernels is not None:
            accums = module._kernels.aggregate(state, rows, x, bag, n_bags)
        else:
            accums, _ = module._reference.accums(state, rows, _values(x, indices), bag, n_bags)
        ctx.module, ctx.samples, ctx.n_bags, ctx.anchor_device = module, samples, n_bags, anchor.device
        ctx.save_for_backward(indices, bag, x)
        return tuple(accums[a.name] for a in module.ir.accums)

    @staticmethod
    def backward(ctx, *grads):
        module = ctx.module
        indices, bag, x = ctx.saved_tensors
        deltas = {}
        for accum, grad in zip(module.ir.accums, grads):
            lanes = (module.ir.factor_size,) if accum.vector else ()
            deltas[accum.name] = torch.zeros((ctx.n_bags, *lanes), device=bag.device) if grad is None else grad
        if module._deferred is not None:
            module._deferred.append((indices, x, bag, deltas, ctx.samples))
        else:
            module._step(indices, x, bag, deltas, ctx.samples)
        return None, None, None, None, None, None, torch.zeros(0, device=ctx.anchor_device)
