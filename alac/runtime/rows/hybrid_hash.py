"""Parameters larger than the GPU, PICASSO's way: mixed batches on a GPU cache of the hot rows.

HybridHash (`../shared/papers`, PICASSO §IV) keeps every row (params and optimizer state) in host memory
and a cache on the GPU: a hot store of the `capacity` rows counted most often (a row counts once per
segment it is touched in: a miss costs one load per segment, however often the segment reads the row),
and a staging area of two halves. Batches are trained in segments of whole batches, their rows in the
staging half the previous segment does not use: the rows a segment touches that the hot store lacks are
gathered from host memory (misses), or copied on the GPU from the previous segment's half when it holds
them (carried), the segment's edges are re-pointed at cache slots (a short pass on the compute stream,
before its kernels), the generated kernels train it, and its staged rows not carried on are written
back. Row traffic runs on a side stream, so a segment's rows load and the previous one's store while
kernels train; finding a segment's rows (one kernel; the host waits for their count) runs on a
bookkeeping stream that waits only until the previous segment's rows took their
slots, not for the write-backs queued after them, so the host prepares a segment while the two before it
still train. Every row has exactly one current copy at any time, so the parameters are those of an
all-GPU run of the same batches (transparency). The first `warmup` batches run with an empty hot store and
only count; from then on, every `refresh` batches the hot store is re-ranked from the counts: rows
leaving it are written back before their slots take the rows entering it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from dataclasses import dataclass

import torch

from alac.errors import OptionError
from alac.runtime.device.memory import mapped_view
from alac.runtime.device.timing import gpu_milliseconds
from alac.runtime.execution.epoch import Segment, Segmented
from alac.runtime.execution.state import ModelState
from alac.runtime.rows.cache_remap import MOVE_PROGRAMS, move_rows, remap, segment_rows

# a re-rank period trains as this many segments at least: the pipeline drains at a re-rank, so only
# the period's later segments overlap their row traffic and bookkeeping with kernels
PERIOD_SEGMENTS = 4


# Multiprocessors a sync epoch kernel leaves to the side stream when row traffic overlaps it: with a
# program on every multiprocessor no side kernel ran beside it. Leaving 4 (128 programs: the 256 chunks
# of a batch of 4096 in two rounds, as on all 132) beat 24 and 46 (three rounds, the side kernels
# sharing their multiprocessors; benchmarks/placement.py --hybrid-only --side-multiprocessors S); the
# row moves run one program on each
SIDE_MULTIPROCESSORS = MOVE_PROGRAMS


def working_plan(plan, device, side_multiprocessors=SIDE_MULTIPROCESSORS):
    """The plan the cache's kernels train with: a sync plan's persistent programs leave
    side_multiprocessors to the side stream's bookkeeping and row traffic (unchanged on a CPU, for
    async plans and where the plan sets its programs)."""
    if torch.device(device).type != "cuda" or plan.semantics != "sync" or plan.programs:
        return plan
    multiprocessors = torch.cuda.get_device_properties(device).multi_processor_count
    return dataclasses.replace(plan, programs=max(1, multiprocessors - side_multiprocessors))



@dataclass(frozen=True)
class CacheShape:
    """The GPU cache: hot-store rows, staging rows, the warm-up and the re-rank period in batches."""

    capacity: int
    staging: int
    warmup: int = 32
    # re-rank every 1024 batches: faster than every 256 (benchmarks/placement.py --hybrid-only --refresh R)
    refresh: int = 1024

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
    rows (params and state) copied each way between host and GPU, and those copied on the GPU from one
    segment's staging half to the next's."""

    hit_ratio: list = dataclasses.field(default_factory=list)
    rows_in: int = 0
    rows_out: int = 0
    rows_carried: int = 0
    segments: int = 0


@dataclass
class _Staged:
    """A trained segment's rows in a staging half (their slots), the event of its kernels' end."""

    rows: torch.Tensor
    slots: torch.Tensor
    span: slice           # the slots, consecutive
    half: int
    done: object


