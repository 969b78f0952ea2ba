"""Kernel variants: what of a plan the generated source depends on, as one frozen value.

A `KernelVariant` holds the mechanisms a generated module is built with, normalised (a flag that
cannot apply to the variant's semantics is off), validated by the rules below, and named: kernel
names carry the variant's name. Launch settings (chunk size, batch size, warps, programs, hot size,
replicas, flush interval) stay on `alac.plan.Plan`; `Plan.variant` is its variant and the generator
reads nothing else of the plan. `enumerate_variants` lists every valid variant, for tests.
"""

from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass

from alac.errors import OptionError

SEMANTICS = ("sync", "async")
KERNEL_FAMILIES = ("fused", "stage")
# the variant's fields that are Plan fields of the same name (hot and host_params follow from the plan's
# hot_size and placement)
PLAN_FIELDS = ("semantics", "kernels", "deterministic", "grid_barrier", "edge_updates", "sum_equal_edges",
               "derive_params", "chunk_queue", "resident_tiles", "prefetch_chunks")
# how a module's header names the flags whose words differ from their fields'
WORDS = {"resident_tiles": "resident", "prefetch_chunks": "prefetch"}


@dataclass(frozen=True)
class KernelVariant:
    semantics: str = "sync"        # sync: exact mini-batch steps; async: lock-free persistent programs
    kernels: str = "fused"         # fused: the stages of a chunk in one kernel; stage: a kernel per stage
    hot: bool = False              # the most frequent features' gradients summed before memory
    deterministic: bool = False    # sync: no floating-point atomics, fixed summation order
    grid_barrier: bool = False     # sync: one persistent launch per epoch, grid-wide barriers
    edge_updates: bool = False     # sync: every cold edge adds its own change (additive optimizers)
    sum_equal_edges: bool = False  # edge updates: a chunk's equal features summed first
    derive_params: bool = False    # async: params that are a function of their state computed where read
    chunk_queue: bool = False      # async: programs claim chunks from a shared counter
    resident_tiles: bool = False   # grid edge updates: a program's one chunk of a batch kept in registers
    prefetch_chunks: bool = False  # resident: the next batch's chunk read before the second barrier
    host_params: tuple = ()        # params (and their optimizer state) in pinned host memory, sorted

    def __post_init__(self):
        if self.semantics not in SEMANTICS:
            raise OptionError(f"plan semantics must be one of {SEMANTICS}, got {self.semantics!r}")
        if self.kernels not in KERNEL_FAMILIES:
            raise OptionError(f"plan kernels must be one of {KERNEL_FAMILIES}, got {self.kernels!r}")
        if self.deterministic and (self.semantics != "sync" or self.hot):
            raise OptionError("deterministic plans are sync plans without a hot segment")
        if self.semantics == "async" and self.kernels != "fused":
            raise OptionError("async semantics run the fused kernel only (kernels='fused')")
        if self.host_params and self.semantics != "sync":
            # async programs add their changes into the params atomically, across PCIe for host rows
            raise OptionError(f"params in host memory ({', '.join(self.host_params)}) run sync plans only")
        if self.host_params and self.edge_updates:
            raise OptionError("edge updates add into params atomically: not with params in host memory")

    @classmethod
    def of(cls, semantics="sync", kernels="fused", hot=False, deterministic=False, grid_barrier=False,
           edge_updates=False, sum_equal_edges=False, derive_params=False, chunk_queue=False, resident_tiles=False,
           prefetch_chunks=False, host_params=()):
        """The variant with the flags that apply to it: sync mechanisms off in async variants and in
        deterministic ones (they launch per batch and store every gradient), async ones off in sync;
        edge updates off where params live in host memory (the update finds each touched row once);
        resident chunks only in fused grid-barrier epochs of plain edge updates (a hot segment's and
        summed edges' sorts work on the tiles the update reloads)."""
        sync, async_ = semantics == "sync", semantics == "async"
        atomic_sync = sync and not deterministic
        edge_updates = atomic_sync and edge_updates and not host_params
        grid_barrier = atomic_sync and grid_barrier
        summed = edge_updates and sum_equal_edges
        resident = resident_tiles and grid_barrier and edge_updates and not summed and not hot and kernels == "fused"
        return cls(semantics, kernels, hot, deterministic, grid_barrier, edge_updates, summed,
                   async_ and derive_params, async_ and chunk_queue, resident, resident and prefetch_chunks,
                   tuple(sorted(host_params)))

    def placement(self, param):
        """Where a param's rows (and its optimizer state) live: "device" or "host"."""
        return "host" if param in self.host_params else "device"

    def for_optimizer(self, optimizer):
        """The variant an optimizer runs: edge updates need an additive rule; derived params a
        derivable one."""
        additive = self.edge_updates and optimizer.additive
        return dataclasses.replace(self, edge_updates=additive, sum_equal_edges=additive and self.sum_equal_edges,
                                   resident_tiles=additive and self.resident_tiles,
                                   prefetch_chunks=additive and self.prefetch_chunks,
                                   derive_params=self.derive_params and bool(optimizer.derivable))

    @property
    def asynchronous(self):
        return self.semantics == "async"

    @property
    def name(self):
        """A short name of the mechanisms, as kernel names carry it: e.g. sync_grid_edges, async_hot_derived."""
        tokens = [self.semantics] + (["stage"] if self.kernels == "stage" else [])
        flags = ("hot", "deterministic", "grid_barrier", "edge_updates", "sum_equal_edges", "derive_params",
                 "chunk_queue", "resident_tiles", "prefetch_chunks")
        short = {"deterministic": "det", "grid_barrier": "grid", "edge_updates": "edges", "sum_equal_edges": "summed",
                 "derive_params": "derived", "chunk_queue": "queue", "resident_tiles": "resident",
                 "prefetch_chunks": "prefetch"}
        host = [f"host_{'_'.join(self.host_params)}"] if self.host_params else []
        return "_".join(tokens + [short.get(flag, flag) for flag in flags if getattr(self, flag)] + host)

    def describe(self):
        """The variant in words, for a generated module's header."""
        return (f"semantics={self.semantics} kernels={self.kernels} hot segment={'on' if self.hot else 'off'}"
                + "".join(f" {WORDS.get(flag, flag)}" for flag in ("deterministic", "grid_barrier", "edge_updates",
                                                                    "chunk_queue", "resident_tiles", "prefetch_chunks")
                          if getattr(self, flag))
                + (" summed" if self.sum_equal_edges else "")
                + (" stored_params" if self.asynchronous and not self.derive_params else "")
                + (f" host={','.join(self.host_params)}" if self.host_params else ""))


def enumerate_variants(host_params=()):
    """Every valid variant once (normalised), in a fixed order; host_params: the variants with those
    params in host memory instead."""
    fields = [f.name for f in dataclasses.fields(KernelVariant) if f.name != "host_params"]
    choices = {"semantics": SEMANTICS, "kernels": KERNEL_FAMILIES}
    seen = {}
    for values in itertools.product(*(choices.get(name, (False, True)) for name in fields)):
        try:
            variant = KernelVariant.of(**dict(zip(fields, values)), host_params=host_params)
        except OptionError:
            continue
        seen.setdefault(variant, None)
    return list(seen)
