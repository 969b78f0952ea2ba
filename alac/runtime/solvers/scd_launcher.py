"""Launching the SCD kernels (alac.codegen.scd_kernels, and alac.codegen.scd_split_kernels for
coordinates split over every program): arguments bound from the kernels' manifests by role, never
by name."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from alac.codegen import load_module, next_power_of_two

# Entries a tile reads, from the coordinates' mean length: long ones looped in tiles of up to
# MAX_BLOCK, with a warp per 64 entries and at most MAX_WARPS (untuned).
MIN_BLOCK, MAX_BLOCK, MAX_WARPS = 16, 1024, 8
# Programs, each stepping its coordinates one after the other: at most one per this many coordinates
# (a bound on the steps computed from a stale shared vector: with every coordinate of a small
# problem in flight at once the steps add up like Jacobi's and can diverge; untuned until
# benchmarks/scd.py measures it), and no more than a multiprocessor keeps resident (64 warps on
# Hopper, and at most 32 programs), so that they all run at once.
COORDINATES_PER_PROGRAM = 64
# primal coordinates of more entries than this step one at a time, split over every program
# (alac.codegen.scd_split_kernels): about a tile for each resident 8-warp program of an H100 (untuned)
SPLIT_ENTRIES = 1 << 20
# the programs a split coordinate's launches take under the interpreter (which runs them in turn)
INTERPRETED_SPLIT_PROGRAMS = 3
# the entries of a launch per entry of its longest coordinate, at least (programs())
LONGEST_SHARE = 5
WARPS_PER_MULTIPROCESSOR = 64
# blocks a multiprocessor keeps resident whatever their size (CUDA's limit for compute capability 7.0-9.0)
BLOCKS_PER_MULTIPROCESSOR = 32


def tile_shape(mean_length):
    """(BLOCK, warps) for coordinates of this mean number of entries: a warp per 64 entries of a tile
    (Triton's default of 4 warps would leave most lanes of a 32-entry tile idle)."""
    block = min(MAX_BLOCK, max(MIN_BLOCK, next_power_of_two(max(1, int(mean_length)))))
    return block, min(MAX_WARPS, max(1, block // 64))


def resident(device, warps):
    """Programs of `warps` warps the GPU keeps resident at once."""
    per_multiprocessor = min(BLOCKS_PER_MULTIPROCESSOR, WARPS_PER_MULTIPROCESSOR // warps)
    return torch.cuda.get_device_properties(device).multi_processor_count * per_multiprocessor


@dataclass
class Band:
    """Coordinates launched together in each epoch: members (a mask over the axis's coordinates; None:
    all of them), their tile (block, warps) and how many are in flight; split: one at a time, each
    over every program (alac.codegen.scd_split_kernels)."""

    members: torch.Tensor | None
    block: int
    warps: int
    in_flight: int = 1
    split: bool = False

    def lengths(self, axis):
        lengths = axis.lengths()
        return lengths if self.members is None else lengths[self.members]


def bands(axis, interpret, split=False):
    """The epoch's launches in order: with split (the primal's atomic kernels), coordinates longer
    than SPLIT_ENTRIES one at a time over every program; then one band, or two where some
    coordinates are longer than entries / (2 x the warps the GPU keeps resident per warp of a program): those (a
    power-law head of columns) would bound every epoch's programs through programs()'
    longest-coordinate rule, so they run first in a launch of their own, with wide tiles and few
    programs, and the rest with as many as their coupling allows."""
    lengths = axis.lengths()
    longest = lengths > SPLIT_ENTRIES if split else torch.zeros_like(lengths, dtype=torch.bool)
    out = [Band(longest, MAX_BLOCK, MAX_WARPS, split=True)] if bool(longest.any()) else []
    rest = ~longest
    if not bool(rest.any()):
        return out
    entries, n = int(lengths[rest].sum()), int(rest.sum())
    whole = Band(rest if out else None, *tile_shape(entries / max(1, n)))
    if interpret:
        return out + [whole]
    # against the warps the GPU keeps resident, not its programs (the webspam-shaped primal's bands were
    # measured so; at the programs' 32 a multiprocessor, its lambda 1e-5 took 126 epochs to 1e-8, not 84)
    warps = torch.cuda.get_device_properties(axis.start.device).multi_processor_count * WARPS_PER_MULTIPROCESSOR
    long = rest & (lengths > entries // (2 * warps // whole.warps))
    if not bool(long.any()) or bool((long == rest).all()):
        return out + [whole]
    return out + [Band(members, *tile_shape(float(lengths[members].double().mean())))
                  for members in (long, rest & ~long)]


def programs(n_coordinates, entries, longest, coupling, device, interpret, warps=1):
    """The epoch's programs of `warps` warps: one under the interpreter (it runs programs one after
    another, so one program is the sequential epoch), else bounded by
    - the problem's size and what the GPU keeps resident;
    - entries / (LONGEST_SHARE longest): the longest coordinate in flight for at most a fifth of
      the launch. Its step is computed from a shared vector that the others change meanwhile, which
      the separable over-approximation below does not see: the webspam-shaped primal's band of
      1,507 long columns (benchmarks/scd.py, the longest 263k of 11M entries; lambda 1e-3) took
      38-52 epochs to gap 1e-8 with 2 in flight (the longest in flight for 0.05 of the launch;
      sequential SCD 40), 70-80 with 21 (0.5), 87-152 with 64 (1.5);
    - 1 + 1 / (3 coupling) (alac.runtime.solvers.scd.Overlap): with coupling c and P in flight the
      steps' curvature is 1 + (P - 1) c times ||a||^2, so more in flight take more epochs of
      less time each: a dual of 20,000 unit rows of 20 entries (tests/runtime/solvers/test_scd.py)
      took several times sequential SCD's epochs with 0.84 / c in flight; the webspam-shaped dual
      (benchmarks/scd.py's in-flight arms) reached its gap soonest around 0.6 / c. a9a's dual (every
      row sharing the intercept and popular features) steps one coordinate at a time."""
    if interpret:
        return 1
    return max(1, min(n_coordinates // COORDINATES_PER_PROGRAM, entries // max(1, LONGEST_SHARE * longest),
                      int(1 + 1 / max(3 * coupling, 1e-12)), resident(device, warps)))


def band_programs(axis, band, coupling, interpret):
    """programs() for a band of this coupling (alac.runtime.solvers.scd.Overlap)."""
    lengths = band.lengths(axis)
    return programs(lengths.numel(), int(lengths.sum()), int(lengths.max()), coupling, axis.start.device,
                    interpret, band.warps)


class ScdLauncher:
    def __init__(self, form, loss, wild, interpret, bands):
        """The epoch kernel of an SCD problem (alac.codegen.ScdVariant's form, loss and wild),
        launched once per band of coordinates (bands()), and a split band's sums and step kernels,
        launched for each of its coordinates in turn."""
        from alac.codegen import ScdVariant, generate_scd_kernels, generate_scd_split_kernels

        variant = ScdVariant(form, loss, wild)
        self.generated = generate_scd_kernels(variant)
        self.interpret = interpret
        module = load_module(self.generated, interpret=interpret)
        self.kernel = getattr(module, self.generated.epoch.name)
        self.bands = bands
        self.split = None
        if any(band.split for band in bands):
            self.split = generate_scd_split_kernels(variant)
            split_module = load_module(self.split, interpret=interpret)
            self.split_sums = getattr(split_module, self.split.sums.name)
            self.split_step = getattr(split_module, self.split.step.name)

    def epoch(self, axis, order, labels, coordinates, shared, curvature, scale, l1=0.0, l2=0.0):
        """One epoch over `order` (int64 coordinate ids of the compressed axis) in place, band by band
        in that order, the steps taken with `curvature` (alac.runtime.solvers.scd.Overlap for the bands'
        in_flight)."""
        for band in self.bands:
            members = order if band.members is None else order[band.members[order]]
            if members.numel():
                launch = self._launch_split if band.split else self._launch
                launch(band, axis, members, labels, coordinates, shared, curvature, scale, l1, l2)

    def _values(self, axis, order, labels, coordinates, shared, curvature, scale, l1, l2):
        return {("size", "coordinates"): order.numel(), ("order", "coordinates"): order,
                ("layout", "start"): axis.start, ("layout", "index"): axis.index,
                ("layout", "value"): axis.value if axis.value is not None else curvature,
                ("layout", "curvature"): curvature, ("layout", "norm"): axis.norm,
                ("labels", ""): labels, ("param", "coordinate"): coordinates,
                ("shared", ""): shared, ("hyper", "scale"): float(scale), ("hyper", "l1"): float(l1),
                ("hyper", "l2"): float(l2)}

    def _launch(self, band, axis, order, labels, coordinates, shared, curvature, scale, l1, l2):
        values = self._values(axis, order, labels, coordinates, shared, curvature, scale, l1, l2)
        grid = (min(band.in_flight, order.numel()),)
        self.kernel[grid](*[values[(a.role, a.of)] for a in self.generated.epoch.args],
                          HAS_VALUES=axis.value is not None, BLOCK=band.block, num_warps=band.warps)

    def _launch_split(self, band, axis, order, labels, coordinates, shared, curvature, scale, l1, l2):
        """Each coordinate of the band in turn: its sums over every program, then its step."""
        values = self._values(axis, order, labels, coordinates, shared, curvature, scale, l1, l2)
        values[("sums", "")] = torch.zeros(3 * order.numel(), dtype=torch.float64, device=order.device)
        grid = (INTERPRETED_SPLIT_PROGRAMS if self.interpret else resident(order.device, band.warps),)
        for position in range(order.numel()):
            values[("launch", "position")] = position
            for kernel, spec in ((self.split_sums, self.split.sums), (self.split_step, self.split.step)):
                kernel[grid](*[values[(a.role, a.of)] for a in spec.args], HAS_VALUES=axis.value is not None,
                             BLOCK=band.block, num_warps=band.warps)