class _Streams:
    """A compute stream (re-pointing edges, the kernels), a side stream (row traffic) and a bookkeeping
    stream (finding a segment's rows, whose counts the host waits for) with events between them on a
    GPU; on a CPU one sequence of work, the events None."""

    def __init__(self, device):
        self.cuda = torch.device(device).type == "cuda"
        self.side = torch.cuda.Stream(device) if self.cuda else None
        self.compute = torch.cuda.Stream(device) if self.cuda else None
        self.bookkeeping = torch.cuda.Stream(device) if self.cuda else None

    def on_side(self):
        return torch.cuda.stream(self.side) if self.cuda else contextlib.nullcontext()

    def on_bookkeeping(self):
        return torch.cuda.stream(self.bookkeeping) if self.cuda else contextlib.nullcontext()

    @contextlib.contextmanager
    def on_compute(self):
        """The caller's stream's work before, the compute and side streams' work after the block."""
        if not self.cuda:
            yield
            return
        caller = torch.cuda.current_stream()
        for stream in (self.compute, self.side, self.bookkeeping):
            stream.wait_stream(caller)
        with torch.cuda.stream(self.compute):
            yield
        for stream in (self.compute, self.side, self.bookkeeping):
            caller.wait_stream(stream)

    def record_side(self):
        return self.side.record_event() if self.cuda else None

    def record_compute(self):
        return self.compute.record_event() if self.cuda else None

    def record_bookkeeping(self):
        return self.bookkeeping.record_event() if self.cuda else None

    def bookkeeping_waits(self, event):
        if event is not None:
            self.bookkeeping.wait_event(event)

    def side_uses(self, *tensors):
        """Tensors the bookkeeping stream made, read on the side stream from now on."""
        if self.cuda:
            self.side.wait_stream(self.bookkeeping)
            for tensor in tensors:
                tensor.record_stream(self.side)

    def side_waits(self, event):
        if event is not None:
            self.side.wait_event(event)

    def compute_waits(self, event):
        if event is not None:
            self.compute.wait_event(event)


