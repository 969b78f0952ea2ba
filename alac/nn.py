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

import torch

from alac.errors import DataError, OptionError
from alac.ir.model_ir import delta_name
from alac.ir.pipeline import lower
from alac.optimizers import get_optimizer
from alac.runtime.executor import step_settings
from alac.runtime.layout import default_device
from alac.runtime.reference import ReferenceBackend
from alac.runtime.state import ModelState


class SparseAggregate(torch.nn.Module):
    def __init__(self, model, n_features, optimizer="adagrad", lr=None, seed=0, device=None, value_scale=1.0):
        """model: an alac.dsl.Model (its aggregate is what is used; loss and predict may be left out);
        n_features: rows of its tables; lr: the sparse step (None: the optimizer's default);
        value_scale: the data's mean |x| (AdaGrad's eps is in its units)."""
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
        state = ModelState.initial(model, torch.arange(self.n_features), device, seed, self.ir.optimizer)
        self._params = tuple(state.params)
        self._states = tuple(state.states)
        for name, tensor in {**state.params, **state.states}.items():
            self.register_buffer(name, tensor)
        # a leaf that requires grad, so that autograd calls backward though the tables do not
        self._anchor = torch.zeros(0, requires_grad=True)

    @property
    def state(self):
        """The tables and optimizer state as a ModelState over this module's buffers."""
        return ModelState({name: getattr(self, name) for name in self._params}, {},
                          {name: getattr(self, name) for name in self._states})

    def forward(self, indices, offsets, values=None, fields=None, n_fields=None):
        """{accum name: [B] or [B, k] float32} of the B rows indices[offsets[i]:offsets[i + 1]]; with
        fields (the field in [0, n_fields) of every entry) pooled per field: [B, n_fields] or
        [B, n_fields, k], every field's bag of one sample in one operation (DeepFM's embeddings)."""
        indices, offsets, values = self._checked(indices, offsets, values)
        if fields is not None:
            fields = self._checked_fields(fields, indices, n_fields)
        outputs = _Aggregate.apply(self, indices, offsets, values, fields, n_fields, self._anchor)
        return dict(zip((a.name for a in self.ir.accums), outputs))

    @staticmethod
    def _checked_fields(fields, indices, n_fields):
        fields = torch.as_tensor(fields, device=indices.device)
        if n_fields is None or fields.shape != indices.shape or fields.is_floating_point():
            raise DataError(f"fields are one integer per index ({tuple(indices.shape)}) with n_fields given, got "
                            f"{tuple(fields.shape)} and n_fields={n_fields}")
        outside = torch.nonzero((fields < 0) | (fields >= n_fields))
        if outside.numel():
            raise DataError(f"field {int(fields[outside[0, 0]])} is outside [0, {n_fields})",
                            token=str(int(fields[outside[0, 0]])))
        return fields.long()

    def _checked(self, indices, offsets, values):
        device = getattr(self, self._params[0]).device
        indices, offsets = torch.as_tensor(indices, device=device), torch.as_tensor(offsets, device=device)
        if indices.dim() != 1 or offsets.dim() != 1 or indices.is_floating_point() or offsets.is_floating_point():
            raise DataError("indices and offsets are 1-D integer tensors (CSR: offsets has one entry per row "
                            "and one more)")
        if offsets.numel() < 1 or int(offsets[0]) != 0 or int(offsets[-1]) != indices.numel() \
                or bool((offsets.diff() < 0).any()):
            raise DataError(f"offsets must rise from 0 to the {indices.numel():,} indices, got "
                            f"{offsets[:4].tolist()} ... {offsets[-2:].tolist()}")
        outside = torch.nonzero((indices < 0) | (indices >= self.n_features))
        if outside.numel():
            raise DataError(f"feature id {int(indices[outside[0, 0]])} is outside the table's "
                            f"{self.n_features:,} rows", token=str(int(indices[outside[0, 0]])))
        if values is not None:
            values = torch.as_tensor(values, dtype=torch.float32, device=device)
            if values.shape != indices.shape:
                raise DataError(f"values has {tuple(values.shape)} entries for {tuple(indices.shape)} indices")
        return indices.long(), offsets.long(), values

    def _edges(self, indices, offsets, values):
        row = torch.repeat_interleave(torch.arange(offsets.numel() - 1, device=indices.device), offsets.diff())
        x = torch.ones(indices.numel(), device=indices.device) if values is None else values
        return row, x

    def settings(self, samples):
        """The step's coefficients for a batch of samples (AdaGrad's eps is per batch size)."""
        return step_settings(self.model, self.ir, self.optimizer, max(1, samples), self.value_scale)


class _Aggregate(torch.autograd.Function):
    """Accums summed per bag (a sample, or a sample's field: bag = sample * n_fields + field)."""

    @staticmethod
    def forward(ctx, module, indices, offsets, values, fields, n_fields, anchor):
        row, x = module._edges(indices, offsets, values)
        samples, per_sample = offsets.numel() - 1, 1 if fields is None else n_fields
        bag = row if fields is None else row * n_fields + fields
        accums, _ = module._reference.accums(module.state, indices, x, bag, samples * per_sample)
        ctx.module, ctx.samples = module, samples
        ctx.save_for_backward(indices, bag, x)
        shape = (samples,) if fields is None else (samples, n_fields)
        return tuple(accums[a.name].view(*shape, *accums[a.name].shape[1:]) for a in module.ir.accums)

    @staticmethod
    def backward(ctx, *grads):
        module = ctx.module
        indices, bag, x = ctx.saved_tensors
        state = module.state
        gathered = {name: value[indices] for name, value in state.params.items()}
        deltas = {}
        for accum, grad in zip(module.ir.accums, grads):
            lanes = (module.ir.factor_size,) if accum.vector else ()
            deltas[delta_name(accum.name)] = torch.zeros((bag.numel(), *lanes), device=x.device) if grad is None \
                else grad.reshape(-1, *lanes)[bag]
        module._reference.apply(state, indices, x, gathered, deltas, module.lr, 1.0, module.settings(ctx.samples))
        return None, None, None, None, None, None, torch.zeros(0)
