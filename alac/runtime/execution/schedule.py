"""Schedule arithmetic shared by the backends: batch steps, async program counts, edge tile sizes."""

from __future__ import annotations

import math

import torch

from alac.codegen import next_power_of_two
from alac.errors import OptionError

# Edges one program holds per step of its edge loop (S x C, times the factor block for vector
# params). 4096 keeps a tile at 32 values per thread of 4 warps; the planner tunes it per GPU.
TILE_EDGES = 4096


# A resident sync epoch's tile (alac.codegen.epoch_kernel) is the whole row up to this many values:
# FM k = 16 at C = 8 ran faster with its [64, 8, 16] row than looping over [32, 8, 16] tiles, and at
# C = 16 the [64, 16, 16] tile spilled (benchmarks/sync_resident.py).
RESIDENT_TILE_EDGES = 8192


def slots_per_step(plan, layout, factor_size, resident=False):
    """S of the [S, C] edge tiles: the whole (fixed) row width when it fits the tile budget (the
    larger one of a resident epoch: `resident`)."""
    if plan.slots_per_step:
        return plan.slots_per_step
    width = layout.fixed_width or layout.mean_width()
    lanes = next_power_of_two(factor_size) if factor_size else 1
    whole = next_power_of_two(max(width, 1))
    if resident and whole * layout.chunk_size * lanes <= RESIDENT_TILE_EDGES:
        return whole
    budget = max(1, TILE_EDGES // (layout.chunk_size * lanes))
    return max(1, min(whole, 1 << (budget.bit_length() - 1)))


# Edge-tile values per thread that the automatic warp count aims at: async LR's [64, 32] tile and async
# FM k = 16's [8, 32, 16] ran fastest at 16 (benchmarks/flow_sweep.py's warp arms).
# Async tiles of more factors ran fastest with a thread per edge's factor block (k = 32 and 64; k = 16
# stays at 16 values per thread); sync k = 32 ran slower so (flow_sweep.py's warp arms).
VALUES_PER_THREAD = 16
MIN_WARPS = 4


def warps_for_tile(plan, slots, factor_size):
    """num_warps of the kernels: the plan's, or enough for VALUES_PER_THREAD values of an [S, C]
    (times the factor block) edge tile per thread, from MIN_WARPS up to 8; async plans give a
    thread at least an edge's factor block (and the fewest warps scale down alike)."""
    if plan.num_warps:
        return plan.num_warps
    lanes = next_power_of_two(factor_size) if factor_size else 1
    # (measured up to k = 64)
    per_thread = min(64, max(VALUES_PER_THREAD, lanes)) if plan.semantics == "async" else VALUES_PER_THREAD
    fewest = max(1, MIN_WARPS * VALUES_PER_THREAD // per_thread)
    threads = slots * plan.chunk_size * lanes // per_thread
    return min(8, max(fewest, next_power_of_two(max(1, threads // 32))))


def async_programs(plan, layout):
    """Persistent programs of an async epoch: max_in_flight samples, C per program."""
    return async_programs_for(plan, layout.n_chunks, layout.chunk_size)


def async_programs_for(plan, n_chunks, chunk_size):
    """async_programs before a layout exists: its chunks and chunk size."""
    if plan.programs:
        return min(plan.programs, n_chunks)
    return max(1, min(n_chunks, plan.max_in_flight // chunk_size))


def resident_programs(compiled, device):
    """Programs of a compiled kernel that the GPU holds at once: the multiprocessors times the
    programs one holds, limited by registers, threads and shared memory (Triton's occupancy
    arithmetic, as in its fused-softmax tutorial). Async epochs report it beside the programs they
    launch: where the default async LR kernel's registers fit 2 programs of 4 warps per multiprocessor,
    half of the programs launched run at once and the rest start as those end (two waves). Launching
    only the resident half gave the same LR epoch time but made
    async FTRL with derived weights spike in its second epoch on 200k rows, as the chunk queue does
    (stale L1 copies of the params: `Plan.chunk_queue`), so the launch count stays max_in_flight / C."""
    properties = torch.cuda.get_device_properties(device)
    threads = compiled.metadata.num_warps * properties.warp_size
    # 64K 32-bit registers per multiprocessor on every NVIDIA GPU since Kepler (torch does not report it)
    by_registers = getattr(properties, "regs_per_multiprocessor", 65536) // max(1, compiled.n_regs * threads)
    by_threads = properties.max_threads_per_multi_processor // threads
    # CUDA reserves 1 KB of shared memory per block on compute capability 8.0 and later
    by_shared = properties.shared_memory_per_multiprocessor // (compiled.metadata.shared + 1024)
    return properties.multi_processor_count * max(1, min(by_registers, by_threads, by_shared))


def sync_programs(plan, layout, interpret):
    """Programs of a sync epoch kernel: plan.programs or one per chunk of a batch, at most one per
    multiprocessor (the grid-wide barrier needs every program resident at once); one under the
    interpreter, which runs programs one after another."""
    if interpret:
        return 1
    resident = torch.cuda.get_device_properties(layout.device).multi_processor_count
    return max(1, min(plan.programs or plan.chunks_per_batch, plan.chunks_per_batch, resident))


def batch_scales(layout, order, chunks_per_batch):
    """1 / (real samples) of every batch of the chunks of order (an epoch's, or a segment of whole
    batches), as a device tensor (no host round trip): the last batch may hold fewer chunks, and the
    batch holding the layout's partial last chunk fewer samples."""
    C = layout.chunk_size
    chunks = order.numel()
    n_batches = math.ceil(chunks / chunks_per_batch)
    counts = torch.full((n_batches,), chunks_per_batch * C, dtype=torch.float64, device=order.device)
    # fill_ takes the scalar as a kernel argument; item assignment copies it from the host
    counts[-1:].fill_((chunks - (n_batches - 1) * chunks_per_batch) * C)
    missing = layout.n_chunks * C - layout.n_rows
    if missing:
        is_last = order == layout.n_chunks - 1
        position = torch.argmax(is_last.int())
        # a segment without the partial chunk subtracts nothing (decided on the device)
        counts.index_add_(0, (position // chunks_per_batch).view(1), -float(missing) * is_last.any().view(1).double())
    return (1.0 / counts).float()


SCHEDULES = ("constant", "inverse", "epoch_decay")


class LearningRateSchedule:
    """lr as a function of progress. constant: lr; inverse (scikit-learn's invscaling, per batch):
    lr / (1 + decay * t) ** power with t the batches done; epoch_decay: lr * decay ** epoch."""

    def __init__(self, kind="constant", decay=0.0, power=0.5):
        if kind not in SCHEDULES:
            raise OptionError(f"learning-rate schedule must be one of {SCHEDULES}, got {kind!r}")
        if kind == "epoch_decay" and not 0 < decay <= 1:
            raise OptionError(f"epoch_decay needs 0 < decay <= 1, got {decay}")
        self.kind, self.decay, self.power = kind, decay, power

    def rates(self, lr, epoch, first_batch, n_batches, device):
        """Learning rates of n_batches batches of an epoch, the first being batch first_batch overall."""
        if self.kind == "epoch_decay":
            return torch.full((n_batches,), lr * self.decay ** epoch, device=device)
        if self.kind == "inverse":
            done = torch.arange(first_batch, first_batch + n_batches, device=device, dtype=torch.float64)
            return (lr / (1 + self.decay * done) ** self.power).float()
        return torch.full((n_batches,), float(lr), device=device)

    def describe(self):
        if self.kind == "constant":
            return "constant"
        return f"{self.kind}(decay={self.decay:g}" + (f", power={self.power:g})" if self.kind == "inverse" else ")")
