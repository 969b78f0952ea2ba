"""The reference executor: the same IR evaluated with vectorized PyTorch (gathers, index_add).

It is the oracle of every kernel test, the fallback without a GPU, and the stage-based PyTorch
baseline of the benchmarks. It reads the same layout and the same batches (chunk lists) as the
generated kernels, so both compute the same mini-batch steps; only summation order differs.
"""

from __future__ import annotations

import torch

from alac.codegen import TorchPrograms
from alac.ir.names import LOSS, PREDICTION, delta_name, global_grad_name, grad_name, l2_name


def _full(value, shape, like):
    if isinstance(value, torch.Tensor):
        return value.to(device=like.device, dtype=torch.float32).expand(shape)
    # a number is filled in on the device (a tensor made from it would be copied over, a host wait)
    return torch.full((), float(value), device=like.device).expand(shape)


def _row_groups(feature):
    """The edges' rows grouped without a host round trip (torch.unique waits for the device): E group
    slots for E edges, the first U the distinct rows in increasing order, the others copies of the
    last one. Returns (the row of every slot, the slot of every edge, the slots holding a distinct
    row, the last such slot as a 1-element device tensor)."""
    ordered, order = torch.sort(feature)
    starts = torch.ones_like(ordered, dtype=torch.bool)
    starts[1:] = ordered[1:] != ordered[:-1]
    slot_sorted = torch.cumsum(starts, 0) - 1
    inverse = torch.empty_like(slot_sorted)
    inverse[order] = slot_sorted
    # every edge of a slot writes the slot's row: the same value, in any order
    rows = torch.zeros_like(ordered).scatter_(0, slot_sorted, ordered)
    last = slot_sorted[-1:]           # a 1-element tensor: indexing by it stays on the device
    valid = torch.arange(feature.numel(), device=feature.device) <= last
    return torch.where(valid, rows, rows.index_select(0, last)), inverse, valid, last


def _last_group_beyond(values, valid, last):
    """values of every slot, the slots past the distinct rows given the last row's own new values (they
    write that row too, and must write what its slot writes)."""
    mask = valid.view(-1, *([1] * (values.dim() - 1)))
    return torch.where(mask, values, values.index_select(0, last))


