"""A field model's fit over ranks (torchrun): where the tables' rows live, each rank's share of a
batch, the dense part data-parallel, and predictions and checkpoints whole.

Every rank reads the whole training set and draws the same batch order; a step takes a global batch of B
= W × batch_size rows (each rank batch_size, DDP's convention), rank r rows [B r / W, B (r + 1) / W) of
it, and its loss is its rows' share of the batch's mean loss times W, so that the mean of the ranks'
gradients (GradientMean's, and alac.nn.ranked's for the tables) is the gradient one process takes on the
whole batch; the dense part's gradients are averaged by one all-reduce (GradientMean), so a whole step
replays from a CUDA graph as one process's does. The tables (alac.nn.ranked) are replicated, sharded
row-wise, or hybrid: the hot rows (read by about every batch: at least as many accesses as batches in an
epoch) replicated, in the ranks' numbering by frequency, the rest sharded.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from alac.errors import OptionError
from alac.nn.ranked import ExchangeShape, payload_width, step_exchanges
from alac.runtime.device.memory import available_bytes
from alac.runtime.ranks.exchange_timing import exchange_seconds

MODES = ("auto", "replicated", "sharded", "hybrid")
# room above the batches' largest exchange: a later epoch's (or the validation set's) seldom needs more,
# and a larger size means new CUDA graphs (benchmarks/deep_ranks.py --batch-size 16384, arm
# alac_sharded, ran its third epoch eagerly without it)
EXCHANGE_MARGIN = 0.02
# auto shards a table over TABLE_SHARE of a rank's free memory (replicated, every rank holds it whole
# beside the scratch gradient buffer of its size and the data)
TABLE_SHARE = 0.25
# auto's order among the modes whose rows fit: their speed on two H200s (benchmarks/deep_ranks.py, arms
# alac_replicated, alac_sharded, alac_hybrid); and the share of the first one's measured exchange time
# another must stay under to be taken instead, a margin for the work beside its exchanges (a sharded step
# routes its entries, a hybrid one steps the hot entries on every rank) that no run has set yet
PREFERENCE = ("replicated", "sharded", "hybrid")
SWITCH = 0.5


@dataclass(frozen=True)
class RankTables:
    """Where a fit's table rows live over the ranks: mode, the rows every rank holds (the first
    `replicated` of `order`, the ids by falling frequency; None: as numbered) and why."""

    mode: str
    replicated: int
    order: torch.Tensor | None
    reason: str

    def describe(self):
        return f"tables {self.mode} ({self.reason})"


def _table_ir(settings, n_fields):
    from alac.ir.pipeline import lower
    from alac.nn.deep_models import FieldTables
    from alac.optimizers import get_optimizer

    k = settings.k * (n_fields if settings.model == "ffm" else 1)
    return lower(FieldTables(k, squares=settings.model in ("deepfm", "ffm")), get_optimizer(settings.optimizer),
                 aggregate_only=True)


def table_row_bytes(settings, n_fields):
    """Bytes of a table row of a field model (alac.train.deep.DeepSettings): params and optimizer state."""
    from alac.runtime.execution.state import row_bytes_of

    return row_bytes_of(_table_ir(settings, n_fields))


def table_exchange_shape(settings, n_fields):
    """What a field model's table exchanges over ranks per entry (alac.nn.ranked.ExchangeShape)."""
    ir = _table_ir(settings, n_fields)
    return ExchangeShape(sum(ir.factor_size if p.vector else 1 for p in ir.params), torch.float32, payload_width(ir))


def plan_rank_tables(mode, counts, row_bytes, batches, ranks, device, rows=None, budget=None, shape=None,
                     measure=exchange_seconds):
    """RankTables of a table whose rows are accessed `counts` times an epoch of `batches` global
    batches (None: unknown, a restored model's: hybrid becomes sharded), at row_bytes a row (params
    and optimizer state), over `ranks`; rows: the table's rows where counts is None; budget: bytes the
    tables may take on a rank (None: TABLE_SHARE of its free memory). auto takes the first of
    PREFERENCE whose rows fit the budget, unless another that fits moves a step's exchanges
    (alac.nn.ranked.ExchangeShape `shape`, timed over the ranks by `measure`) in under SWITCH of
    its time."""
    if mode not in MODES:
        raise OptionError(f"rank tables are one of {', '.join(MODES)}, got {mode!r}")
    rows = counts.numel() if counts is not None else rows
    hot = None if counts is None else int((counts >= batches).sum())
    if mode == "auto":
        mode, why = _auto_mode(counts, row_bytes, batches, ranks, device, rows, budget, shape, measure, hot)
    else:
        why = "as asked"
    if mode == "replicated":
        return RankTables(mode, rows, None, why)
    if mode == "sharded" or counts is None:
        return RankTables("sharded", 0, None, f"{why}; rank r owns rows r, r + {ranks.world}, ...")
    order = torch.argsort(counts.cpu(), descending=True, stable=True)
    return RankTables(mode, hot, order, f"{why}; the {hot:,} rows read at least once a batch on average "
                                        f"replicated, the other {rows - hot:,} sharded")


