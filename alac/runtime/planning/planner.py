"""The planner: picks the plan's *how* (chunk size, edge tile, hot segment H, replicas R, warps)
from the data's shape and the GPU's measured costs, and autotunes what the cost model cannot decide.

Cost model (cuWide §4.3, importance-based caching): a feature is worth summing inside a program
when the random accesses it saves exceed the coalesced ones it costs. Summing a hot feature's
gradients costs about two coalesced accesses per flush of the sums (their read and the write back),
and saves one random access (atomic) per further occurrence; with c and r the measured costs of a
coalesced and a random access, the threshold is th = 2c / r occurrences per flush period, and H is
the number of features whose expected occurrences in one, frequency * rows per period / rows, reach
th. A sync program flushes after its chunk (C rows); an async program every flush_every chunks.
Replicas: in sync semantics every chunk of a batch still adds one atomic per hot feature; R copies
of the hot accumulator spread the hottest feature's chunks (at most B / C per batch) over R
addresses, and cost a dense pass over R * H values per batch, so R is the hottest feature's chunks
per batch, capped where that pass would exceed the batch's own edges.

Measured c and r are cached per GPU name; autotuned plans per (model, data shape, GPU).
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
from dataclasses import dataclass

import torch

from alac.cache import default_cache_dir
from alac.plan import Plan
from alac.runtime.device.timing import gpu_milliseconds
from alac.runtime.execution.schedule import async_programs_for
from alac.runtime.movement.blocks import PADDING_MARGIN, is_block_source

# Sizes of the access-cost microbenchmark: 64M int32 (256 MB) streamed, gathered from a table of
# 16M floats (64 MB, past the 50 MB L2 of an H100) at random positions, so both read device memory.
_STREAM_ELEMENTS = 64 << 20
_TABLE_ELEMENTS = 16 << 20


@dataclass(frozen=True)
class AccessCosts:
    device: str
    coalesced_ns: float     # per 4-byte element read in order
    random_ns: float        # per 4-byte element gathered at a random position
    copy_gb_per_s: float    # device-to-device copy bandwidth (bytes read + written)

    @property
    def threshold(self):
        """th = 2c / r: occurrences per chunk from which a feature is worth summing in a program."""
        return 2 * self.coalesced_ns / self.random_ns


def _seconds(function):
    return gpu_milliseconds(function, repeats=5, warmup=0)[0] / 1000


def measured_per_gpu(kind, costs_type, measure, device="cuda"):
    """costs_type(**fields) measured by measure(gpu name) on this GPU once, then read from a JSON file
    per GPU name and kind in the cache folder (measured again if that file is unreadable)."""
    name = torch.cuda.get_device_name(device)
    path = default_cache_dir() / "gpu" / f"{name.replace(' ', '_')}{kind}.json"
    if path.exists():
        try:
            return costs_type(**json.loads(path.read_text()))
        except (ValueError, TypeError):
            pass
    costs = measure(name)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(dataclasses.asdict(costs)))
    return costs


def measure_access_costs(device="cuda"):
    """Microbenchmark of c and r on this GPU (a second or two), cached on disk per GPU name."""
    def measure(name):
        stream = torch.ones(_STREAM_ELEMENTS, dtype=torch.int32, device=device)
        copy = torch.empty_like(stream)
        table = torch.rand(_TABLE_ELEMENTS, device=device)
        index = torch.randint(0, _TABLE_ELEMENTS, (_STREAM_ELEMENTS,), device=device)
        gathered = torch.empty(_STREAM_ELEMENTS, device=device)
        coalesced = _seconds(lambda: torch.sum(stream, dtype=torch.int64)) / _STREAM_ELEMENTS
        # the gather also streams its index: subtract that coalesced read
        random = _seconds(lambda: torch.index_select(table, 0, index, out=gathered)) / _STREAM_ELEMENTS - coalesced
        seconds = _seconds(lambda: copy.copy_(stream))
        return AccessCosts(name, coalesced * 1e9, max(random, coalesced) * 1e9, 2 * stream.numel() * 4 / seconds / 1e9)

    return measured_per_gpu("", AccessCosts, measure, device)


def hot_size_from_costs(frequency, n_rows, costs, rows_per_period):
    """H: features whose expected occurrences per flush period (rows_per_period of the n_rows rows;
    frequency: occurrences of every feature) reach the threshold th = 2c / r."""
    per_period = frequency.double() * rows_per_period / max(n_rows, 1)
    return int((per_period >= costs.threshold).sum())


# Of the L2, the share an async epoch's per-program hot sums (P programs x H features x the floats of
# their params' rows x 4 bytes) may take: past it their additions miss the L2 and a larger H costs more
# than it saves (benchmarks/flow_sweep.py --hot: FM k = 16, 32 and 64 epochs against their sums' bytes).
HOT_SUMS_L2_SHARE = 0.45


def hot_sums_cap(programs, row_floats, l2_bytes):
    """The most hot features whose async sums, programs x row_floats floats a feature, fit
    HOT_SUMS_L2_SHARE of an L2 of l2_bytes."""
    return int(HOT_SUMS_L2_SHARE * l2_bytes) // (4 * max(programs, 1) * max(row_floats, 1))


def l2_cache_bytes(device):
    return torch.cuda.get_device_properties(device).L2_cache_size


def capped_hot_size(hot, plan, programs, row_floats, device):
    """(H, why or None): the cost model's H, at most hot_sums_cap in async plans on a GPU."""
    if plan.semantics != "async" or torch.device(device).type != "cuda":
        return hot, None
    l2_bytes = l2_cache_bytes(device)
    cap = hot_sums_cap(programs, row_floats, l2_bytes)
    if hot <= cap:
        return hot, None
    return cap, (f"capped at {cap:,} of the cost model's {hot:,}: {programs} programs' sums of {row_floats} "
                 f"float{'s' * (row_floats != 1)} a feature fit {HOT_SUMS_L2_SHARE:.0%} of the "
                 f"{l2_bytes / 1e6:.0f} MB L2 (HOT_SUMS_L2_SHARE)")


