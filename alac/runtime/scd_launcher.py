"""Launching the SCD kernels (alac.codegen.scd_kernels): arguments bound from the kernel's manifest
by role, never by name."""

from __future__ import annotations

import torch

from alac.codegen import load_module
from alac.plan import next_power_of_two

# Entries a tile reads, from the coordinates' mean length: long ones looped in tiles of up to
# MAX_BLOCK (untuned until benchmarks/scd.py measures them on the GPU).
MIN_BLOCK, MAX_BLOCK = 16, 256
# Programs, each stepping its coordinates one after the other: at most one per this many coordinates
# (a bound on the steps computed from a stale shared vector: with every coordinate of a small
# problem in flight at once the steps add up like Jacobi's and can diverge; untuned until
# benchmarks/scd.py measures it), and no more than a multiprocessor keeps resident (64 warps on
# Hopper), so that they all run at once.
COORDINATES_PER_PROGRAM = 64
WARPS_PER_MULTIPROCESSOR = 64


def tile_shape(mean_length):
    """(BLOCK, warps) for coordinates of this mean number of entries: a warp per 64 entries of a tile
    (Triton's default of 4 warps would leave most lanes of a 32-entry tile idle)."""
    block = min(MAX_BLOCK, max(MIN_BLOCK, next_power_of_two(max(1, int(mean_length)))))
    return block, max(1, block // 64)


def programs(n_coordinates, device, interpret, warps=1):
    """The epoch's programs of `warps` warps: one under the interpreter (it runs programs one after
    another, so one program is the sequential epoch), else bounded by the problem's size and by
    what the GPU keeps resident."""
    if interpret:
        return 1
    multiprocessors = torch.cuda.get_device_properties(device).multi_processor_count
    return max(1, min(n_coordinates // COORDINATES_PER_PROGRAM, multiprocessors * (WARPS_PER_MULTIPROCESSOR // warps)))


class ScdLauncher:
    def __init__(self, form, loss, wild, interpret):
        """The epoch kernel of an SCD problem (alac.codegen.ScdVariant's form, loss and wild)."""
        from alac.codegen import ScdVariant, generate_scd_kernels

        self.generated = generate_scd_kernels(ScdVariant(form, loss, wild))
        self.interpret = interpret
        module = load_module(self.generated, interpret=interpret)
        self.kernel = getattr(module, self.generated.epoch.name)

    def epoch(self, axis, order, labels, coordinates, shared, scale, l1=0.0, l2=0.0):
        """One epoch over `order` (int64 coordinate ids of the compressed axis) in place."""
        if not order.numel():
            return
        values = {("size", "coordinates"): order.numel(), ("order", "coordinates"): order,
                  ("layout", "start"): axis.start, ("layout", "index"): axis.index,
                  ("layout", "value"): axis.value if axis.value is not None else axis.norm,
                  ("layout", "norm"): axis.norm, ("labels", ""): labels, ("param", "coordinate"): coordinates,
                  ("shared", ""): shared, ("hyper", "scale"): float(scale), ("hyper", "l1"): float(l1),
                  ("hyper", "l2"): float(l2)}
        block, warps = tile_shape(axis.index.numel() / max(1, axis.n_coordinates))
        grid = (programs(order.numel(), order.device, self.interpret, warps),)
        self.kernel[grid](*[values[(a.role, a.of)] for a in self.generated.epoch.args],
                          HAS_VALUES=axis.value is not None, BLOCK=block, num_warps=warps)
