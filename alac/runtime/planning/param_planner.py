"""Where the model's rows live: all on the GPU when they fit its budget, else in pinned host memory
behind a HybridHash cache of the budget (alac.runtime.rows.hybrid_hash) or FAE's hot table of the budget's
most accessed rows (alac.runtime.rows.fae), whichever the cost model finds cheaper; and what that
will cost, predicted from the layout's access counts and measured throughputs.

Cost model of a HybridHash epoch (B batches, E edges, rows ranked by their accesses f_r):
- hit ratio: the accesses of the `capacity` most accessed rows over all accesses;
- a batch misses m = sum over the other rows of 1 - exp(-f_r / B) distinct rows, so a segment holds
  L = min(refresh / 4, 0.8 staging / 2 / m) batches (a staging half, a quarter re-rank period at
  most) and an epoch has S = B / L segments;
- every segment loads and writes back its distinct misses: sum_r S (1 - exp(-f_r / S)) rows each way,
  at the GPU's measured gather and scatter throughput over the host table's UVA mapping;
- bookkeeping (marking a segment's rows, finding the ones to stage, re-pointing its edges) per edge
  and per segment (launches, the host's wait for a segment's row count), timed on the cache before
  training (HybridHash.bookkeeping_seconds on two segment lengths; the constants below until then);
- the kernels: their measured time on the batches (timed on the cache itself) twice: with a program
  on every multiprocessor, when the side stream's row traffic and bookkeeping wait for them (serial:
  the epoch takes the sum), and leaving SIDE_MULTIPROCESSORS to the side stream (overlapped: the
  longer of the two); the cheaper one is chosen; plus RERANK_SECONDS at every re-rank, where the
  pipeline drains and the kernels wait, and when overlapped a segment's row traffic (run alone then);
- once the cache exists, the row traffic is re-timed with its own moves (HybridHash.row_move_seconds:
  a model's narrow params and states move at a transaction rate, not at the gather's bandwidth).

Cost model of an FAE epoch (L = the budget's rows, the L most accessed rows hot): a hot input (every
feature it touches hot) trains on the device; every edge of a cold input reads its row from host
memory and writes its update back (the measured gather and scatter throughputs); every swap between
kinds copies at most the L hot rows each way (FAE's START_RATE: two segments of each kind, three
swaps an epoch); training pure batches apart costs FAE_NS_PER_EDGE an edge beyond an all-GPU epoch's
kernels. The planner takes FAE when its traffic and that cost are below the cache's traffic and
bookkeeping, and HybridHash without measured throughputs.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import torch

from alac.codegen import allocated_row_bytes
from alac.errors import OptionError
from alac.runtime.device.memory import available_bytes, mapped_view
from alac.runtime.device.timing import gpu_milliseconds
from alac.runtime.execution.state import row_bytes_of
from alac.runtime.planning.planner import layout_bytes, measured_per_gpu
from alac.runtime.rows.hybrid_hash import PERIOD_SEGMENTS, SIDE_MULTIPROCESSORS, CacheShape

# Before the cache's bookkeeping is timed, and per segment: its kernels (finding a segment's rows,
# re-pointing its edges) per edge as benchmarks/placement.py's Kaggle-shaped arms measured them; per
# segment as measured with the bookkeeping in torch, an upper bound
BOOKKEEPING_NS_PER_EDGE = 0.13
SEGMENT_SECONDS = 4e-4
# The kernels' idle time at a re-rank (the last segment's write-back, the re-rank, the next segment's
# bookkeeping): the gaps between kernels after re-ranks in a profiled epoch of benchmarks/placement.py's
# Kaggle-shaped set, a few times those between other segments
RERANK_SECONDS = 5e-3
# Of a budget, the share the staging area takes (the rest is the hot store): 1/4 beat or tied 1/2
# (benchmarks/placement.py's cache shapes)
STAGING_SHARE = 0.25
# Sizes of the mapped-access microbenchmark: 1M random rows of 16 floats out of 4M (256 MB pinned)
_MAPPED_ROWS, _MAPPED_ACCESSES, _MAPPED_WIDTH = 4 << 20, 1 << 20, 16


@dataclass(frozen=True)
class MappedCosts:
    device: str
    gather_gb_per_s: float    # random 64-byte rows read from pinned host memory by a GPU gather
    scatter_gb_per_s: float   # and written back by a GPU scatter


def measure_mapped_costs(device="cuda"):
    """The GPU's gather and scatter throughput over pinned host rows (a second), cached per GPU name."""
    def measure(name):
        table = mapped_view(torch.zeros((_MAPPED_ROWS, _MAPPED_WIDTH), pin_memory=True), device)
        ids = torch.randint(0, _MAPPED_ROWS, (_MAPPED_ACCESSES,), device=device)
        values = torch.ones((_MAPPED_ACCESSES, _MAPPED_WIDTH), device=device)
        moved = _MAPPED_ACCESSES * _MAPPED_WIDTH * 4
        gather_ms, _ = gpu_milliseconds(lambda: table[ids], repeats=5)
        scatter_ms, _ = gpu_milliseconds(lambda: table.index_put_((ids,), values), repeats=5)
        return MappedCosts(name, moved / gather_ms / 1e6, moved / scatter_ms / 1e6)

    return measured_per_gpu("-mapped", MappedCosts, measure, device)