def default_chunk_size(semantics, batch_size, backend):
    """C where none is given (`alac train`, the scikit-learn estimators): async generated kernels 32,
    the interpreter the whole batch, else Plan's; the largest power of two up to it dividing the batch."""
    if backend == "interpret":
        # the interpreter runs programs one after another: one program per batch is fastest
        return batch_size
    # async with the hot segment: C = 32 was the fastest for LR and FM (benchmarks/flow_sweep.py's chunk arms)
    return math.gcd(32 if semantics == "async" and backend == "triton" else Plan.chunk_size, batch_size)


def hot_size_for_data(dataset, plan, device="cuda", factor_size=0):
    """The default H of a plan on a data set (before any layout): the cost model's where the
    planner turns the hot segment on (binary features, vector params of at most
    HOT_SEGMENT_MAX_FACTOR[semantics] values, a GPU), else 0."""
    return hot_segment_for_data(dataset, plan, device, factor_size).hot_size


def hot_segment_for_data(dataset, plan, device="cuda", factor_size=0, additive=True, row_floats=None):
    """The plan with the default hot segment for a data set or a block source (hot_segment_choice)."""
    if torch.device(device).type != "cuda":
        return dataclasses.replace(plan, hot_size=0)
    return hot_segment_choice(DataCounts.of(dataset, device), plan, device, factor_size, additive, row_floats).plan


@dataclass(frozen=True)
class DataCounts:
    """What the hot segment's cost model reads of the training data: whether its values are all 1,
    its rows and non-zeros, the hottest feature's occurrences, and every feature's (any order)."""

    binary: bool
    n_rows: int
    nnz: int
    frequency: object

    @staticmethod
    def of(data, device="cuda"):
        """The counts of a data set, a block source (its meta layout's: the whole data's) or a layout."""
        if is_block_source(data):
            return DataCounts("edge_value" not in data.optional, data.meta.n_rows, data.meta.stats.nnz,
                              data.meta.frequency)
        if hasattr(data, "frequency"):
            return DataCounts(data.edge_value is None, data.n_rows, data.stats.nnz, data.frequency)
        # counted on the GPU when the data is on the host (and a GPU is there to count on)
        on = device if torch.device(device).type == "cuda" and torch.cuda.is_available() else data.indices.device
        return DataCounts(data.is_binary, data.n_rows, data.nnz,
                          torch.bincount(data.indices.to(on).long(), minlength=data.n_features))


