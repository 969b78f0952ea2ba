"""The roofline of an epoch: the accesses to parameter rows it must make, and their floor.

At every real edge an async epoch reads the edge's row of each per-feature array (params and
optimizer state) and adds a change to it: atomically into the table at cold edges, into the
program's own sums at hot ones (re-indexed id < H). One flat Triton pass that makes exactly those
accesses, every array's at an edge together (as the kernels make them: per-edge transactions, not
bytes, bound an epoch), each edge once in storage order at full occupancy, without the model's math
or any chain of dependent loads, times the floor of any kernel that makes them; where the epoch's
bytes at the GPU's copy bandwidth take longer, that is the floor (benchmarks/async_floor.py times
each kind of access apart). A sync epoch with edge updates makes the same accesses (its hot edges'
changes into R replica sums) and meets at two grid-wide barriers a batch, timed by a kernel that
does nothing else. `alac inspect`, `alac bench flow` and `alac train` on a GPU print the line.
"""

from __future__ import annotations

import dataclasses

import torch
import triton
import triton.language as tl

from alac.codegen import grid_barrier

# Param values (edges x K) per flat program, chosen by benchmarks/async_floor.py's probes: FM k = 16's
# best (64 edges of 16), and inside the range where LR's time does not depend on it.
VALUES_PER_PROGRAM = 1024

# What a flat kernel does at each edge's row (`UPDATE` of edge_traffic).
NO_UPDATE, ATOMIC_ALL, ATOMIC_COLD, ATOMIC_HOT, ATOMIC_SPLIT, STORE_COLD = range(6)

# launches timed per array for the floor (median), after one warm-up
FLOOR_REPEATS = 5
# per-feature arrays one pass of the floor's kernel makes together; more go in further passes (summed)
ARRAYS_PER_PASS = 4