@dataclass(frozen=True)
class CacheForecast:
    """A HybridHash epoch as the cost model sees it (seconds per epoch and its parts)."""

    hit_ratio: float
    edges: float
    segments: float
    rows_moved: float           # rows loaded per epoch (as many are written back)
    traffic_seconds: float
    bookkeeping_seconds: float
    reranks: float
    kernel_seconds: float | None             # every multiprocessor training
    side_kernel_seconds: float | None = None  # SIDE_MULTIPROCESSORS left to the side stream (None: not timed)

    def with_bookkeeping(self, ns_per_edge, segment_seconds):
        """This forecast with the bookkeeping's costs per edge and per segment measured."""
        return dataclasses.replace(self, bookkeeping_seconds=bookkeeping_seconds(self.edges, self.segments,
                                                                                 ns_per_edge, segment_seconds))

    def with_row_moves(self, seconds_per_row):
        """This forecast with the row traffic of the cache's own moves, timed per row loaded and
        written back (every param and state of a row, each a launch)."""
        return dataclasses.replace(self, traffic_seconds=self.rows_moved * seconds_per_row)

    @property
    def rerank_seconds(self):
        """The kernels' wait at the epoch's re-ranks: each drains the pipeline, so a segment's
        write-back and the next one's loads run with no kernels beside them."""
        return self.reranks * (RERANK_SECONDS + self.traffic_seconds / max(self.segments, 1.0))

    @property
    def serial_seconds(self):
        """The side stream's work between the kernels, which hold every multiprocessor."""
        return None if self.kernel_seconds is None else \
            self.kernel_seconds + self.traffic_seconds + self.bookkeeping_seconds + self.reranks * RERANK_SECONDS

    @property
    def overlapped_seconds(self):
        """The side stream's work beside the kernels, on the multiprocessors they leave it."""
        return None if self.side_kernel_seconds is None else \
            max(self.side_kernel_seconds, self.traffic_seconds + self.bookkeeping_seconds) + self.rerank_seconds

    @property
    def overlapped(self):
        return self.overlapped_seconds is not None and self.overlapped_seconds < self.serial_seconds

    @property
    def epoch_seconds(self):
        return self.overlapped_seconds if self.overlapped else self.serial_seconds

    def samples_per_s(self, n_rows):
        return None if self.kernel_seconds is None else n_rows / self.epoch_seconds


