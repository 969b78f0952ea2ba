"""The plan: every *how* decision, kept apart from the model's *what* (as in Halide)."""

from __future__ import annotations

from dataclasses import dataclass

from alac.codegen.variants import PLAN_FIELDS, KernelVariant
from alac.errors import OptionError

# lines spread by default (sync plans): 256, 1024 and 4096 ran alike in flow.py's sync arms and none was
# slower; benchmarks/sync_resident.py measures 1024 against none
SPREAD_LINES = 1024


def _power_of_two(n):
    return n >= 1 and n & (n - 1) == 0


@dataclass(frozen=True)
class Plan:
    """How a model is executed; the README's table lists every option. The benchmarks that chose the
    defaults are named beside them; their figures are in benchmarks/results and BENCHMARKS.md."""

    # Samples per program; the batch is B / C chunks. 8 is the fastest sync C at batch 1024 for LR and FM
    # (benchmarks/sync_resident.py's chunk-size arms; 128 chunks a batch leave every program one on an
    # H100 or H200); `alac train` uses 32 for async.
    chunk_size: int = 8
    batch_size: int = 1024
    kernels: str = "fused"
    # None: enough warps for 16 edge-tile values per thread, at least 4 (schedule.warps_for_tile).
    num_warps: int | None = None
    semantics: str = "sync"
    # Hot segment: features [0, hot_size) get their gradients summed inside a program before any
    # atomic (0: off); in sync semantics into `replicas` copies of the hot accumulator.
    hot_size: int = 0
    replicas: int = 1
    # Async: persistent programs (None: max_in_flight / C); sync with grid_barrier: the programs that
    # share a batch's chunks. LR's logloss hardly moves from 8k to 34k samples in flight (flow_sweep's
    # in-flight arms); 132 x 128 is the middle. Launched is not resident: schedule.resident_programs.
    programs: int | None = None
    max_in_flight: int = 132 * 128
    # Async hot segment: chunks between a program's flushes of its hot sums; 8 was LR's fastest of 1..32
    # at the best validation loss (flow_sweep's flush arms); FM's 16 and 32 ran about as fast as 8.
    flush_every: int = 8
    # Async: a param that is a function of its optimizer's state (FTRL's weight) is computed where a
    # cold edge reads it, never stored (faster: benchmarks/optimizers.py's FTRL arms).
    derive_params: bool = True
    # Async: programs claim chunk-order positions from an atomic counter instead of fixed shares.
    # Off: it ran faster but converged worse (flow_sweep's queue arms).
    chunk_queue: bool = False
    # Sync on a GPU: replay the epoch's launches as a CUDA graph.
    cuda_graph: bool = True
    # Sync: an epoch is one persistent launch whose programs meet at a grid-wide barrier after each
    # of a batch's kernel groups (per-batch decays, such as exact L2, still launch per batch).
    grid_barrier: bool = True
    # Sync with an additive optimizer (SGD): the update adds every cold edge's change instead of
    # flagging touched features (faster: benchmarks/sync_breakdown.py).
    edge_updates: bool = True
    # Edge updates: a chunk's equal features in a slot summed first. Off: it did not pay
    # (benchmarks/sync_breakdown.py).
    sum_equal_edges: bool = False
    # Edge updates in a grid-barrier epoch, one chunk per program and batch, whose rows fit one tile:
    # the chunk's ids and edge gradients stay in registers from the apply to the update instead of a
    # round trip through the batch's edge buffer (benchmarks/sync_resident.py).
    resident_tiles: bool = True
    # Resident chunks: the next batch's chunk (ids, values, rows) read before the second barrier, so that
    # after it only the params are gathered (faster at identical results: benchmarks/sync_resident.py).
    prefetch_chunks: bool = True
    # Trainer: the ids of the 32 x N most frequent features after the hot segment renumbered so that the
    # N most frequent start N different cache lines (alac.runtime.movement.line_spread); None: SPREAD_LINES for
    # sync, 0 for async (whose lock-free epochs converged worse with it: BENCHMARKS.md, not kept).
    spread_lines: int | None = None
    # Sync only: no floating-point atomics, gradients summed per feature in a fixed order, so runs
    # repeat bit for bit (alac.runtime.execution.deterministic).
    deterministic: bool = False
    # Edge slots per step of a program's edge loop (the S of its [S, C] tiles); None: the schedule's.
    slots_per_step: int | None = None
    # Params whose rows (and optimizer state) live in pinned host memory, read and updated by the
    # kernels through mapped memory: (name, "host") pairs; every other param is on the device.
    placement: tuple = ()
    # Bytes of GPU memory the training data may take; a layout larger than this (or than the GPU's
    # free memory when None) is streamed from pinned host memory in blocks (alac.runtime.movement.streams).
    memory_budget: int | None = None
    # Rows over the GPU budget for them: "auto" (the planner's cheaper of the two), "hybrid_hash" (a
    # cache of the budget, alac.runtime.rows.hybrid_hash) or "fae" (FAE's hot table, alac.runtime.rows.fae).
    param_mode: str = "auto"
    # Bytes of host memory the model's rows may take; rows over the GPU budget that exceed it too live in
    # memory-mapped files (alac.runtime.rows.disk) under rows_folder (None: the system's temporary
    # folder). None: the host's available memory when the rows are placed.
    host_memory_budget: int | None = None
    rows_folder: str | None = None

    def __post_init__(self):
        if self.param_mode not in ("auto", "hybrid_hash", "fae"):
            raise OptionError(f"param_mode is auto, hybrid_hash or fae, got {self.param_mode!r}")
        for name in ("memory_budget", "host_memory_budget"):
            if getattr(self, name) is not None and getattr(self, name) <= 0:
                raise OptionError(f"{name} must be a positive number of bytes, got {getattr(self, name)}")
        for entry in self.placement:
            if not (isinstance(entry, (tuple, list)) and len(entry) == 2 and entry[1] in ("device", "host")):
                raise OptionError(f"placement entries are (param, 'device' or 'host'), got {entry!r}")
        # a plan read back from JSON (the autotune cache) has lists where it had tuples
        object.__setattr__(self, "placement", tuple(tuple(entry) for entry in self.placement))
        self.variant  # noqa: B018 (the variant's rules check the codegen options)
        if self.chunk_size < 1 or self.chunk_size & (self.chunk_size - 1):
            raise OptionError(f"chunk_size must be a power of two (a Triton block), got {self.chunk_size}")
        if self.batch_size < self.chunk_size or self.batch_size % self.chunk_size:
            raise OptionError(f"batch_size ({self.batch_size}) must be a multiple of chunk_size ({self.chunk_size})")
        if self.slots_per_step is not None and not _power_of_two(self.slots_per_step):
            raise OptionError(f"slots_per_step must be a power of two, got {self.slots_per_step}")
        if self.num_warps is not None and not (self.num_warps <= 32 and _power_of_two(self.num_warps)):
            raise OptionError(f"num_warps must be a power of two from 1 to 32, got {self.num_warps}")
        if self.flush_every < 1:
            raise OptionError(f"flush_every must be >= 1, got {self.flush_every}")
        if self.spread_lines is not None and self.spread_lines < 0:
            raise OptionError(f"spread_lines must be >= 0, got {self.spread_lines}")
        if self.hot_size < 0 or self.replicas < 1:
            raise OptionError(f"hot_size must be >= 0 and replicas >= 1, got {self.hot_size}, {self.replicas}")

    @property
    def chunks_per_batch(self):
        return self.batch_size // self.chunk_size

    @property
    def lines_to_spread(self):
        """spread_lines, its default resolved."""
        if self.spread_lines is not None:
            return self.spread_lines
        return SPREAD_LINES if self.semantics == "sync" else 0

    @classmethod
    def for_variant(cls, variant, hot_size=64, **launch):
        """A plan whose variant is variant (hot_size is used when the variant has a hot segment)."""
        return cls(hot_size=hot_size if variant.hot else 0,
                   placement=tuple((name, "host") for name in variant.host_params),
                   **{name: getattr(variant, name) for name in PLAN_FIELDS}, **launch)

    @property
    def variant(self):
        """What of the plan the generated source depends on (alac.codegen.variants)."""
        return KernelVariant.of(hot=self.hot_size > 0, host_params=self.host_params,
                                **{name: getattr(self, name) for name in PLAN_FIELDS})

    @property
    def host_params(self):
        return tuple(sorted(name for name, where in self.placement if where == "host"))

    def _sync_options(self):
        variant = self.variant
        launches = " per_batch_launches"
        if variant.grid_barrier:
            launches = f" grid_barrier programs={self.programs or 'auto'}"
        return (launches + (" edge_updates" if variant.edge_updates else "")
                + (" summed" if variant.sum_equal_edges else "") + (" resident" if variant.resident_tiles else "")
                + (" prefetch" if variant.prefetch_chunks else ""))

    def describe(self):
        text = (f"semantics={self.semantics} kernels={self.kernels} chunk_size={self.chunk_size} "
                f"batch_size={self.batch_size} num_warps={self.num_warps or 'auto'} hot_size={self.hot_size} "
                f"slots_per_step={self.slots_per_step or 'auto'}")
        if self.semantics == "sync":
            return (text + f" replicas={self.replicas} spread_lines={self.lines_to_spread}"
                    + (" deterministic" if self.deterministic else "")
                    + self._sync_options())
        return text + (f" programs={self.programs or 'auto'} max_in_flight={self.max_in_flight} "
                       f"flush_every={self.flush_every}" + ("" if self.derive_params else " stored_params")
                       + (" chunk_queue" if self.chunk_queue else ""))
