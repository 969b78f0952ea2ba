"""Launching alac.nn's generated kernels (alac.codegen.bag_kernels): arguments bound from their
manifest descriptions by role, never by name; the gradient sums and touched flags the gradients and
update kernels share are kept between calls (zero between steps: the update kernel re-zeroes what
it reads)."""

from __future__ import annotations

import copy

import torch

from alac.codegen import generate_bag_kernels, load_module, next_power_of_two

# Values in one program's [S, C, BLOCK_K] tile of entries (untuned: the flow kernels' tiles are as
# large); S * C entries a program, C at most 64.
TILE_VALUES = 4096


class BagLauncher:
    def __init__(self, ir, interpret, param_dtype=torch.float32):
        """param_dtype: the tables' storage (the kernels' pointers are typed by it)."""
        self.ir = ir
        self.generated = generate_bag_kernels(ir, str(param_dtype).removeprefix("torch."))
        module = load_module(self.generated, interpret=interpret)
        specs = (self.generated.aggregate, self.generated.gradients, self.generated.update, self.generated.apply_async)
        self.kernels = {spec.role: (spec, getattr(module, spec.name)) for spec in specs}
        entries = max(16, TILE_VALUES // next_power_of_two(max(1, ir.factor_size)))
        self.C = min(64, entries)
        self.S = entries // self.C
        self._scratch = None     # (gradient sums per param, touched flags), made on the first step
        self._no_values = {}     # device -> a float32 stand-in for the values pointer of unit values

    def __deepcopy__(self, memo):
        """The launcher of a copied module (copy.deepcopy of a model): the same compiled kernels (they
        hold locks, which do not copy, and nothing that changes), scratch of its own."""
        twin = copy.copy(self)
        twin._scratch, twin._no_values = None, {}
        return twin

    def _launch(self, role, entries, values, has_values):
        spec, kernel = self.kernels[role]
        if not entries:
            return
        arguments = [values[(a.role, a.of)] for a in spec.args]
        grid = (-(-entries // (self.S * self.C)),)
        kernel[grid](*arguments, HAS_VALUES=has_values, C=self.C, S=self.S, ONE_TILE=False, WIDE_IDS=False)

    def _entries(self, indices, x, bag):
        if x is None:     # never read (HAS_VALUES off), but a float32 pointer as the signature says
            x = self._no_values.setdefault(indices.device, torch.zeros(1, device=indices.device))
        return {("size", "entries"): indices.numel(), ("entries", "feature"): indices, ("entries", "value"): x,
                ("entries", "bag"): bag}

    def aggregate(self, state, indices, x, bag, n_bags):
        """{accum: [n_bags] or [n_bags, K]} of the entries (feature indices, value x or 1, bag)."""
        device = indices.device
        outputs = {a.name: torch.zeros((n_bags, self.ir.factor_size) if a.vector else (n_bags,), device=device)
                   for a in self.ir.accums}
        values = self._entries(indices, x, bag)
        values.update({("param", name): tensor for name, tensor in state.params.items()})
        values.update({("output", name): tensor for name, tensor in outputs.items()})
        self._launch("aggregate", indices.numel(), values, x is not None)
        return outputs

    def apply(self, state, indices, x, bag, deltas, lr, scale, settings, asynchronous=False):
        """The optimizer once on every row the entries touch, on its summed gradient times scale
        (asynchronous: once per entry, on the entry's gradient, changes added atomically); deltas:
        {accum: dLoss/dAccum per bag}."""
        values = self._entries(indices, x, bag)
        values.update({("param", name): tensor for name, tensor in state.params.items()})
        values.update({("state", name): tensor for name, tensor in state.states.items()})
        values.update({("deltas", name): tensor.contiguous() for name, tensor in deltas.items()})
        values.update({("launch", "lr"): float(lr), ("launch", "scale"): float(scale)})
        values.update({("hyper", name): float(value) for name, value in settings.hypers.items()})
        for kind, per_param in (("gradient_l2", settings.gradient_l2), ("update_l1", settings.update_l1),
                                ("update_l2", settings.update_l2)):
            values.update({(kind, p.name): float(per_param.get(p.name, 0.0)) for p in self.ir.params})
        if asynchronous:
            self._launch("apply_async", indices.numel(), values, x is not None)
            return
        rows = next(iter(state.params.values())).shape[0]
        if self._scratch is None or self._scratch[1].numel() != rows:
            # sized to the tables (a cache's grows: alac.nn.host_cached)
            self._scratch = ({name: torch.zeros(tensor.shape, device=tensor.device)
                              for name, tensor in state.params.items()},
                             torch.zeros(rows, dtype=torch.int32,
                                         device=indices.device))
        sums, touched = self._scratch
        values.update({("grad", name): tensor for name, tensor in sums.items()})
        values[("touched", "")] = touched
        self._launch("gradients", indices.numel(), values, x is not None)
        self._launch("update", indices.numel(), values, x is not None)