def forecast_cache(frequency, shape, batches, row_bytes, costs, kernel_seconds=None):
    """CacheForecast of an epoch of `batches` batches whose rows are accessed `frequency` times (any
    order), on a cache of `shape`, with MappedCosts `costs` (None: no traffic time)."""
    counts = torch.sort(torch.as_tensor(frequency, dtype=torch.float64).flatten(), descending=True).values
    edges = float(counts.sum())
    cold = counts[shape.capacity:]
    cold = cold[cold > 0]
    hit_ratio = 1.0 - float(cold.sum()) / max(edges, 1.0)
    misses_per_batch = float((1 - torch.exp(-cold / max(batches, 1))).sum())
    reach = min(max(1.0, shape.refresh / PERIOD_SEGMENTS),
                max(1.0, 0.8 * (shape.staging // 2) / max(misses_per_batch, 1e-9)))
    segments = max(1.0, batches / reach)
    rows_moved = float((segments * (1 - torch.exp(-cold / segments))).sum())
    traffic = 0.0 if costs is None else \
        rows_moved * row_bytes / 1e9 * (1 / costs.gather_gb_per_s + 1 / costs.scatter_gb_per_s)
    return CacheForecast(hit_ratio, edges, segments, rows_moved, traffic, bookkeeping_seconds(edges, segments),
                         batches / shape.refresh, kernel_seconds)


def bookkeeping_seconds(edges, segments, ns_per_edge=BOOKKEEPING_NS_PER_EDGE, segment_seconds=SEGMENT_SECONDS):
    return edges * ns_per_edge * 1e-9 + segments * segment_seconds


# FAE swaps per epoch at its starting rate (segments cold, hot, cold, hot)
FAE_SWAPS = 3


@dataclass(frozen=True)
class FaeForecast:
    """An FAE epoch's row traffic as the cost model sees it."""

    hot_rows: int
    hot_input_share: float
    cold_edges: float
    traffic_seconds: float | None      # None without measured throughputs
    overhead_seconds: float = 0.0      # its pure batches' cost beyond an all-GPU epoch's kernels


# An FAE epoch's cost beyond its row traffic, per edge (pure hot and cold batches trained apart, swaps
# and the validation steering between them): FAE's epoch with every input hot (no row traffic) less the
# all-GPU epoch, per edge (benchmarks/placement.py's Kaggle-shaped arms)
FAE_NS_PER_EDGE = 0.65


def forecast_fae(hot_rows, hot_input_share, cold_edges, row_bytes, costs, edges=0.0):
    traffic = None if costs is None else \
        (cold_edges + FAE_SWAPS * hot_rows) * row_bytes / 1e9 * (1 / costs.gather_gb_per_s + 1 / costs.scatter_gb_per_s)
    return FaeForecast(hot_rows, hot_input_share, cold_edges, traffic, edges * FAE_NS_PER_EDGE * 1e-9)


def hot_inputs(dataset, old_to_new, hot_rows, block=1 << 24):
    """(the share of the rows whose features are all among the hot_rows most accessed, the entries of
    the others): FAE's input classifier on the layout's frequency order, `block` entries at a time
    (a few int64 copies of every entry would not fit beside a large data set)."""
    old_to_new = old_to_new.to(dataset.device)
    highest = torch.full((dataset.n_rows,), -1, dtype=torch.int32, device=dataset.device)
    for first in range(0, dataset.nnz, block):
        entries = torch.arange(first, min(first + block, dataset.nnz), device=dataset.device)
        rows = torch.searchsorted(dataset.indptr, entries, right=True) - 1
        ids = old_to_new[dataset.indices[entries].long()].int()
        highest.scatter_reduce_(0, rows, ids, "amax")
    hot = highest < hot_rows
    return float(hot.float().mean()) if dataset.n_rows else 1.0, float(dataset.row_lengths()[~hot].sum())


@dataclass(frozen=True)
class ParamPlacement:
    """The planner's answer: mode "device" (every row on the GPU), "hybrid_hash" with its cache, "fae"
    with its hot rows, or "disk" (the rows in files behind the cache)."""

    mode: str
    row_bytes: int
    table_bytes: int
    budget_bytes: int | None
    shape: CacheShape | None = None
    forecast: CacheForecast | None = None
    reasons: tuple = ()
    fae: FaeForecast | None = None

    def lines(self):
        return [f"{decision} = {value}: {why}" for decision, value, why in self.reasons]


def cache_shape_for(budget_bytes, row_bytes, batch_rows_bound):
    """The cache a budget holds: STAGING_SHARE of its rows for staging (at least one batch's rows per
    staging half), the rest the hot store; OptionError when the budget does not hold two batches' rows."""
    rows = budget_bytes // row_bytes
    staging = max(int(rows * STAGING_SHARE), 2 * batch_rows_bound)
    if staging >= rows:
        raise OptionError(f"a GPU budget of {budget_bytes:,} bytes holds {rows:,} rows of {row_bytes} bytes, not "
                          f"more than two batches' {2 * batch_rows_bound:,} rows: raise --gpu-memory or lower "
                          "the batch")
    return CacheShape(capacity=rows - staging, staging=staging)


def choose_placement(n_features, row_bytes, budget_bytes, frequency, batches, batch_rows_bound, costs=None,
                     inputs=None, mode="auto", kernel_row_bytes=0, host_budget_bytes=None):
    """ParamPlacement of a model of n_features rows of row_bytes (params and optimizer state) under a
    budget for them (None: no limit), for a layout whose rows are accessed `frequency` times in
    `batches` batches, one batch touching at most batch_rows_bound rows; inputs(hot rows): FAE's
    (hot input share, cold edges) (None: FAE not considered); mode: Plan.param_mode;
    kernel_row_bytes: what the kernels allocate per row on the GPU beside it (gradient sums);
    host_budget_bytes: host memory the rows may take (None: no limit), past which they live on disk."""
    table = n_features * row_bytes
    on_device = row_bytes + kernel_row_bytes
    if budget_bytes is None or n_features * on_device <= budget_bytes:
        why = "no GPU budget for parameters" if budget_bytes is None else \
            f"{n_features * on_device:,} bytes (with the kernels' buffers) fit the {budget_bytes:,}"
        return ParamPlacement("device", row_bytes, table, budget_bytes, reasons=(("placement", "device", why),))
    shape = cache_shape_for(budget_bytes, on_device, batch_rows_bound)
    forecast = forecast_cache(frequency, shape, batches, row_bytes, costs)
    buffers = f" and {kernel_row_bytes} of the kernels' buffers" if kernel_row_bytes else ""
    reasons = (
        ("placement", "hybrid_hash", f"{n_features:,} rows x {row_bytes} bytes = {table:,} bytes exceed the "
                                     f"{budget_bytes:,}-byte budget: the rows live in pinned host memory"),
        ("cache", f"{shape.capacity:,} hot + {shape.staging:,} staging rows",
         f"the budget's rows of {row_bytes} bytes{buffers}, {STAGING_SHARE:.0%} (at least one batch's "
         f"{batch_rows_bound:,}) for a segment's misses"),
        ("hit ratio", f"{forecast.hit_ratio:.4f}", "the accesses of the rows the hot store holds, from the counts"),
        ("rows moved per epoch", f"{forecast.rows_moved:,.0f}",
         f"each way, in {forecast.segments:,.0f} segments" + ("" if costs is None else
                                                               f": {forecast.traffic_seconds:.3f} s at the measured "
                                                               f"{costs.gather_gb_per_s:.1f} GB/s gather, "
                                                               f"{costs.scatter_gb_per_s:.1f} GB/s scatter")),
        ("bookkeeping per epoch", f"{forecast.bookkeeping_seconds:.3f} s",
         f"{BOOKKEEPING_NS_PER_EDGE} ns per edge and {SEGMENT_SECONDS * 1e3:g} ms per segment (measured on H100), "
         "beside the kernels with the row traffic"),
        ("re-ranks per epoch", f"{forecast.reranks:.1f}", f"the kernels wait {RERANK_SECONDS * 1e3:g} ms at each "
                                                         "(measured on H100)"))
    if host_budget_bytes is not None and table > host_budget_bytes:
        disk = ("placement", "disk", f"{n_features:,} rows x {row_bytes} bytes = {table:,} bytes exceed the "
                                     f"{budget_bytes:,}-byte GPU budget and the {host_budget_bytes:,}-byte host "
                                     "memory budget: the rows live in memory-mapped files on disk")
        return ParamPlacement("disk", row_bytes, table, budget_bytes, shape, forecast, (disk, *reasons[1:]))
    if inputs is None or mode == "hybrid_hash":
        return ParamPlacement("hybrid_hash", row_bytes, table, budget_bytes, shape, forecast, reasons)
    hot_rows = min(n_features, budget_bytes // on_device)
    fae = forecast_fae(hot_rows, *inputs(hot_rows), row_bytes, costs, forecast.edges)
    cache_seconds = forecast.traffic_seconds + forecast.bookkeeping_seconds
    chosen = mode == "fae" or (fae.traffic_seconds is not None
                               and fae.traffic_seconds + fae.overhead_seconds < cache_seconds)
    compared = ("Plan.param_mode fae" if mode == "fae" else "no measured throughputs" if fae.traffic_seconds is None
                else f"{fae.traffic_seconds:.3f} s of row traffic and {fae.overhead_seconds:.3f} s of pure batches "
                     f"({FAE_NS_PER_EDGE} ns per edge) against the cache's {cache_seconds:.3f} s")
    fae_reasons = (("fae hot rows", f"{hot_rows:,}", "the budget's rows, the most accessed"),
                   ("fae hot inputs", f"{fae.hot_input_share:.4f}", "the share of rows whose features are all hot; "
                    f"the others' {fae.cold_edges:,.0f} edges read and write rows in host memory"),
                   ("mode", "fae" if chosen else "hybrid_hash", compared))
    if not chosen:
        return ParamPlacement("hybrid_hash", row_bytes, table, budget_bytes, shape, forecast, reasons + fae_reasons,
                              fae)
    placed = ("placement", "fae", reasons[0][2] + "; FAE's hot rows on the GPU")
    return ParamPlacement("fae", row_bytes, table, budget_bytes, reasons=(placed, *fae_reasons), fae=fae)


def plan_placement(ir, plan, dataset, layout, device):
    """ParamPlacement of the model `ir` trained by `plan` on a resident layout of `dataset`: the rows'
    budget is Plan.memory_budget less the layout (params_budget); mapped throughput measured on a GPU."""
    budget = params_budget(plan, layout_bytes(dataset, plan.chunk_size))
    gpu = budget is not None and torch.device(device).type == "cuda"
    costs = measure_mapped_costs(device) if gpu else None
    # the GPU kernels' per-row buffers (a sync plan's gradient sums) take as much again as a row's
    # params: an 84 GiB FM's 16 GiB budget ran out of the 80 GiB GPU without them counted
    buffers = 0
    if gpu:
        from alac.codegen import generate_kernels  # imports Triton: a GPU has it

        buffers = allocated_row_bytes(generate_kernels(ir, plan).manifest, max(ir.factor_size, 1))
    return choose_placement(layout.n_features, row_bytes_of(ir), budget, layout.frequency,
                            batches_of(layout.n_rows, plan), rows_per_batch_bound(plan, layout.stats.max_nnz), costs,
                            lambda hot_rows: hot_inputs(dataset, layout.old_to_new, hot_rows), plan.param_mode,
                            buffers, plan.host_memory_budget or available_bytes("cpu"))


def params_budget(plan, layout_bytes):
    """The GPU bytes for parameters and optimizer state: Plan.memory_budget less the resident layout,
    a quarter of it at least; None without a budget (every row on the GPU: a table too large for it
    is refused before allocation, naming its size)."""
    if plan.memory_budget is None:
        return None
    return max(plan.memory_budget - layout_bytes, plan.memory_budget // 4)


def rows_per_batch_bound(plan, max_nnz):
    """The most distinct rows one batch can touch."""
    return plan.batch_size * max(1, max_nnz)


def predicted_line(placement, n_rows):
    if placement.forecast is None or placement.forecast.kernel_seconds is None:
        return None
    f = placement.forecast
    side = f"row traffic {f.traffic_seconds:.3f} s + bookkeeping {f.bookkeeping_seconds:.3f} s"
    kernels = (f"the longer of kernels {f.side_kernel_seconds:.3f} s (leaving the side stream "
               f"{SIDE_MULTIPROCESSORS} multiprocessors) and {side}" if f.overlapped else
               f"kernels {f.kernel_seconds:.3f} s (every multiprocessor), then {side}")
    reranks = f.rerank_seconds if f.overlapped else f.reranks * RERANK_SECONDS
    return (f"predicted {f.samples_per_s(n_rows):,.0f} samples/s: {kernels}, + "
            f"{reranks:.3f} s of re-ranks per epoch")


def batches_of(n_rows, plan):
    return max(1, math.ceil(n_rows / plan.batch_size))