def hot_segment_choice(counts, plan, device="cuda", factor_size=0, additive=True, row_floats=None,
                       use_hot_segment=None):
    """PlanChoice: the plan with the hot segment for data of these DataCounts (before any layout): H
    from the cost model (async: within hot_sums_cap), and for sync R replicas of the hot sums, where the
    planner turns it on (use_hot_segment None: hot_segment_by_default), else H = 0; with the reasons.
    additive: the optimizer's rule is (SGD's: resident chunks need it). row_floats: the floats of a
    feature's param rows (default 1 + factor_size: LR's w, FM's w and v)."""
    reasons = [("chunk_size", plan.chunk_size, "the plan's C")]
    if torch.device(device).type != "cuda":
        return PlanChoice(dataclasses.replace(plan, hot_size=0),
                          reasons + [("hot_size", 0, "no GPU: no access costs to weigh")])
    costs = measure_access_costs(device)
    semantics, n_rows = plan.semantics, max(counts.n_rows, 1)
    variant = plan.variant
    resident = variant.resident_tiles and variant.edge_updates and additive
    if use_hot_segment is None:
        use_hot_segment = hot_segment_by_default(semantics, counts.binary, factor_size, resident)
    frequency = counts.frequency.to(device) if torch.cuda.is_available() else counts.frequency
    hot = hot_size_from_costs(frequency, n_rows, costs, rows_per_flush(plan))
    why = (f"features with >= th = 2c/r = 2 x {costs.coalesced_ns:.3f} ns / {costs.random_ns:.3f} ns = "
           f"{costs.threshold:.2f} occurrences per flush period ({rows_per_flush(plan)} rows)")
    if not use_hot_segment:
        most = HOT_SEGMENT_MAX_FACTOR[semantics]
        reasons.append(("hot_size", 0, f"off by default for {semantics}"
                        + ("" if counts.binary else " on real-valued data")
                        + (f" with k = {factor_size} > {most}" if factor_size > most else "")
                        + (" with resident chunks" if factor_size <= most and counts.binary else "")
                        + f" (measured: see HOT_SEGMENT_MAX_FACTOR); the cost model gives {hot}: {why}"))
        return PlanChoice(dataclasses.replace(plan, hot_size=0), reasons, costs)
    programs = async_programs_for(plan, -(-counts.n_rows // plan.chunk_size), plan.chunk_size)
    hot, capped = capped_hot_size(hot, plan, programs, row_floats or 1 + factor_size, device)
    reasons.append(("hot_size", hot, why + (f"; {capped}" if capped else "")))
    plan = dataclasses.replace(plan, hot_size=hot)
    if semantics == "sync":
        replicas = replicas_for(float(frequency.max()) / n_rows if frequency.numel() else 0.0, counts.nnz / n_rows,
                                plan, hot)
        reasons.append(("replicas", replicas, "the hottest feature's chunks per batch, capped by the dense pass"))
        plan = dataclasses.replace(plan, replicas=replicas)
    return PlanChoice(plan, reasons, costs)


def rows_per_flush(plan):
    """Rows whose hot gradients one flush applies: async, a program's chunks between flushes; sync,
    the batch (the replicas' sums are applied once per batch)."""
    if plan.semantics == "async":
        return plan.chunk_size * plan.flush_every
    return plan.batch_size


def replicas_for(hottest_per_row, mean_nnz, plan, hot_size):
    """R: the chunks per batch the hottest feature (hottest_per_row occurrences per row) is in,
    capped so the dense pass over R * H stays below the batch's own edges (mean_nnz per row)."""
    if not hot_size:
        return 1
    chunks_per_batch = plan.chunks_per_batch
    chunks_hit = min(chunks_per_batch, math.ceil(hottest_per_row * plan.chunk_size * chunks_per_batch))
    cap = max(1, int(plan.batch_size * mean_nnz // hot_size))
    return max(1, min(chunks_hit, cap, 16))


@dataclass
class PlanChoice:
    plan: Plan
    reasons: list          # (decision, value, why) for `alac inspect`
    costs: AccessCosts | None = None
    timings: list = dataclasses.field(default_factory=list)   # autotune: (plan description, ms)


# Where the planner turns the hot segment on by default: binary features, and vector params (FM's
# factors) of at most HOT_SEGMENT_MAX_FACTOR[semantics] values (0: scalar params only): async LR and FM
# k = 16, 32 and 64 ran faster with it (flow.py; k = 64 with its sums within HOT_SUMS_L2_SHARE,
# flow_sweep.py --hot). Off on real-valued data (20news async converged worse with it). Off in sync
# plans, whose resident chunks a hot segment turns off, slower than they are (flow.py's sync arms).
HOT_SEGMENT_MAX_FACTOR = {"sync": 0, "async": 64}


def hot_segment_by_default(semantics, binary, factor_size=0, resident=False):
    """resident: the plan runs resident chunks without a hot segment (Plan.variant, for its optimizer)."""
    return binary and factor_size <= HOT_SEGMENT_MAX_FACTOR[semantics] and not (semantics == "sync" and resident)


def plan_for(layout, model_ir, semantics="sync", batch_size=1024, base=None, device="cuda",
             use_hot_segment=None):
    """A plan for a layout from the cost model (no timing runs): H, R from measured costs, C the layout's."""
    base = base or Plan(batch_size=batch_size, semantics=semantics, chunk_size=layout.chunk_size)
    return hot_segment_choice(DataCounts.of(layout, device), base, device, model_ir.factor_size,
                              model_ir.optimizer.additive, model_ir.row_floats, use_hot_segment)


def autotune(candidates, run_epoch, cache_key=None):
    """The fastest of candidate plans, timing run_epoch(plan) -> seconds for each; cached on disk."""
    path = None
    if cache_key is not None:
        path = default_cache_dir() / "autotune" / f"{cache_key}.json"
        if path.exists():
            try:
                saved = json.loads(path.read_text())
                return Plan(**saved["plan"]), saved["timings"]
            except (ValueError, TypeError, KeyError):
                pass
    timings = []
    for plan in candidates:
        started = time.perf_counter()
        seconds = run_epoch(plan)
        timings.append((plan.describe(), 1000 * seconds, time.perf_counter() - started))
    best = candidates[min(range(len(candidates)), key=lambda i: timings[i][1])]
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"plan": dataclasses.asdict(best), "timings": timings}))
    return best, timings


# Of the GPU's free memory, the share a resident layout may take when no budget is given: the rest is
# left to parameters, optimizer state, the validation layout and the build's temporaries.
RESIDENT_SHARE = 0.6


def layout_bytes(dataset, chunk_size):
    """Device bytes of the data set's layout before it is built: its edges (ids, values where there
    are any), padded as the mean of ELL padding allows, and 16 bytes per row slot."""
    edge_bytes = 4 + (4 if dataset.values is not None else 0)
    lengths = dataset.row_lengths()
    padding = 1.0 if bool((lengths == lengths[:1]).all()) else PADDING_MARGIN
    return int(dataset.nnz * edge_bytes * padding) + 16 * chunk_size * -(-dataset.n_rows // chunk_size)


def streaming_budget(dataset, plan, device):
    """The device bytes for streamed blocks when the layout does not fit Plan.memory_budget (without
    one: a share of the GPU's free memory, and on the CPU never); None when it stays resident."""
    if plan.memory_budget is None and torch.device(device).type != "cuda":
        return None
    from alac.runtime.device.memory import available_bytes

    budget = plan.memory_budget or int(RESIDENT_SHARE * available_bytes(device))
    return budget if layout_bytes(dataset, plan.chunk_size) > budget else None
