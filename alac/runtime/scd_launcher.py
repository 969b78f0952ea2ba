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


def programs(n_coordinates, entries, longest, coupling, device, interpret, warps=1):
    """The epoch's programs of `warps` warps: one under the interpreter (it runs programs one after
    another, so one program is the sequential epoch), else bounded by
    - the problem's size and what the GPU keeps resident;
    - entries / (2 longest): the longest coordinate in flight for at most half the epoch. Its step
      is computed from a shared vector that the others change meanwhile: webspam-shaped columns
      (benchmarks/scd.py, 263k of 52.6M entries) took sequential SCD's epochs to gap 1e-6 with
      the longest in flight for 0.6 of the epoch, stalled at 1e-4 with 2.6, diverged with 10;
    - 1 + 1 / (4 coupling) (alac.runtime.scd.curvature): with coupling c and P in flight the
      steps' curvature is 1 + (P - 1) c times ||a||^2 for synchronous steps, and asynchronous ones
      overlap twice as many; a dual of 20,000 unit rows of 20 entries (c = 0.0027,
      tests/runtime/test_scd.py) took 3 times sequential SCD's epochs with 312 in flight
      (0.84 / c), 1.3 times with 64 (0.17 / c). a9a's dual (every row sharing the intercept and
      popular features, c = 0.48) steps one coordinate at a time; the webspam-shaped primal
      (c = 0.0002) a thousand."""
    if interpret:
        return 1
    multiprocessors = torch.cuda.get_device_properties(device).multi_processor_count
    return max(1, min(n_coordinates // COORDINATES_PER_PROGRAM, entries // max(1, 2 * longest),
                      int(1 + 1 / max(4 * coupling, 1e-12)), multiprocessors * (WARPS_PER_MULTIPROCESSOR // warps)))


def default_in_flight(axis, coupling, interpret):
    """programs() for a compressed axis of this coupling (alac.runtime.scd.curvature)."""
    lengths = axis.start[1:] - axis.start[:-1]
    return programs(axis.n_coordinates, int(axis.start[-1]), int(lengths.max()), coupling, axis.start.device,
                    interpret, tile_shape(axis.index.numel() / max(1, axis.n_coordinates))[1])


class ScdLauncher:
    def __init__(self, form, loss, wild, interpret, axis, in_flight):
        """The epoch kernel of an SCD problem (alac.codegen.ScdVariant's form, loss and wild) over
        `axis`, with `in_flight` programs."""
        from alac.codegen import ScdVariant, generate_scd_kernels

        self.generated = generate_scd_kernels(ScdVariant(form, loss, wild))
        self.interpret = interpret
        module = load_module(self.generated, interpret=interpret)
        self.kernel = getattr(module, self.generated.epoch.name)
        self.block, self.warps = tile_shape(axis.index.numel() / max(1, axis.n_coordinates))
        self.in_flight = in_flight

    def epoch(self, axis, order, labels, coordinates, shared, curvature, scale, l1=0.0, l2=0.0):
        """One epoch over `order` (int64 coordinate ids of the compressed axis) in place, the steps
        taken with `curvature` (alac.runtime.scd.curvature for this launcher's in_flight)."""
        if not order.numel():
            return
        values = {("size", "coordinates"): order.numel(), ("order", "coordinates"): order,
                  ("layout", "start"): axis.start, ("layout", "index"): axis.index,
                  ("layout", "value"): axis.value if axis.value is not None else curvature,
                  ("layout", "curvature"): curvature, ("labels", ""): labels, ("param", "coordinate"): coordinates,
                  ("shared", ""): shared, ("hyper", "scale"): float(scale), ("hyper", "l1"): float(l1),
                  ("hyper", "l2"): float(l2)}
        grid = (min(self.in_flight, order.numel()),)
        self.kernel[grid](*[values[(a.role, a.of)] for a in self.generated.epoch.args],
                          HAS_VALUES=axis.value is not None, BLOCK=self.block, num_warps=self.warps)
