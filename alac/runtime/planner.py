"""The planner: picks the plan's *how* (chunk size, edge tile, hot segment H, replicas R, warps)
from the data's shape and the GPU's measured costs, and autotunes what the cost model cannot decide.

Cost model (cuWide §4.3, importance-based caching): a feature is worth summing inside a program
when the random accesses it saves exceed the coalesced ones it costs. Summing a hot feature's
gradients in a chunk costs about two coalesced accesses per chunk (its segment's read and flush),
and saves one random access (atomic) per further occurrence; with c and r the measured costs of a
coalesced and a random access, the threshold is th = 2c / r occurrences per chunk, and H is the
number of features whose expected occurrences per chunk, frequency * C / rows, reach th.
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


def _time(function, repeats=5):
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        function()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1000)
    return sorted(times)[len(times) // 2]


def measure_access_costs(device="cuda"):
    """Microbenchmark of c and r on this GPU (a second or two), cached on disk per GPU name."""
    name = torch.cuda.get_device_name(device)
    path = default_cache_dir() / "gpu" / f"{name.replace(' ', '_')}.json"
    if path.exists():
        try:
            return AccessCosts(**json.loads(path.read_text()))
        except (ValueError, TypeError):
            pass
    stream = torch.ones(_STREAM_ELEMENTS, dtype=torch.int32, device=device)
    copy = torch.empty_like(stream)
    table = torch.rand(_TABLE_ELEMENTS, device=device)
    index = torch.randint(0, _TABLE_ELEMENTS, (_STREAM_ELEMENTS,), device=device)
    gathered = torch.empty(_STREAM_ELEMENTS, device=device)
    coalesced = _time(lambda: torch.sum(stream, dtype=torch.int64)) / _STREAM_ELEMENTS
    # the gather also streams its index: subtract that coalesced read
    random = _time(lambda: torch.index_select(table, 0, index, out=gathered)) / _STREAM_ELEMENTS - coalesced
    seconds = _time(lambda: copy.copy_(stream))
    costs = AccessCosts(name, coalesced * 1e9, max(random, coalesced) * 1e9,
                        2 * stream.numel() * 4 / seconds / 1e9)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(dataclasses.asdict(costs)))
    return costs


def hot_size_from_costs(layout, costs, chunk_size):
    """H: features whose expected occurrences per chunk reach the threshold th = 2c / r."""
    per_chunk = layout.frequency.double() * chunk_size / max(layout.n_rows, 1)
    return int((per_chunk >= costs.threshold).sum())


def replicas_from_costs(layout, plan, hot_size):
    """R: the hottest feature's chunks per batch, capped so the dense pass over R * H stays below
    the batch's own edges."""
    if not hot_size:
        return 1
    chunks_per_batch = plan.chunks_per_batch
    hottest = float(layout.frequency[0]) / max(layout.n_rows, 1)       # occurrences per row
    chunks_hit = min(chunks_per_batch, math.ceil(hottest * plan.chunk_size * chunks_per_batch))
    edges_per_batch = plan.batch_size * layout.stats.mean_nnz
    cap = max(1, int(edges_per_batch // hot_size))
    return max(1, min(chunks_hit, cap, 16))


@dataclass
class PlanChoice:
    plan: Plan
    reasons: list          # (decision, value, why) for `alac inspect`
    costs: AccessCosts | None = None
    timings: list = dataclasses.field(default_factory=list)   # autotune: (plan description, ms)


# Whether the planner turns the hot segment on. Measured on H200 (benchmarks/results/flow_lr.md,
# flow_fm.md, flow_sweep.md): in sync it never paid (LR 70.4 ms/epoch with it, 68.5 without; FM
# 162.8 against 152.4), and in async it ran 1.1-1.5x faster but cost validation logloss (LR 0.5187
# against 0.5035 after 10 epochs). So it is off by default; plan_for still reports the H the cost
# model gives, and use_hot_segment=True applies it.
HOT_SEGMENT_BY_DEFAULT = False


def plan_for(layout, model_ir, semantics="sync", batch_size=1024, base=None, device="cuda",
             use_hot_segment=HOT_SEGMENT_BY_DEFAULT):
    """A plan from the cost model (no timing runs): H, R from measured costs, C from the plan."""
    base = base or Plan(batch_size=batch_size, semantics=semantics, chunk_size=layout.chunk_size)
    reasons = [("chunk_size", base.chunk_size, "the layout's C")]
    costs = measure_access_costs(device) if torch.device(device).type == "cuda" else None
    if costs is None:
        return PlanChoice(base, reasons + [("hot_size", 0, "no GPU: no access costs to weigh")])
    hot = hot_size_from_costs(layout, costs, base.chunk_size)
    why = (f"features with >= th = 2c/r = 2 x {costs.coalesced_ns:.3f} ns / {costs.random_ns:.3f} ns = "
           f"{costs.threshold:.2f} occurrences per chunk")
    if not use_hot_segment:
        reasons.append(("hot_size", 0, f"off by default (measured not to pay); the cost model gives {hot}: {why}"))
        return PlanChoice(base, reasons, costs)
    reasons.append(("hot_size", hot, why))
    plan = dataclasses.replace(base, hot_size=hot)
    if semantics == "sync":
        replicas = replicas_from_costs(layout, plan, hot)
        reasons.append(("replicas", replicas, "the hottest feature's chunks per batch, capped by the dense pass"))
        plan = dataclasses.replace(plan, replicas=replicas)
    return PlanChoice(plan, reasons, costs)


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
