"""Parameters larger than the GPU, PICASSO's way: mixed batches on a GPU cache of the hot rows.

HybridHash (`../shared/papers`, PICASSO §IV) keeps every row (params and optimizer state) in host
memory and a cache on the GPU: a hot store of the `capacity` rows counted most often (a row counts
once per segment it is touched in: a miss costs one load per segment, however often the segment
reads the row), and a staging area. Batches are trained in segments of whole batches: before a
segment, the rows it touches that the hot store lacks (its misses) are gathered from host memory into
the staging area, the segment's edges are re-pointed at cache slots, the generated kernels train it
on the GPU, and the staging rows are written back. Every row has exactly one current copy at any
time, so the parameters are those of an all-GPU run of the same batches (transparency). The first
`warmup` batches run with an empty hot store and only count; from then on, every `refresh` batches
the hot store is re-ranked from the counts: rows leaving it are written back before their slots take
the rows entering it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch

from alac.errors import OptionError
from alac.runtime.memory import mapped_view
from alac.runtime.state import ModelState


@dataclass(frozen=True)
class CacheShape:
    """The GPU cache: hot-store rows, staging rows, the warm-up and the re-rank period in batches."""

    capacity: int
    staging: int
    warmup: int = 32
    refresh: int = 256

    def __post_init__(self):
        if self.capacity < 0 or self.staging < 1 or self.warmup < 0 or self.refresh < 1:
            raise OptionError(f"a HybridHash cache needs capacity >= 0, staging >= 1, warmup >= 0 and "
                              f"refresh >= 1 (batches), got {self}")

    @property
    def rows(self):
        return self.capacity + self.staging


@dataclass
class CacheStatistics:
    """A run's cache figures: per training batch the share of its edges the hot store served, and the
    rows (params and state) copied each way between host and GPU."""

    hit_ratio: list = dataclasses.field(default_factory=list)
    rows_in: int = 0
    rows_out: int = 0
    segments: int = 0


class HybridHash:
    """The host table (`whole`, an executor holding every row, placed in host memory on a GPU) and the
    GPU cache (`working`, an executor on the device whose rows are cache slots)."""

    def __init__(self, whole, working, shape):
        params = sorted(p.name for p in whole.ir.params)
        if torch.device(working.device).type == "cuda" and sorted(whole.plan.host_params) != params:
            raise OptionError(f"a HybridHash host table keeps every param ({', '.join(params)}) in host memory: "
                              f"its plan places {sorted(whole.plan.host_params)} there")
        self.whole, self.working, self.shape = whole, working, shape
        # the plan's hot segment (the layout's H most frequent rows) keeps slots 0 .. H - 1 for good: the
        # kernels sum the gradients of ids below H per program, and those should stay the hot rows
        self.hot_segment = working.plan.hot_size
        if self.hot_segment > shape.capacity:
            raise OptionError(f"the hot store ({shape.capacity:,} rows) must hold the plan's hot segment "
                              f"(hot_size {self.hot_segment:,})")
        self.statistics = CacheStatistics()
        self._steps = 0            # batches trained
        self._misses_per_batch = 1.0

    def initialize(self, layout, value_scale):
        """Every row drawn into the host table; an empty cache of the same params and state."""
        self.whole.initialize(layout, value_scale)
        self.working.value_scale = value_scale
        device = self.working.device
        state = self.whole.state
        empty = {part: {name: torch.zeros((self.shape.rows, *values.shape[1:]), dtype=values.dtype, device=device)
                        for name, values in getattr(state, part).items()} for part in ("params", "states")}
        self.working.state = ModelState.placed(empty["params"], {k: v.clone() for k, v in state.globals.items()},
                                               empty["states"], device)
        n = layout.n_features
        self.slot_of = torch.full((n,), -1, dtype=torch.int32, device=device)   # cache slot of a row, or -1
        self.cached = torch.full((self.shape.capacity,), -1, dtype=torch.int64, device=device)  # row of a hot slot
        self.counts = torch.zeros(n, dtype=torch.int32, device=device)
        self._seen = torch.zeros(n, dtype=torch.bool, device=device)
        self._current = True       # the host table's hot rows and globals are current
        self._steps = 0
        self._pin_hot_segment()

    def _pin_hot_segment(self):
        rows = torch.arange(self.hot_segment, device=self.slot_of.device)
        if rows.numel():
            self._load(rows, rows)
            self.slot_of[rows] = rows.int()
            self.cached[rows] = rows

    def clear(self):
        """Forget the cached rows (the host table was replaced, e.g. by a restored snapshot): an empty
        hot store, the counts kept."""
        self.slot_of.fill_(-1)
        self.cached.fill_(-1)
        self._current = True
        self._pin_hot_segment()

    # -- moving rows ------------------------------------------------------------------------------

    def _tensors(self):
        whole, working = self.whole.state, self.working.state
        return [(whole.params[k], working.params[k]) for k in whole.params] + \
               [(whole.states[k], working.states[k]) for k in whole.states]

    def _load(self, rows, slots):
        """Copy rows of the host table into cache slots (a gather on the GPU through mapped memory)."""
        for host, cache in self._tensors():
            cache[slots] = mapped_view(host, cache.device)[rows]
        self.statistics.rows_in += rows.numel()

    def _store(self, rows, slots, traffic=True):
        """Write cache slots back to their rows of the host table (traffic: of training, counted)."""
        for host, cache in self._tensors():
            mapped_view(host, cache.device)[rows] = cache[slots]
        if traffic:
            self.statistics.rows_out += rows.numel()

    def _sync_globals(self, into_host):
        source, target = (self.working.state, self.whole.state) if into_host else (self.whole.state, self.working.state)
        for name, values in target.globals.items():
            values.copy_(source.globals[name].to(values.device))

    def refresh(self):
        """Re-rank: the hot store becomes the plan's hot segment and the rows counted most after it;
        rows leaving it are written back, rows entering it loaded into the freed slots."""
        H = self.hot_segment
        if self.shape.capacity == H:
            return
        ranked = self.counts[H:]
        wanted = torch.topk(ranked, min(self.shape.capacity - H, ranked.numel())).indices + H
        keep = torch.zeros_like(self._seen)
        keep[:H] = True
        keep[wanted] = True
        occupied = self.cached >= 0
        leaving = occupied & ~keep[self.cached.clamp(min=0)]
        if bool(leaving.any()):
            slots = torch.nonzero(leaving).squeeze(1)
            self._store(self.cached[slots], slots)
            self.slot_of[self.cached[slots]] = -1
            self.cached[slots] = -1
        entering = wanted[self.slot_of[wanted] < 0]
        free = torch.nonzero(self.cached < 0).squeeze(1)[:entering.numel()]
        if entering.numel():
            self._load(entering, free)
            self.slot_of[entering] = free.int()
            self.cached[free] = entering

    # -- training ---------------------------------------------------------------------------------

    def _segment_end(self, first, batches):
        """The batch after the segment from `first`: the staging area's estimated reach, cut at the
        end of the warm-up and at the next re-rank."""
        # 0.8: room for a segment to miss more rows per batch than the last one did
        reach = max(1, int(0.8 * self.shape.staging / max(self._misses_per_batch, 1.0)))
        step, warmup = self._steps, self.shape.warmup
        boundary = warmup - step if step < warmup else self.shape.refresh - (step - warmup) % self.shape.refresh
        return min(batches, first + reach, first + boundary)

    def _served(self, touched, rows, batches, rows_per_batch):
        """Per batch of a segment, the share of its edges whose rows the hot store holds. Edges come in
        chunk order, so a batch's edges are a run: prefix sums, not atomics (adding into one counter
        per batch made every edge of the batch collide on it)."""
        batch = torch.div(rows, rows_per_batch, rounding_mode="floor")
        hits = torch.nn.functional.pad(torch.cumsum(self.slot_of[touched] >= 0, 0), (1, 0))
        ends = torch.searchsorted(batch, torch.arange(1, batches + 1, device=batch.device))
        starts = torch.nn.functional.pad(ends[:-1], (1, 0))
        return (hits[ends] - hits[starts]) / (ends - starts).clamp(min=1)

    def _train_segment(self, layout, working_layout, labels, order, epoch, lr, first, end, per_batch, loss):
        """Batches first .. end - 1 of order; returns the batch after the last one trained (a segment
        whose misses overflow the staging area is cut in half)."""
        chunks = order[first * per_batch:min(end * per_batch, order.numel())]
        edges, touched, rows = layout.edges_of(chunks)
        self._seen[touched] = True
        missing = torch.nonzero(self._seen & (self.slot_of < 0)).squeeze(1)
        if missing.numel() > self.shape.staging:
            self._seen[touched] = False
            if end - first == 1:
                raise OptionError(f"one batch touches {missing.numel():,} rows that are not in the hot store, "
                                  f"more than the {self.shape.staging:,} staging rows of the cache: raise the staging "
                                  "rows to at least the batch's distinct features")
            return self._train_segment(layout, working_layout, labels, order, epoch, lr, first,
                                       first + (end - first) // 2, per_batch, loss)
        self._misses_per_batch = missing.numel() / (end - first)
        slots = torch.arange(self.shape.capacity, self.shape.capacity + missing.numel(), device=missing.device)
        self._hit_ratios.append(self._served(touched, rows, end - first, per_batch * layout.chunk_size))
        # a dense add of the touched mask: adding one per edge made the hot rows' counters collide
        # (75 ms of a 0.63 s epoch at 64 MB on H100, benchmarks/placement.py)
        self.counts += self._seen
        self._seen[touched] = False
        if missing.numel():
            self._load(missing, slots)
            self.slot_of[missing] = slots.int()
        working_layout.edge_feature[edges] = self.slot_of[touched]
        self.working._queue_epoch(working_layout, labels, epoch, lr, chunks)
        loss += self.working.loss_sum
        if missing.numel():
            self._store(missing, slots)
            self.slot_of[missing] = -1
        self.statistics.segments += 1
        self._steps += end - first
        return end

    def train_epoch(self, layout, labels, epoch, lr, order=None):
        """One epoch of mixed batches (the layout's epoch order unless given, in global row ids);
        returns its mean training loss. The epoch's per-batch hit ratios join self.statistics."""
        if self._current:
            self._sync_globals(into_host=False)
            self._current = False
        order = layout.chunk_order(epoch, self.working.seed) if order is None else order
        per_batch = self.working.plan.chunks_per_batch
        batches = -(-order.numel() // per_batch)
        working_layout = dataclasses.replace(layout, edge_feature=torch.full_like(layout.edge_feature, -1),
                                             n_features=self.shape.rows)
        loss = torch.zeros(1, device=self.working.device)
        self._hit_ratios = []
        first = 0
        while first < batches:
            if self._steps >= self.shape.warmup and (self._steps - self.shape.warmup) % self.shape.refresh == 0:
                self.refresh()
            first = self._train_segment(layout, working_layout, labels, order, epoch, lr, first,
                                        self._segment_end(first, batches), per_batch, loss)
        self.statistics.hit_ratio.extend(torch.cat(self._hit_ratios).tolist())
        return float(loss) / max(layout.n_rows, 1)

    def whole_executor(self):
        """The executor of every row, current (the hot store's rows and the globals written back)."""
        if not self._current:
            occupied = torch.nonzero(self.cached >= 0).squeeze(1)
            if occupied.numel():
                self._store(self.cached[occupied], occupied, traffic=False)
            self._sync_globals(into_host=True)
            self._current = True
        return self.whole

    def current_state(self):
        return self.whole_executor().state