class ReferenceBackend:
    name = "reference"

    def __init__(self, ir, given_deltas=False):
        """given_deltas: apply() takes dLoss/dAccum from outside (alac.nn), one per lane of a vector
        accum."""
        self.ir = ir
        self.programs = TorchPrograms(ir, given_deltas)

    def _batch_edges(self, layout, chunks):
        """Features, values and batch rows of the chunks' real edges."""
        edges, feature, row = layout.edges_of(chunks)
        x = layout.edge_value[edges] if layout.edge_value is not None else torch.ones(
            edges.numel(), device=edges.device)
        return feature, x, row

    def accums(self, state, feature, x, row, rows):
        """({accum: [rows] or [rows, k]} summed over the edges (feature, value x, sample row), the
        params gathered per edge)."""
        # params in host memory are gathered there and the rows moved to the edges' device
        # (float32 sums of narrower params: alac.nn's bfloat16 and float16 tables)
        gathered = {name: value[feature.to(value.device)].to(feature.device, torch.float32)
                    for name, value in state.params.items()}
        contributions = self.programs.contributions(x, **gathered)
        accums = {}
        for accum in self.ir.accums:
            shape = (rows, self.ir.factor_size) if accum.vector else (rows,)
            value = _full(contributions[accum.name], (x.numel(),) + shape[1:], x)
            accums[accum.name] = torch.zeros(shape, device=x.device).index_add_(0, row, value)
        return accums, gathered

    def _forward(self, state, layout, labels, chunks):
        """The chunks' edges, gathered params, valid-slot mask and per-sample outputs (loss, deltas)."""
        C = layout.chunk_size
        rows = chunks.numel() * C
        feature, x, row = self._batch_edges(layout, chunks)
        accums, gathered = self.accums(state, feature, x, row, rows)
        slots = (chunks[:, None] * C + torch.arange(C, device=chunks.device)).reshape(-1)
        valid = layout.row_of_slot[slots] >= 0
        globals_ = {name: value[0] for name, value in state.globals.items()}
        return feature, x, row, gathered, valid, self.programs.sample(**accums, **globals_, y=labels[slots])

    def loss(self, state, layout, labels, chunks):
        """The summed loss of the chunks' samples at the current params (nothing changes)."""
        *_, valid, out = self._forward(state, layout, labels, chunks)
        return float(torch.where(valid, _full(out[LOSS], valid.shape, valid), 0.0).sum())

    def train_batch(self, state, layout, labels, chunks, lr, scale, settings, loss_sum):
        """One sync batch: every touched row gets the optimizer's rule once, on its summed
        gradient times scale; globals take plain SGD."""
        rows = chunks.numel() * layout.chunk_size
        feature, x, row, gathered, valid, out = self._forward(state, layout, labels, chunks)

        def masked(name):
            vector = self.programs.output_rank(name) == "lane"
            shape = (rows, self.ir.factor_size) if vector else (rows,)
            value = _full(out[name], shape, valid)
            return torch.where(valid[:, None] if vector else valid, value, 0.0)

        loss_sum += masked(LOSS).sum()
        deltas = {delta_name(a.name): masked(delta_name(a.name))[row] for a in self.ir.accums}
        self.apply(state, feature, x, gathered, deltas, lr, scale, settings)
        for name in self.ir.globals:
            state.globals[name] -= lr * scale * masked(global_grad_name(name)).sum()

    def apply(self, state, feature, x, gathered, deltas, lr, scale, settings):
        """The optimizer's rule once on every row the edges touch, on its summed gradient times scale:
        the gradients from every edge's feature, value, gathered params and dLoss/dAccum (deltas)."""
        grads = self.programs.edge(x, **gathered, **deltas,
                                   **{l2_name(p.name): settings.gradient_l2.get(p.name, 0.0) for p in self.ir.params})
        if not feature.numel():
            return
        touched, inverse, valid, last = _row_groups(feature)
        optimizer = self.ir.optimizer
        for param in self.ir.params:
            shape = (feature.numel(), param.size) if param.vector else (feature.numel(),)
            per_edge = _full(grads[grad_name(param.name)], shape, x)
            total = torch.zeros((touched.numel(),) + shape[1:], device=x.device).index_add_(0, inverse, per_edge)
            update = self.programs.update_vector if param.vector else self.programs.update_scalar
            states = {f"s_{st}": state.states[f"{param.name}_{st}"][touched] for st, _, _ in optimizer.states}
            new = update(p=state.params[param.name][touched], g=total * scale, **states, lr=lr,
                         **{f"h_{h}": settings.hypers[h] for h in optimizer.hypers},
                         l1=settings.update_l1.get(param.name, 0.0), l2=settings.update_l2.get(param.name, 0.0),
                         K=self.ir.factor_size)
            table = state.params[param.name]
            table[touched] = _last_group_beyond(_full(new["new_p"], total.shape, x), valid, last).to(table.dtype)
            for st, _, _ in optimizer.states:
                target = state.states[f"{param.name}_{st}"]
                values = _full(new[f"new_s_{st}"], target[touched].shape, x)
                target[touched] = _last_group_beyond(values, valid, last)

    def predict(self, state, layout):
        C = layout.chunk_size
        chunks = torch.arange(layout.n_chunks, device=layout.device)
        feature, x, row = self._batch_edges(layout, chunks)
        accums, _ = self.accums(state, feature, x, row, layout.n_chunks * C)
        globals_ = {name: value[0] for name, value in state.globals.items()}
        # in float64: PyTorch's float32 reductions over the factor lanes round differently with the
        # number of rows (vectorized blocks and remainders), so a row's float32 prediction depended
        # on the rows predicted with it (scikit-learn's subset-invariance check caught a 3-ulp change)
        out = self.programs.predict(**{k: v.double() for k, v in accums.items()},
                                    **{k: v.double() for k, v in globals_.items()})
        return _full(out[PREDICTION], (layout.n_chunks * C,), x).float().clone()
