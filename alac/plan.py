"""The plan: every *how* decision, kept apart from the model's *what* (as in Halide)."""

from __future__ import annotations

from dataclasses import dataclass

from alac.errors import OptionError

SEMANTICS = ("sync", "async")


def next_power_of_two(n):
    return 1 << max(0, (n - 1).bit_length())
KERNEL_FAMILIES = ("fused", "stage")


@dataclass(frozen=True)
class Plan:
    # Samples per program. A sweep on H200 over C in 16..128 (LR and FM k=16 on 4M x 39 rows) found
    # 16 fastest for sync batches of 1024 (64 programs per batch: 69-79 ms/epoch against 127 ms at
    # C = 128). For async with the hot segment C = 32 is faster (H100, benchmarks/results/
    # flow_sweep.md: LR 7.8 ms/epoch against 10.7 at C = 16); the zoo scripts pick 32 for async runs.
    # The batch size is a multiple of C (each batch is B / C chunks).
    chunk_size: int = 16
    batch_size: int = 1024
    kernels: str = "fused"
    # None: enough warps for 16 edge-tile values per thread, at least 4 (schedule.warps_for_tile).
    num_warps: int | None = None
    semantics: str = "sync"
    # Hot segment: re-indexed features [0, hot_size) get their gradients summed inside a program
    # before any atomic (0: off); in sync semantics into `replicas` copies of the hot accumulator.
    hot_size: int = 0
    replicas: int = 1
    # Async: persistent programs, each with one chunk of C samples in flight (None: max_in_flight / C);
    # sync with grid_barrier: the programs that share a batch's chunks.
    # A sweep on H200 found LR's validation logloss after 3 epochs within 0.0015 for 8k to 34k
    # samples in flight (0.5148-0.5163); 132 x 128 (one chunk of 128 per H200 multiprocessor) is the
    # middle of that range. With the hot segment on H100 (flow_sweep.md), half and twice as many took
    # LR's epoch from 7.8 ms to 6.5 and 6.0 and FM's from 17.3 to 16.9 and 18.1, logloss within
    # 0.0013: inside the run-to-run spread of those runs (about 15 %), so it was kept.
    # Launched is not resident: on H100 with Triton 3.6 the LR and FM kernels' ~255 registers per
    # thread fit 2 programs per multiprocessor, so 264 of the 528 run at once and the rest start as
    # they end (schedule.resident_programs; flow.py reports both counts).
    programs: int | None = None
    max_in_flight: int = 132 * 128
    # Async with a hot segment: chunks a program runs between flushes of its hot-gradient sums into
    # the params (1: after every chunk, exact sequential SGD with one program). 8 was the fastest at
    # the best LR logloss of K in 1..32 in the H100 sweep (flow_sweep.md: 7.8 ms, 0.5025; K = 1: 11.0,
    # 0.5098; K = 32: 9.7, 0.5165).
    flush_every: int = 8
    # Async: a param that is a function of its optimizer's state (FTRL's weight, of z and n) is
    # computed from the state where a cold edge reads it, never stored there (hot features keep the
    # value their flushes store; the runtime writes the whole param after the epoch). A cold FTRL
    # update is then one fetch-and-add (n) and one addition nobody waits for (z), instead of two
    # fetch-and-adds and a store: LR epoch 8.5 ms against 18.9 on H100 (async SGD: 5.0).
    derive_params: bool = True
    # Async: programs claim the epoch's chunk-order positions from a shared queue (an atomic counter)
    # until none is left, instead of a fixed share each (pid, pid + P, ...), so that they finish
    # within about a chunk of each other. Measured on H100 (one process, 4M rows): the LR kernel 8-9 %
    # faster at 1M and 4M rows, equal at 64M, so queued epochs scale within 7.5 % from 1M to 64M
    # rows (fixed shares: 17 %). Off by default: it converged worse, like launching one wave of the
    # resident programs instead of max_in_flight / C in two (validation logloss after 10 epochs
    # 0.5059 against 0.5035-0.5043 without hot segment; flushing every chunk diverged, 0.80; async
    # FTRL with derived weights spiked in its second epoch). It is the w gathers' L1 copies (not
    # coherent with other multiprocessors' atomic updates): loading w past L1 (`.cg`) made the queue
    # converge (0.5022; flushing every chunk 0.5036) but tripled the epoch (13-14 ms against 4.4), and
    # an evict-first hint did not help. Why fixed shares in two waves tolerate the stale copies
    # better than one wave of the same 264 resident programs was not found.
    chunk_queue: bool = False
    # Sync on a GPU: replay the epoch's launches as a CUDA graph.
    cuda_graph: bool = True
    # Sync: run an epoch as one persistent launch whose programs meet at a grid-wide barrier after
    # each of a batch's kernel groups (P = `programs`, or one per chunk of a batch, at most one per
    # multiprocessor so that all are resident), instead of launches per batch. Single batches and
    # plans with a per-batch decay (exact L2) still launch per batch.
    grid_barrier: bool = True
    # Sync with an additive optimizer (SGD): the update stage adds every cold edge's change, kept by
    # the apply stage in a per-batch edge buffer, instead of flagging the batch's features and
    # updating each once (an atomic flag store per edge, an exchange per edge, then a load and a
    # store per feature, where equal hot features serialize).
    edge_updates: bool = True
    # Edge updates: a chunk's equal features in a slot are summed first (a sort of the slot's C
    # edges and a segmented scan), so a feature gets one atomic addition per run instead of one per
    # edge. Off: measured on H100 (benchmarks/results/sync_breakdown.md) it did not pay, LR 47.5
    # against 48.5 ms per epoch, FM k = 16 100.6 against 92.5 (the sort costs what the fewer
    # additions save: a slot's 16 rows repeat a feature about 1.4 times on average).
    sum_equal_edges: bool = False
    # Sync only: no floating-point atomics; gradients are summed per feature in a fixed order, so
    # runs repeat bit for bit (alac.runtime.deterministic), at the cost of per-batch reductions.
    deterministic: bool = False
    # Edge slots per step of a program's edge loop (the S of its [S, C] edge tiles); None: the
    # schedule picks the row width within a register budget.
    slots_per_step: int | None = None

    def __post_init__(self):
        if self.kernels not in KERNEL_FAMILIES:
            raise OptionError(f"plan kernels must be one of {KERNEL_FAMILIES}, got {self.kernels!r}")
        if self.semantics not in SEMANTICS:
            raise OptionError(f"plan semantics must be one of {SEMANTICS}, got {self.semantics!r}")
        if self.chunk_size < 1 or self.chunk_size & (self.chunk_size - 1):
            raise OptionError(f"chunk_size must be a power of two (a Triton block), got {self.chunk_size}")
        if self.batch_size < self.chunk_size or self.batch_size % self.chunk_size:
            raise OptionError(f"batch_size ({self.batch_size}) must be a multiple of chunk_size ({self.chunk_size})")
        if self.deterministic and (self.semantics != "sync" or self.hot_size):
            raise OptionError("deterministic plans are sync plans without a hot segment")
        if self.semantics == "async" and self.kernels != "fused":
            raise OptionError("async semantics run the fused kernel only (kernels='fused')")
        if self.slots_per_step is not None and (self.slots_per_step < 1 or self.slots_per_step & (self.slots_per_step - 1)):
            raise OptionError(f"slots_per_step must be a power of two, got {self.slots_per_step}")
        if self.num_warps is not None and not (1 <= self.num_warps <= 32 and self.num_warps & (self.num_warps - 1) == 0):
            raise OptionError(f"num_warps must be a power of two from 1 to 32, got {self.num_warps}")
        if self.flush_every < 1:
            raise OptionError(f"flush_every must be >= 1, got {self.flush_every}")
        if self.hot_size < 0 or self.replicas < 1:
            raise OptionError(f"hot_size must be >= 0 and replicas >= 1, got {self.hot_size}, {self.replicas}")

    @property
    def chunks_per_batch(self):
        return self.batch_size // self.chunk_size

    @property
    def uses_grid_barrier(self):
        """Sync epochs run as one grid-barrier launch (deterministic plans launch per batch)."""
        return self.semantics == "sync" and self.grid_barrier and not self.deterministic

    @property
    def uses_edge_updates(self):
        """Sync updates add every edge's change, where the optimizer is additive."""
        return self.semantics == "sync" and self.edge_updates and not self.deterministic

    @property
    def sums_equal_edges(self):
        return self.uses_edge_updates and self.sum_equal_edges

    def _sync_options(self):
        return ((f" grid_barrier programs={self.programs or 'auto'}" if self.uses_grid_barrier else " per_batch_launches")
                + (" edge_updates" if self.uses_edge_updates else "") + (" summed" if self.sums_equal_edges else ""))

    def describe(self):
        text = (f"semantics={self.semantics} kernels={self.kernels} chunk_size={self.chunk_size} "
                f"batch_size={self.batch_size} num_warps={self.num_warps or 'auto'} hot_size={self.hot_size} "
                f"slots_per_step={self.slots_per_step or 'auto'}")
        if self.semantics == "sync":
            return (text + f" replicas={self.replicas}" + (" deterministic" if self.deterministic else "")
                    + self._sync_options())
        return text + (f" programs={self.programs or 'auto'} max_in_flight={self.max_in_flight} "
                       f"flush_every={self.flush_every}" + ("" if self.derive_params else " stored_params")
                       + (" chunk_queue" if self.chunk_queue else ""))

    def kernel_description(self):
        """What of the plan the generated source depends on (the rest are launch arguments)."""
        return (f"semantics={self.semantics} kernels={self.kernels} hot segment={'on' if self.hot_size else 'off'}"
                + (" deterministic" if self.deterministic else "")
                + (" grid_barrier" if self.uses_grid_barrier else "")
                + (" edge_updates" if self.uses_edge_updates else "") + (" summed" if self.sums_equal_edges else "")
                + (" stored_params" if self.semantics == "async" and not self.derive_params else "")
                + (" chunk_queue" if self.semantics == "async" and self.chunk_queue else "") +
                " (chunk size, slots per step, H, R, warps and programs are launch arguments)")
