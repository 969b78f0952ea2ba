"""Model state: the parameter and global tensors, indexed by the layout's re-indexed feature ids."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from alac.counter_random import normal, uniform
from alac.dsl import Constant, Normal, Uniform
from alac.runtime.device.memory import aligned_empty, mapped_view, pinned_copy, pinned_empty


def row_bytes_of(ir, names=None):
    """Bytes of one row of the model's params (those named, by default all): their values and their
    optimizer state (a state kept per row of a vector param, as AdaGrad's accumulator, is one value)."""
    return 4 * sum(p.size + sum(1 if per_row else p.size for _, _, per_row in ir.optimizer.states)
                   for p in ir.params if names is None or p.name in names)


def _initial_values(init, shape, generator):
    if isinstance(init, Constant):
        return torch.full(shape, float(init.value))
    if isinstance(init, Normal):
        return torch.randn(shape, generator=generator) * init.std + init.mean
    if isinstance(init, Uniform):
        return torch.rand(shape, generator=generator) * (init.high - init.low) + init.low
    raise TypeError(f"unknown initializer {init!r}")


# Tables of more rows draw their values from a counter-based generator (alac.counter_random), piece by
# piece where the table lives (on the GPU for a GPU's tables, host-placed ones too): a 676M-row FM table
# drawn at once and then permuted would take three times its 46 GB in host memory, and one CPU generator
# drew an 84 GiB FM k = 64 table for minutes. DRAW_VALUES values a piece keep its int64 counters and
# float64 temporaries near 1.5 GB.
DRAW_ROWS, DRAW_VALUES = 1 << 26, 1 << 25
# counter-based streams of the initial values; a table's counters start at its param's index << 40
INIT_STREAMS = (16, 17)


def _in_host(device, host):
    return host and torch.device(device).type == "cuda"


def _placed(values, device, host, table=True):
    """values on the device (a table copied there aligned: aligned_empty; values already there are
    kept), or (host) in pinned host memory when the device is a GPU."""
    if _in_host(device, host):
        return pinned_copy(values)
    target = torch.device(device)
    if not table or (values.device.type == target.type and target.index in (None, values.device.index)):
        return values.to(device)
    return aligned_empty(values.shape, device, values.dtype).copy_(values)


def _empty(shape, device, host):
    return pinned_empty(shape) if _in_host(device, host) else aligned_empty(shape, device)


def counter_values(init, first, rows, width, seed, index, device):
    """Initial values of the user's rows first .. first + rows - 1 of the index-th param (width values
    a row) from the counter-based generator: the same on any device and for any piece size."""
    return counter_values_of(init, torch.arange(first, first + rows, device=device), width, seed, index)


def counter_values_of(init, ids, width, seed, index):
    """counter_values of the user's rows `ids` (any order), on their device."""
    rows = ids.numel()
    counters = ((index << 40) + ids.long().view(-1, 1) * width +
                torch.arange(width, dtype=torch.int64, device=ids.device)).view(-1)
    device = ids.device
    if isinstance(init, Constant):
        values = torch.full((counters.numel(),), float(init.value), device=device)
    elif isinstance(init, Normal):
        values = normal(seed, INIT_STREAMS, counters) * init.std + init.mean
    elif isinstance(init, Uniform):
        values = uniform(seed, INIT_STREAMS[0], counters) * (init.high - init.low) + init.low
    else:
        raise TypeError(f"unknown initializer {init!r}")
    return values.float().view(rows, width)


def _drawn(init, shape, generator, new_to_old, device, host, seed, index):
    """A param's initial values in the layout's row order: row i holds the draw of the user's row
    new_to_old[i]. Up to DRAW_ROWS rows are drawn at once by the CPU generator; a larger table from
    counter_values, piece by piece in the user's order, each piece written to its rows where the table
    lives."""
    rows = shape[0]
    if rows <= DRAW_ROWS:
        return _placed(_initial_values(init, shape, generator)[new_to_old].float().contiguous(), device, host)
    table = _empty(shape, device, host)
    writable = mapped_view(table, device) if _in_host(device, host) else table
    old_to_new = torch.empty_like(new_to_old)
    old_to_new[new_to_old] = torch.arange(rows)
    width = math.prod(shape[1:])
    step = max(1, min(DRAW_ROWS, DRAW_VALUES // width))
    for start in range(0, rows, step):
        count = min(step, rows - start)
        piece = counter_values(init, start, count, width, seed, index, writable.device)
        writable[old_to_new[start:start + count].to(writable.device)] = piece.view(count, *shape[1:])
    return table


@dataclass
class ModelState:
    params: dict      # name -> float32 [n_features] or [n_features, k], by re-indexed feature id
    globals: dict     # name -> float32 [1]
    states: dict = field(default_factory=dict)   # "<param>_<state>" -> the optimizer's state

    @classmethod
    def initial(cls, model, new_to_old, device, seed=0, optimizer=None, host=(), rows=None):
        """Initial values drawn in the user's feature order (a CPU generator, or for tables over
        DRAW_ROWS rows a counter-based one: the same on any device and under any re-indexing), then
        permuted to the layout's ids. Params named in host
        (and their optimizer state) live in pinned host memory, which kernels reach through mapped
        pointers; without CUDA, host memory is where every tensor is. rows (layout ids): only these rows
        of that state, in this order (a rank's share of a table no GPU holds whole)."""
        declared_params, declared_globals = model.declarations()
        generator = torch.Generator().manual_seed(seed)
        n = new_to_old.numel()
        # the whole order in host memory only where it is used whole (a piece of a table of billions of
        # rows would copy 17 GB for each piece)
        order = new_to_old.long().cpu() if rows is None or n <= DRAW_ROWS else None
        params = {}
        for index, (name, param) in enumerate(declared_params.items()):
            shape = (n,) if param.size == 1 else (n, param.size)
            if rows is None:
                params[name] = _drawn(param.init, shape, generator, order, device, name in host, seed, index)
            elif order is not None:
                params[name] = _placed(_initial_values(param.init, shape, generator)[order[rows.cpu()]].float(),
                                       device, name in host)
            else:
                # the table's generator is counter-based: these rows' draws alone
                params[name] = _placed(counter_values_of(param.init, new_to_old[rows.to(new_to_old.device)].to(device),
                                                         param.size, seed, index).view(rows.numel(), *shape[1:]),
                                       device, name in host)
        globals_ = {name: _initial_values(g.init, (1,), generator).to(device=device, dtype=torch.float32)
                    for name, g in declared_globals.items()}
        states = {}
        for name, value in params.items():
            for state, initial, per_row in (optimizer.states if optimizer is not None else ()):
                shape = value.shape[:1] if per_row else value.shape
                states[f"{name}_{state}"] = _empty(shape, device, name in host).fill_(initial)
        return cls(params, globals_, states)

    @classmethod
    def placed(cls, params, globals_, states, device, host=()):
        """A state of these tensors (from a checkpoint, say) on the device, the params named in host
        and their optimizer state in pinned host memory."""
        def owner(state_name):
            # states are named "<param>_<state>"; the longest matching param, should one name prefix another
            return max((p for p in params if state_name.startswith(f"{p}_")), key=len, default=None)

        return cls({k: _placed(v, device, k in host) for k, v in params.items()},
                   {k: _placed(v, device, False, table=False) for k, v in globals_.items()},
                   {k: _placed(v, device, owner(k) in host) for k, v in states.items()})

    def in_original_order(self, old_to_new):
        """Parameters indexed by the user's original feature ids."""
        index = old_to_new.long()
        return {name: value[index.to(value.device)] for name, value in self.params.items()}

    def decay(self, coefficients, lr):
        """Exact (decoupled) L2: every row of the params decays by 1 - lr * l2, touched or not.
        lr may be a device scalar (a CUDA graph replays it)."""
        for name, l2 in (coefficients or {}).items():
            if l2:
                self.params[name].mul_(1 - lr * l2)

    def to(self, device):
        """A copy on `device` (host memory, for a snapshot a checkpoint keeps)."""
        return ModelState({k: v.to(device, copy=True) for k, v in self.params.items()},
                          {k: v.to(device, copy=True) for k, v in self.globals.items()},
                          {k: v.to(device, copy=True) for k, v in self.states.items()})

    def clone(self):
        return ModelState({k: v.clone() for k, v in self.params.items()},
                          {k: v.clone() for k, v in self.globals.items()},
                          {k: v.clone() for k, v in self.states.items()})