class HybridHash(Segmented):
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
        if shape.staging < 2:
            raise OptionError(f"a HybridHash cache stages rows in two halves: it needs staging >= 2, got {shape}")
        # segments alternate between the staging halves: one trains while the next one's rows load
        self._half = shape.staging // 2
        self._streams = _Streams(working.device)
        self._mapped_of = None
        self.statistics = CacheStatistics()
        self._steps = 0            # batches trained
        self._staged_per_batch = 1.0
        # the side stream's event after the latest segment's rows took their slots: a segment's
        # bookkeeping waits for it, not for the write-backs queued after it
        self._assigned = None

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
        self._marks = torch.zeros((n >> 5) + 1, dtype=torch.int32, device=device)   # a bit per row
        self._current = True       # the host table's hot rows and globals are current
        self._steps = 0
        self._pin_hot_segment()

    def _pin_hot_segment(self):
        self._mapped_of = None   # a new or restored host table: mapped anew
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
        """(host table as the GPU maps it, cache) per param and state: the mappings made once per host
        table (a mapping costs host time, and a segment moves rows of every tensor twice)."""
        whole, working = self.whole.state, self.working.state
        if self._mapped_of is None or self._mapped_of[0] is not whole or self._mapped_of[1] is not working:
            device = self.working.device
            self._pairs = [(mapped_view(whole.params[k], device), working.params[k]) for k in whole.params] + \
                          [(mapped_view(whole.states[k], device), working.states[k]) for k in whole.states]
            self._mapped_of = (whole, working)
        return self._pairs

    def _load(self, rows, slots):
        """Copy rows of the host table into cache slots (a gather on the GPU through mapped memory);
        slots: a tensor, or a slice of consecutive slots (gathered straight into them)."""
        for host, cache in self._tensors():
            if isinstance(slots, slice):
                move_rows(host, cache, rows, slots.start, to_listed=False)
            else:
                cache[slots] = host[rows]
        self.statistics.rows_in += rows.numel()

    def _store(self, rows, slots, traffic=True):
        """Write cache slots (a tensor or a slice) back to their rows of the host table (traffic: of
        training, counted)."""
        for host, cache in self._tensors():
            if isinstance(slots, slice):
                move_rows(host, cache, rows, slots.start, to_listed=True)
            else:
                host[rows] = cache[slots]
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
        keep = torch.zeros_like(self.counts, dtype=torch.bool)
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
        """The batch after the segment from `first`: a staging half's estimated reach (a share of a
        re-rank period at most), cut at the end of the warm-up and at the next re-rank."""
        # 0.8: room for a segment to stage more rows per batch than the last one did
        reach = max(1, min(int(0.8 * self._half / max(self._staged_per_batch, 1.0)),
                           self.shape.refresh // PERIOD_SEGMENTS))
        step, warmup = self._steps, self.shape.warmup
        boundary = warmup - step if step < warmup else self.shape.refresh - (step - warmup) % self.shape.refresh
        return min(batches, first + reach, first + boundary)

    def bookkeeping_seconds(self, layout, chunks):
        """Seconds a segment of these chunks spends marking, finding and re-pointing its rows, timed
        after a run that compiles the kernels; the cache's counts and slots unchanged."""
        out_feature = torch.full_like(layout.edge_feature, -1)

        def bookkeeping():
            self._rows_uncounted(layout, chunks)
            remap(layout, chunks, self.slot_of, out_feature, self.shape.capacity, self.working.plan.chunks_per_batch)

        return self._seconds(bookkeeping)

    def row_move_seconds(self, layout, chunks):
        """Seconds per row a segment of these chunks spends loading its staged rows into a staging
        half and writing them back (the rows' own values: the host table unchanged), timed after a
        run that compiles the moves; None when the chunks stage no row."""
        rows = self._rows_uncounted(layout, chunks)[0][:self._half]
        if not rows.numel():
            return None
        span, loaded = slice(self.shape.capacity, self.shape.capacity + rows.numel()), self.statistics.rows_in

        def moves():
            self._load(rows, span)
            self._store(rows, span, traffic=False)

        seconds = self._seconds(moves)
        self.statistics.rows_in = loaded
        return seconds / rows.numel()

    def _rows_uncounted(self, layout, chunks):
        """segment_rows of the chunks with their counts left alone (delta 0) and a limit of every edge
        of the chunks, which their rows never overflow: (rows the hot store lacks, where each is)."""
        edges = int(layout.chunk_width[chunks].sum()) * layout.chunk_size
        own = slice(self.shape.capacity, self.shape.capacity + edges)
        return segment_rows(layout, chunks, self.slot_of, self.counts, self.shape.capacity, own, self._marks, delta=0)

    def _seconds(self, function):
        """Seconds of a call of function (on a GPU the median of three) after one that compiles its kernels."""
        if self.working.device.type == "cuda":
            return gpu_milliseconds(function, repeats=3)[0] / 1e3
        function()
        started = time.perf_counter()
        function()
        return time.perf_counter() - started

    def _rows_of_segment(self, layout, chunks, half):
        """The rows the chunks touch, counted; of them the rows to stage in staging half `half` (not in
        the hot store) and where each is now: -1 in the host table, a slot of the previous segment's
        staging half (carried). A slot in `half` itself is a row of the segment before that one whose
        write-back is queued but may not have run: it is loaded from the host table after the
        write-back. None when the rows overflow a staging half."""
        first = self.shape.capacity + half * self._half
        return segment_rows(layout, chunks, self.slot_of, self.counts, self.shape.capacity,
                            slice(first, first + self._half), self._marks)

    def _segment(self, layout, working_layout, labels, order, epoch, lr, first, end, per_batch, pending):
        """A generator of one Segment: batches first .. end - 1 of order (fewer where their rows overflow
        a staging half: the run is cut in half until they fit), their rows in the staging half the
        previous segment (`pending`) does not use. Its bookkeeping (on the bookkeeping stream) and loads
        (on the side stream) run while the previous segment's kernels run; after the segment's kernels
        are queued the previous one is written back. Returns (the batch after the last one trained,
        this segment as pending)."""
        half = 0 if pending is None or pending.half else 1
        while True:
            chunks = order[first * per_batch:min(end * per_batch, order.numel())]
            with self._streams.on_bookkeeping():
                self._streams.bookkeeping_waits(self._assigned)
                found = self._rows_of_segment(layout, chunks, half)
            if found is not None:
                break
            if end - first == 1:
                raise OptionError(f"one batch touches more rows that are not in the hot store than the "
                                  f"{self._half:,} rows of a staging half ({self.shape.staging:,} staging rows): "
                                  "raise the staging rows to at least twice the batch's distinct features")
            end = first + (end - first) // 2
        rows, where = found
        self._staged_per_batch = rows.numel() / (end - first)
        self._streams.side_uses(rows, where)
        with self._streams.on_side():
            start = self.shape.capacity + half * self._half
            span = slice(start, start + rows.numel())
            slots = torch.arange(span.start, span.stop, device=rows.device)
            # every staged row is gathered from the host table (no host round trip to pick the misses);
            # the carried ones are then overwritten by their current values from the previous half
            self._load(rows, span)
            # a carried row's slot changes only once the previous segment's edges point at its old one
            self._streams.side_waits(self._remapped)
            self.slot_of[rows] = slots.int()
            self._assigned = self._streams.record_side()
            if pending is not None:
                self._streams.side_waits(pending.done)
                for _, cache in self._tensors():
                    move_rows(cache, cache, where, span.start, to_listed=False)
                self._carried += (where >= 0).sum()
            prepared = self._streams.record_side()
        self._streams.compute_waits(prepared)
        # the edges re-pointed on the compute stream: one short pass on every multiprocessor, where on
        # the side stream's few its blocks slowed the kernels they shared multiprocessors with
        # (benchmarks/placement.py's profiled cache epochs)
        remap(layout, chunks, self.slot_of, working_layout.edge_feature, self.shape.capacity, per_batch,
              tuple(counter[first:end] for counter in self._hits))
        self._remapped = self._streams.record_compute()
        # sync: a run of the epoch loaded once; async: the chunks as an epoch of their own
        yield Segment(self.working, working_layout, labels, epoch, lr, chunks=None if self._sync else chunks,
                      first=first, end=end)
        if not self._sync:
            self._loss += self.working.loss_sum
        done = self._streams.record_compute()
        if pending is not None:
            with self._streams.on_side():
                self._write_back(pending)
        self.statistics.segments += 1
        self._steps += end - first
        return end, _Staged(rows, slots, span, half, done)

    def _write_back(self, staged):
        """A trained segment's staged rows stored to the host table (on the side stream, after its
        kernels), and uncached unless carried on to the next segment (whose later write-back then
        stores their newer values over these)."""
        self._streams.side_waits(staged.done)
        self._store(staged.rows, staged.span)
        now = self.slot_of[staged.rows]
        self.slot_of[staged.rows] = torch.where(now == staged.slots, -1, now)

    def _drain(self, pending):
        """The pipeline emptied: the pending segment written back, the side stream after the
        bookkeeping (a re-rank reads its counts), the compute stream and the next bookkeeping after
        the side."""
        if pending is not None:
            with self._streams.on_side():
                self._write_back(pending)
        self._streams.side_waits(self._streams.record_bookkeeping())
        self._assigned = self._streams.record_side()
        self._streams.compute_waits(self._assigned)

    def segments(self, layout, labels, epoch, lr, order=None):
        """The row store's generator of an epoch's segments (alac.runtime.execution.epoch) of mixed
        batches (the layout's epoch order unless given, in global row ids), on the compute stream
        (their bookkeeping and row traffic on the other two); returns the loss sum as a device tensor.
        The epoch's per-batch hit ratios join self.statistics."""
        if self._current:
            self._sync_globals(into_host=False)
            self._current = False
        order = layout.chunk_order(epoch, self.working.seed) if order is None else order
        per_batch = self.working.plan.chunks_per_batch
        batches = -(-order.numel() // per_batch)
        # sync: the epoch's order, learning rates and batch scales loaded once, each segment a run of them
        self._sync = self.working.plan.semantics == "sync"
        with self._streams.on_compute():
            working_layout = dataclasses.replace(layout, edge_feature=torch.full_like(layout.edge_feature, -1),
                                                 n_features=self.shape.rows)
            self._loss = torch.zeros(1, device=self.working.device)
            if self._sync:
                self.working.load_epoch(working_layout, labels, epoch, lr, order)
            # the epoch's hits and edges per batch, counted into by every segment (no allocation of its own)
            self._hits = torch.zeros((2, batches), dtype=torch.int32, device=self.working.device)
            self._remapped = None
            self._carried = torch.zeros((), dtype=torch.int64, device=self.working.device)
            first, pending = 0, None
            while first < batches:
                if self._steps >= self.shape.warmup and (self._steps - self.shape.warmup) % self.shape.refresh == 0:
                    self._drain(pending)
                    pending = None
                    with self._streams.on_side():
                        self.refresh()
                        self._assigned = self._streams.record_side()  # the next segment's rows see the new store
                first, pending = yield from self._segment(layout, working_layout, labels, order, epoch, lr, first,
                                                          self._segment_end(first, batches), per_batch, pending)
            self._drain(pending)
            self.statistics.rows_carried += int(self._carried)
        if self._hits.numel():
            hits, edges = self._hits
            self.statistics.hit_ratio.extend((hits / edges.clamp(min=1)).tolist())
        return self.working.loss_sum if self._sync else self._loss

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
