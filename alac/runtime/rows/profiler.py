"""Which parameter rows are hot: access counts, FAE's hot-size estimator and its threshold search.

FAE (`../shared/papers`, §4.1) keeps on the GPU the rows accessed at least t·T times in T training
samples. Counts come from every sample by default (a GPU counts a Criteo-scale set in seconds, and a
small sample sees too few distinct rows to fill a budget) or from an x % sample of the rows, whose
cutoff is then scaled to it (Eq. 1: H = t·T·x/100). The estimator reads n = 35 random chunks of
m = 1,024 of a table's counts, counts the hot ones in each (Eq. 2), and bounds the table's hot rows
with Student's t-interval with the finite-population correction (Eqs. 3-4); the threshold search
bisects log t until the hot rows' bytes (params and optimizer state) fit a budget. Tables under 1 MB
are always hot (FAE: they fit any GPU).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import torch

from alac.errors import OptionError

CHUNKS = 35
CHUNK_ROWS = 1024
# FAE's small-table rule: a table under this many bytes is hot whatever its counts
ALWAYS_HOT_BYTES = 1 << 20


def access_counts(indices, n_features, sample=1.0, seed=0):
    """Accesses of every row: of all entries (sample 1), or of the entries of a random `sample`
    share of them (counted where the indices are: on the GPU when they are there)."""
    if not 0.0 < sample <= 1.0:
        raise OptionError(f"the sampled share must be in (0, 1], got {sample}")
    indices = indices.long()
    if sample < 1.0:
        generator = torch.Generator(device=indices.device).manual_seed(seed)
        keep = torch.rand(indices.numel(), generator=generator, device=indices.device) < sample
        indices = indices[keep]
    return torch.bincount(indices, minlength=n_features)


@dataclass(frozen=True)
class HotEstimate:
    """A table's hot rows (accessed at least `cutoff` times in the counted samples): the estimate and
    the bounds of its confidence interval, in rows."""

    rows: int
    lower: int
    upper: int
    cutoff: float
    exact: bool     # counted over every row rather than estimated from chunks


@dataclass(frozen=True)
class ChunkSample:
    """A table's counts as the estimator reads them: n random chunks of m rows ([n, m], drawn without
    replacement), or the whole table ([1, rows], exact) when it has at most n·m rows."""

    counts: torch.Tensor
    rows: int
    exact: bool


def sample_chunks(counts, chunks=CHUNKS, chunk_rows=CHUNK_ROWS, seed=0):
    counts = torch.as_tensor(counts)
    rows = counts.numel()
    if rows // chunk_rows <= chunks:
        return ChunkSample(counts.view(1, -1), rows, True)
    generator = torch.Generator().manual_seed(seed)
    picked = torch.randperm(rows, generator=generator)[:chunks * chunk_rows].to(counts.device)
    return ChunkSample(counts[picked].view(chunks, chunk_rows), rows, False)


def estimate_hot_rows(counts, cutoff, confidence=0.999, chunks=CHUNKS, chunk_rows=CHUNK_ROWS, seed=0):
    """FAE's Eqs. 2-4 on one table's counts (estimate_from_sample of its sample_chunks)."""
    return estimate_from_sample(sample_chunks(counts, chunks, chunk_rows, seed), cutoff, confidence)


def estimate_from_sample(sample, cutoff, confidence=0.999):
    """FAE's Eqs. 2-4: C_i hot rows in chunk i of the sample, mean and deviation over the chunks, the
    two-sided `confidence` t-interval with the finite-population correction, scaled to the table (an
    exact sample is counted). The bound is relative to the hot share p of the table: about
    3.6·sqrt((1 - p) / (n·m·p)) at 99.9 %, so within 10 % of the hot rows where at least ~10 % of the
    rows are hot; below, its error in rows stays under ~3.6·sqrt(p / (n·m)) of the table."""
    if sample.exact:
        hot = int((sample.counts >= cutoff).sum())
        return HotEstimate(hot, hot, hot, cutoff, True)
    chunks, chunk_rows = sample.counts.shape
    population = sample.rows // chunk_rows
    hot_per_chunk = (sample.counts >= cutoff).sum(dim=1).double().cpu().numpy()
    mean, deviation = float(hot_per_chunk.mean()), float(hot_per_chunk.std(ddof=1))
    margin = _t_quantile(0.5 + confidence / 2, chunks - 1) * math.sqrt(
        (population - chunks) / population * deviation**2 / chunks)
    scale = sample.rows / chunk_rows
    return HotEstimate(round(mean * scale), max(0, math.floor((mean - margin) * scale)),
                       min(sample.rows, math.ceil((mean + margin) * scale)), cutoff, False)


@functools.cache
def _t_quantile(probability, degrees):
    from scipy.stats import t as student_t

    return float(student_t.ppf(probability, degrees))


@dataclass(frozen=True)
class HotPlan:
    """The threshold t, its cutoff in the counted samples, and what it makes hot: rows per table (upper
    estimates; whole tables under ALWAYS_HOT_BYTES) and their bytes."""

    threshold: float
    cutoff: float
    hot_rows: tuple
    always_hot: tuple
    hot_bytes: int
    budget_bytes: int


def threshold_for_budget(tables, row_bytes, budget_bytes, samples, sample=1.0, confidence=0.999, seed=0,
                         steps=40):
    """FAE's statistical optimizer: the smallest threshold t (the most hot rows) whose tables' upper
    estimates of hot rows, times row_bytes (params and optimizer state of a row), fit budget_bytes.

    tables: each table's access counts (from access_counts over `sample` of the samples); samples:
    the training samples T. Tables under ALWAYS_HOT_BYTES are hot whole and counted in the budget.
    Bisection on log t between 1 / T (every accessed row) and 1 (rows in every sample)."""
    if budget_bytes <= 0 or row_bytes <= 0 or samples <= 0:
        raise OptionError(f"a hot-row search needs a positive budget, row size and sample count, got "
                          f"{budget_bytes}, {row_bytes}, {samples}")
    small = [len(counts) * row_bytes < ALWAYS_HOT_BYTES for counts in tables]
    # each table's chunks drawn once: every step of the search estimates from the same sample
    drawn = [None if always else sample_chunks(counts, seed=seed + z)
             for z, (counts, always) in enumerate(zip(tables, small))]

    def hot_rows(threshold):
        cutoff = threshold * samples * sample
        return tuple(len(counts) if chunked is None else estimate_from_sample(chunked, cutoff, confidence).upper
                     for counts, chunked in zip(tables, drawn))

    def fits(threshold):
        return sum(hot_rows(threshold)) * row_bytes <= budget_bytes

    low, high = math.log(1.0 / samples), 0.0
    if fits(math.exp(low)):
        high = low
    elif not fits(1.0):
        raise OptionError(f"even the tables under 1 MB take more than the {budget_bytes:,}-byte budget for hot rows")
    else:
        for _ in range(steps):
            middle = (low + high) / 2
            low, high = (low, middle) if fits(math.exp(middle)) else (middle, high)
    threshold = math.exp(high)
    rows = hot_rows(threshold)
    return HotPlan(threshold, threshold * samples * sample, rows, tuple(small), sum(rows) * row_bytes, budget_bytes)



def hot_features(tables, plan):
    """Per-feature hot flags (one bool tensor over the tables' rows, in order) under a HotPlan: every
    row of an always-hot table, and the rows whose counts reach the plan's cutoff."""
    return torch.cat([torch.ones(len(counts), dtype=torch.bool) if always
                      else torch.as_tensor(counts).cpu() >= plan.cutoff
                      for counts, always in zip(tables, plan.always_hot)])


def classify_inputs(dataset, hot):
    """FAE's input classifier: (row ids of the hot inputs, of the cold ones) of a data set, a row
    being hot only if every feature it touches is hot (an empty row is hot)."""
    hot = hot.to(dataset.device)
    rows = dataset.entry_rows()
    cold_entries = torch.zeros(dataset.n_rows, dtype=torch.int64, device=dataset.device)
    cold_entries.index_add_(0, rows, (~hot[dataset.indices.long()]).long())
    is_hot = cold_entries == 0
    return torch.nonzero(is_hot).squeeze(1), torch.nonzero(~is_hot).squeeze(1)