def _auto_mode(counts, row_bytes, batches, ranks, device, rows, budget, shape, measure, hot):
    """(mode, why) of plan_rank_tables' auto."""
    world = ranks.world
    held = {"replicated": rows, "sharded": -(-rows // world)}
    if counts is not None and 0 < hot < rows:
        held["hybrid"] = hot + -(-(rows - hot) // world)
    free = available_bytes(device) if budget is None else None
    limit = budget if budget is not None else None if free is None else TABLE_SHARE * free
    limit_text = (f"the GPU budget given ({budget:,} bytes)" if budget is not None else
                  f"{TABLE_SHARE:.0%} of a rank's free memory" + ("" if free is None else f" ({free:,} bytes)"))
    fits = [m for m in PREFERENCE if m in held and (limit is None or held[m] * row_bytes <= limit)]
    table = rows * row_bytes
    why = f"{table:,} bytes of rows {'fit' if fits[:1] == ['replicated'] else 'exceed'} {limit_text}"
    if not fits:
        return "sharded", f"{why}, and so does a rank's shard ({held['sharded'] * row_bytes:,} bytes)"
    if counts is None or shape is None or len(fits) == 1 or measure is None:
        return fits[0], why
    entries = float(counts.sum()) / (max(batches, 1) * world)      # a rank's entries in a step
    hot_share = float(counts[counts >= batches].sum()) / max(float(counts.sum()), 1.0)   # the hybrid's hot rows
    hybrid = max(math.ceil(hot_share * entries), math.ceil((1 - hot_share) * entries / world), 1)
    capacities = {"replicated": (max(math.ceil(entries), 1), 0), "sharded": (0, max(math.ceil(entries / world), 1)),
                  "hybrid": (hybrid, hybrid)}
    seconds = {m: measure(ranks, step_exchanges(shape, world, *capacities[m])) for m in fits}
    fastest = min(fits, key=seconds.get)
    mode = fastest if seconds[fastest] < SWITCH * seconds[fits[0]] else fits[0]
    timed = ", ".join(f"{m} {seconds[m] * 1e3:.3g} ms" for m in fits)
    return mode, f"{why}; a step's exchanges, measured: {timed}"


def share(rows, ranks, rank=None):
    """(first, end) of this rank's (or `rank`'s) rows of a global batch of `rows` rows."""
    rank = ranks.rank if rank is None else rank
    return rows * rank // ranks.world, rows * (rank + 1) // ranks.world


def fix_exchanges(network, dataset, batch_size, ranks):
    """The tables' exchanges sized for the batches of `dataset`, in the order they will run (each
    rank its share of every batch of batch_size rows): the most entries one rank sends another in a
    step, one host read; never lowered, so the steps' CUDA graphs stay valid."""
    tables = network.tables
    rows = dataset.entry_rows()
    batch = torch.div(rows, batch_size, rounding_mode="floor")
    position = rows - batch * batch_size
    in_batch = torch.clamp(dataset.n_rows - batch * batch_size, max=batch_size)
    # the rank whose share (alac.train.deep_ranks.share) holds the position
    rank = torch.div((position + 1) * ranks.world - 1, in_batch, rounding_mode="floor")
    needed = tables.exchanged(dataset.indices.long(), batch * ranks.world + rank)
    if tables.entry_capacity is None or needed > tables.entry_capacity:
        tables.entry_capacity = math.ceil(needed * (1 + EXCHANGE_MARGIN))


class GradientMean:
    """The dense part data-parallel: its parameters' gradients averaged over the ranks by one
    all-reduce of them flattened (DDP's mean; DDP's reducer is captured in a CUDA graph only after
    eleven eager warm-up steps, PyTorch's CUDA graphs notes, where this all-reduce is captured as is)."""

    def __init__(self, module, ranks):
        self.parameters = [p for p in module.parameters() if p.requires_grad]
        self.ranks = ranks

    def __call__(self):
        gradients = [p.grad for p in self.parameters if p.grad is not None]
        flat = torch.cat([g.reshape(-1) for g in gradients])
        self.ranks.all_reduce(flat, in_place=True)
        flat /= self.ranks.world
        for gradient, averaged in zip(gradients, torch._utils._unflatten_dense_tensors(flat, gradients)):
            gradient.copy_(averaged)


def whole_predictions(local, rows_per_batch, ranks):
    """Every rank's predictions (`local`: its shares of the batches of rows_per_batch rows, end to end)
    in the rows' order, on every rank."""
    if ranks.world == 1:
        return local
    shares = [[share(rows, ranks, rank) for rows in rows_per_batch] for rank in range(ranks.world)]
    counts = [sum(end - first for first, end in rank_shares) for rank_shares in shares]
    gathered = ranks.all_gather_rows(local.to(ranks.device), counts).to(local.device)
    starts = torch.tensor([0, *rows_per_batch]).cumsum(0)[:-1].tolist()
    positions = torch.cat([torch.arange(start + first, start + end)
                           for rank_shares in shares for start, (first, end) in zip(starts, rank_shares)])
    return torch.empty_like(gathered).index_copy_(0, positions.to(gathered.device), gathered)


def whole_weights(network):
    """The network's state_dict with the tables whole (alac.nn.ranked: assembled from every rank,
    which all call this), in the data's ids: the form a checkpoint keeps whatever the rank count."""
    weights = dict(network.state_dict())
    tables = getattr(network, "tables", None)
    if hasattr(tables, "whole_state"):
        weights.update({f"tables.{name}": value for name, value in tables.whole_state().items()})
    return weights


def load_whole_weights(network, weights):
    """whole_weights' form loaded into a network whose tables may be a rank's share."""
    tables = getattr(network, "tables", None)
    if not hasattr(tables, "load_whole_state"):
        network.load_state_dict(weights)
        return
    prefix = "tables."
    own = {name: value for name, value in weights.items() if not name.startswith(prefix)}
    missing = network.load_state_dict(own, strict=False).missing_keys
    table_names = {name.removeprefix(prefix) for name in missing if name.startswith(prefix)}
    if len(table_names) != len(missing) or any(prefix + name not in weights for name in table_names):
        raise OptionError(f"the weights lack {sorted(missing)}")
    tables.load_whole_state({name: weights[prefix + name] for name in table_names})