def edges_per_program(width):
    return max(1, VALUES_PER_PROGRAM // width)


@triton.jit
def edge_traffic(feature_ptr, param_ptr, hot_sums_ptr, gathered_ptr, n_edges, hot_size, copies, scale,
                 K: tl.constexpr, GATHER: tl.constexpr, UPDATE: tl.constexpr, BLOCK: tl.constexpr):
    """Each edge's [K] row: gathered (GATHER; the sum of what a program gathered goes to
    gathered_ptr[pid], so nothing is dead code), and updated per UPDATE: 1 an atomic addition into
    the params at every edge; 2 cold edges only; 3 hot edges only, into the program's copy
    (pid % copies) of the [H, K] hot sums; 4 both (the async kernel's split); 5 a plain store of the
    gathered value, changed, at cold edges. The value added is the gathered one (times `scale` into
    the params: 1e-12 keeps them near their start), or 1 without a gather."""
    pid = tl.program_id(0)
    edge = pid.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    feature = tl.load(feature_ptr + edge, mask=edge < n_edges, other=-1)
    present = feature >= 0
    feature = tl.where(present, feature, 0).to(tl.int64)
    lanes = tl.arange(0, K)[None, :]
    row = param_ptr + feature[:, None] * K + lanes
    if GATHER:
        value = tl.load(row, mask=present[:, None], other=0.0)
        tl.store(gathered_ptr + pid, tl.sum(tl.sum(value, axis=1), axis=0))
    else:
        value = tl.full([BLOCK, K], 1.0, tl.float32)
    hot = present & (feature < hot_size)
    cold = present & ~hot
    if UPDATE == 1:
        tl.atomic_add(row, value * scale, mask=present[:, None], sem="relaxed")
    if (UPDATE == 2) | (UPDATE == 4):
        tl.atomic_add(row, value * scale, mask=cold[:, None], sem="relaxed")
    if (UPDATE == 3) | (UPDATE == 4):
        sums = hot_sums_ptr + ((pid % copies).to(tl.int64) * hot_size + feature)[:, None] * K + lanes
        tl.atomic_add(sums, value, mask=hot[:, None], sem="relaxed")
    if UPDATE == 5:
        tl.store(row, value * 0.999, mask=cold[:, None])


def run_traffic(edge_feature, params, hot_sums, hot_size, copies, width, gather, update, scale=1e-12):
    """One launch of the flat kernel over every edge slot for rows of `width` floats (a power of
    two); returns what its programs gathered."""
    block = edges_per_program(width)
    programs = triton.cdiv(edge_feature.numel(), block)
    gathered = torch.zeros(programs, dtype=torch.float32, device=edge_feature.device)
    edge_traffic[(programs,)](edge_feature, params, hot_sums, gathered, edge_feature.numel(), hot_size, copies, scale,
                              K=width, GATHER=gather, UPDATE=update, BLOCK=block, num_warps=4)
    return gathered


@triton.jit
def _row_traffic(param_ptr, hot_sums_ptr, feature, present, hot, cold, pid, hot_size, copies, scale,
                 K: tl.constexpr):
    """One array's accesses at a block of edges (edge_traffic's ATOMIC_SPLIT with a gather); returns the
    sum of what it gathered."""
    lanes = tl.arange(0, K)[None, :]
    row = param_ptr + feature[:, None] * K + lanes
    value = tl.load(row, mask=present[:, None], other=0.0)
    tl.atomic_add(row, value * scale, mask=cold[:, None], sem="relaxed")
    sums = hot_sums_ptr + ((pid % copies).to(tl.int64) * hot_size + feature)[:, None] * K + lanes
    tl.atomic_add(sums, value, mask=hot[:, None], sem="relaxed")
    return tl.sum(tl.sum(value, axis=1), axis=0)


@triton.jit
def edge_traffic_together(feature_ptr, p0, p1, p2, p3, h0, h1, h2, h3, gathered_ptr, n_edges, hot_size, copies, scale,
                          W0: tl.constexpr, W1: tl.constexpr, W2: tl.constexpr, W3: tl.constexpr,
                          BLOCK: tl.constexpr):
    """Each edge's id read once, then its row of every array pN of WN floats (0: no array) gathered
    and changed as the async kernel splits its changes (cold edges into the table, hot ones into the
    program's copy of hN's [H, WN] sums); what a program gathered goes to gathered_ptr[pid]."""
    pid = tl.program_id(0)
    edge = pid.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    feature = tl.load(feature_ptr + edge, mask=edge < n_edges, other=-1)
    present = feature >= 0
    feature = tl.where(present, feature, 0).to(tl.int64)
    hot = present & (feature < hot_size)
    cold = present & ~hot
    total = _row_traffic(p0, h0, feature, present, hot, cold, pid, hot_size, copies, scale, W0)
    if W1 > 0:
        total += _row_traffic(p1, h1, feature, present, hot, cold, pid, hot_size, copies, scale, W1)
    if W2 > 0:
        total += _row_traffic(p2, h2, feature, present, hot, cold, pid, hot_size, copies, scale, W2)
    if W3 > 0:
        total += _row_traffic(p3, h3, feature, present, hot, cold, pid, hot_size, copies, scale, W3)
    tl.store(gathered_ptr + pid, total)


def run_traffic_together(edge_feature, tables, widths, hot_sums, hot_size, copies, scale=1e-12):
    """One launch of the single-pass kernel over every edge slot: tables[i] holds rows of widths[i]
    floats (powers of two; at most ARRAYS_PER_PASS arrays), hot_sums[i] copies x H of them; returns
    what its programs gathered."""
    if not 1 <= len(tables) <= ARRAYS_PER_PASS:
        raise ValueError(f"one pass makes the accesses of 1 to {ARRAYS_PER_PASS} arrays, got {len(tables)}")
    block = edges_per_program(max(widths))
    programs = triton.cdiv(edge_feature.numel(), block)
    gathered = torch.zeros(programs, dtype=torch.float32, device=edge_feature.device)
    absent = ARRAYS_PER_PASS - len(tables)
    # an absent array's pointers are the first's, its width 0: the kernel leaves them alone
    tables, hot_sums = [*tables, *tables[:1] * absent], [*hot_sums, *hot_sums[:1] * absent]
    widths = [*widths, *[0] * absent]
    edge_traffic_together[(programs,)](edge_feature, *tables, *hot_sums, gathered, edge_feature.numel(), hot_size,
                                       copies, scale, W0=widths[0], W1=widths[1], W2=widths[2], W3=widths[3],
                                       BLOCK=block, num_warps=4)
    return gathered


@dataclasses.dataclass(frozen=True)
class EpochAccesses:
    """What an async epoch must touch: its real edges (hot ones below H), the widths in floats of the
    per-feature arrays read and changed at each (params the optimizer does not derive from its
    state, then the state), and the bytes of the layout it streams through once."""

    edges: int
    hot_edges: int
    arrays: tuple            # ((name, floats per feature row), ...)
    streamed_bytes: int
    barriers: int = 0        # grid-wide barriers an epoch meets (sync: two a batch)

    @property
    def floats_per_edge(self):
        return sum(width for _, width in self.arrays)

    @property
    def row_bytes(self):
        """Bytes gathered from the rows in an epoch (as many again are added to them)."""
        return 4 * self.edges * self.floats_per_edge

    def line(self, floor_ms=None, kernel_ms=None):
        """The roofline line: accesses and bytes, and where measured the floor and a kernel's
        fraction of it."""
        arrays = ", ".join(f"{name} {width}" for name, width in self.arrays)
        floats = f"{self.floats_per_edge} float{'s' * (self.floats_per_edge != 1)}"
        text = (f"roofline: {self.edges:,} edges an epoch ({100 * self.hot_edges / max(self.edges, 1):.0f} % hot), "
                f"each reading and changing {floats} ({arrays}): "
                f"{self.row_bytes / 1e9:.3f} GB gathered and as many added, {self.streamed_bytes / 1e9:.3f} GB of "
                "layout streamed" + (f", {self.barriers:,} grid barriers" if self.barriers else ""))
        if floor_ms is not None:
            what = "these accesses and barriers" if self.barriers else "these accesses"
            text += f"; floor (one flat pass of {what}, or their bytes at copy bandwidth) {floor_ms:.2f} ms"
            if kernel_ms is not None:
                text += f"; the kernel's {kernel_ms:.2f} ms is {kernel_ms / floor_ms:.2f}x the floor"
        return text


def row_arrays(ir):
    """(name, floats per feature row) of each per-feature array an async kernel reads and changes at
    every edge: the params the optimizer does not derive from its state, then each param's state
    (one float a row where the state is kept per row of a vector param)."""
    states = ir.optimizer.states if ir.optimizer is not None else ()
    derivable = set(ir.optimizer.derivable) if ir.optimizer is not None else set()
    arrays = [(p.name, p.size) for p in ir.params if p.name not in derivable]
    # named as ModelState names them
    arrays += [(f"{p.name}_{state}", 1 if per_row else p.size) for p in ir.params for state, _, per_row in states]
    return tuple(arrays)


def epoch_accesses(ir, layout, hot_size):
    """The accesses of an async epoch of `ir` over `layout` with the plan's hot segment (ids below
    hot_size)."""
    real = layout.edge_feature >= 0
    edges, hot = int(real.sum()), int((real & (layout.edge_feature < hot_size)).sum())
    slots = layout.extent()[1]
    per_slot = 4 + (4 if layout.edge_value is not None else 0) + (4 if layout.edge_field is not None else 0)
    streamed = slots * per_slot + 4 * layout.labels.numel()
    return EpochAccesses(edges, hot, row_arrays(ir), streamed)


def measure_floor(accesses, layout, hot_size, copies):
    """Milliseconds of an epoch's floor (a CUDA layout): the larger of one flat pass making every
    edge's accesses of every array together (rows gathered and changed as the async kernel splits its
    changes: cold edges' atomic additions into the table, hot edges' into `copies` per-program sums;
    more than ARRAYS_PER_PASS arrays in further passes, summed) and the epoch's bytes (rows gathered
    and written back, the layout streamed) at the GPU's copy bandwidth. A width that is not a power of
    two is timed at the next one (an over-estimate)."""
    from alac.runtime.device.timing import gpu_milliseconds
    from alac.runtime.planning.planner import measure_access_costs

    widths = [triton.next_power_of_2(width) for _, width in accesses.arrays]
    passes = 0.0
    for first in range(0, len(widths), ARRAYS_PER_PASS):
        group = widths[first:first + ARRAYS_PER_PASS]
        tables = [torch.zeros(layout.n_features * width, device=layout.device) for width in group]
        hot_sums = [torch.zeros(max(1, copies * hot_size * width), device=layout.device) for width in group]
        milliseconds, _ = gpu_milliseconds(lambda: run_traffic_together(layout.edge_feature, tables, group, hot_sums,
                                                                        hot_size, copies), FLOOR_REPEATS)
        passes += milliseconds
    moved = 2 * accesses.row_bytes + accesses.streamed_bytes
    return max(passes, moved / (measure_access_costs(layout.device).copy_gb_per_s * 1e9) * 1000)


def epoch_roofline(ir, layout, hot_size, copies):
    """(the accesses of an async epoch, their floor in milliseconds; None off a GPU)."""
    accesses = epoch_accesses(ir, layout, hot_size)
    if layout.device.type != "cuda":
        return accesses, None
    return accesses, measure_floor(accesses, layout, hot_size, copies)


# grid barriers timed per launch of the barrier kernel (8,000: sync_breakdown's count)
BARRIER_COUNT = 8000


@triton.jit
def only_barriers(arrivals_ptr, n):
    """The grid's programs meet at n grid-wide barriers and do nothing else."""
    for i in range(n):
        grid_barrier(arrivals_ptr, (i + 1) * tl.num_programs(0))


def barrier_microseconds(programs, device, barriers=BARRIER_COUNT):
    """Microseconds per grid-wide barrier of `programs` resident programs (a GPU; under the
    interpreter, one program: several would wait for each other forever)."""
    from alac.runtime.device.timing import gpu_milliseconds

    arrivals = torch.zeros(1, dtype=torch.int32, device=device)

    def run():
        arrivals.zero_()
        only_barriers[(programs,)](arrivals, barriers)

    return 1000 * gpu_milliseconds(run, FLOOR_REPEATS)[0] / barriers


def sync_epoch_roofline(ir, layout, hot_size, replicas, batches, programs):
    """(the accesses of a sync epoch with edge updates and grid barriers, their floor in milliseconds;
    None off a GPU): every edge's rows gathered and changed (hot edges into `replicas` sums), and two
    barriers of `programs` programs a batch."""
    accesses = dataclasses.replace(epoch_accesses(ir, layout, hot_size), barriers=2 * batches)
    if layout.device.type != "cuda":
        return accesses, None
    barriers_ms = accesses.barriers * barrier_microseconds(programs, layout.device) / 1000
    return accesses, measure_floor(accesses, layout, hot_size, max(replicas, 1)) + barriers_ms


def plan_roofline(ir, plan, layout):
    """The roofline of an epoch of `plan` on `layout`: (its accesses, their floor in milliseconds or
    None off a GPU) for async plans and sync plans with edge updates and grid barriers; (None, None)
    for other sync plans (their updates visit each touched feature once, a different access pattern)."""
    from alac.runtime.execution.schedule import async_programs, sync_programs

    if plan.semantics == "async":
        return epoch_roofline(ir, layout, plan.hot_size, async_programs(plan, layout))
    variant = plan.variant.for_optimizer(ir.optimizer)
    if not (variant.edge_updates and variant.grid_barrier):
        return None, None
    batches = -(-layout.n_chunks // plan.chunks_per_batch)
    programs = sync_programs(plan, layout, interpret=layout.device.type != "cuda")
    return sync_epoch_roofline(ir, layout, plan.hot_size, plan.replicas, batches, programs)


def epoch_line(ir, plan, layout, epoch_ms):
    """The roofline line of a training run on a GPU (None elsewhere, for a plan without one, or where
    the floor's own copies of the arrays would take more than a quarter of the free memory): the
    accesses, their floor and the run's median epoch (epoch_ms) against it."""
    if layout.device.type != "cuda":
        return None
    from alac.runtime.device.memory import available_bytes

    widths = [triton.next_power_of_2(width) for _, width in row_arrays(ir)]
    needed = 4 * layout.n_features * sum(widths[:ARRAYS_PER_PASS])
    if needed > available_bytes(layout.device) // 4:
        return f"roofline: not measured (its flat pass would need {needed / 1e9:.1f} GB of copies of the tables)"
    accesses, floor = plan_roofline(ir, plan, layout)
    return None if accesses is None else accesses.line(floor, epoch_ms)
