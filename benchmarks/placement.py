"""Tables over a GPU budget: HybridHash and FAE against the host-table baseline and the all-GPU run.

    PYTHONPATH=. python benchmarks/placement.py [--rows 10000000] [--valid-rows 1000000]
        [--budgets-mb 64,128,256,512] [--zipfs 1.1,1.2] [--epochs 3] [--batch-size 4096]
        [--schedules-at-mb 256] [--baseline-batches 200] [--out DIR]

The Kaggle-shaped synthetic set (alac.data.synthetic.kaggle_like: the 26 categorical fields of the
Criteo Kaggle set, 33.8M feature rows, Zipf ids per field), FM k = 16 with AdaGrad, sync batches of
--batch-size, one process on one GPU. Arms:
- all_gpu: every row (params and AdaGrad state, 136 bytes) on the GPU;
- hybrid_hash: mixed batches on a GPU cache of --budget-mb (3/4 hot store, 1/4 staging for a
  segment's misses) in front of the table in pinned host memory (alac.runtime.rows.hybrid_hash);
- fae: the FAE threshold search fills the budget with hot rows (alac.runtime.rows.profiler), pure hot
  batches on the GPU, cold ones on the table in pinned host memory through mapped pointers
  (alac.runtime.rows.fae), swaps copying the hot rows changed since the last one, at R(50) for every
  budget and R(100)/R(1)/dynamic at --schedules-at-mb, where R(1) also copies the whole hot set;
- pytorch_host_table: PyTorch's nn.EmbeddingBag (w) and nn.Embedding (v) in pinned host memory
  with sparse AdaGrad on the CPU, the FM's interactions on the GPU (FAE's baseline), timed over
  --baseline-batches batches; its auc and logloss are after those batches only.
samples_per_s is of the mean epoch after the first (which compiles kernels and, for HybridHash, warms
up; one epoch's time varied by 8 % between runs);
auc and logloss on the validation rows after --epochs epochs; h2d_bytes of the last epoch (HybridHash:
rows loaded into the cache; FAE: rows copied at swaps plus the rows cold edges read through mapped memory).
Writes results/placement.json and .md.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from alac import metrics
from alac.data.synthetic import KAGGLE_CARDINALITIES, kaggle_like
from alac.models import zoo_model
from alac.plan import Plan
from alac.runtime.execution.executor import Executor, LabelMap
from alac.runtime.movement.layout import LayoutOptions, build_layout
from alac.runtime.planning.param_planner import (
    batches_of,
    cache_shape_for,
    choose_placement,
    forecast_cache,
    hot_inputs,
    measure_mapped_costs,
)
from alac.runtime.rows.cached_executor import calibrate_kernels
from alac.runtime.rows.fae import FULL_RATE, START_RATE, FaeTables, ShuffleScheduler, fae_data
from alac.runtime.rows.hybrid_hash import SIDE_MULTIPROCESSORS, CacheShape, HybridHash, working_plan
from alac.runtime.rows.profiler import access_counts, classify_inputs, hot_features, threshold_for_budget
from benchmarks.flow import PyTorchFM, _fm_logits
from benchmarks.render import tables_over_budget_table
from benchmarks.report import RESULTS, environment, write

K, LR, SEED = 16, 0.1, 1
ROW_BYTES = 4 * (1 + K + 2)   # w and v, and their AdaGrad sums (one per row of v)
SCHEDULES = {"R(100)": FULL_RATE, "R(50)": START_RATE, "R(1)": 0.01, "dynamic": START_RATE}
# validation rows that steer the dynamic schedule after every swap (a share of the validation set)
STEERING_ROWS = 100_000


# where the arms run: a GPU and the generated kernels, or (a smoke run) the CPU and the reference executor
TARGET = {"device": "cuda", "backend": "triton"}


def _executor(plan):
    return Executor(zoo_model("fm", k=K), plan, seed=SEED, optimizer="adagrad", **TARGET)


def _in_host(plan):
    return dataclasses.replace(plan, placement=(("w", "host"), ("v", "host")))


def _synchronize():
    if TARGET["device"] == "cuda":
        torch.cuda.synchronize()


def _scores(probability, valid):
    positive = valid.labels > 0.5
    return {"auc": float(metrics.auc(probability, positive)), "logloss": float(metrics.logloss(probability, positive))}


def _timed(function):
    _synchronize()
    started = time.perf_counter()
    result = function()
    _synchronize()
    return time.perf_counter() - started, result


def _arm(name, budget_mb, zipf, seconds, n_rows, scores, **extra):
    timed = seconds[1:] or seconds
    return {"name": name, "budget_mb": budget_mb, "zipf": zipf, "samples_per_s": n_rows * len(timed) / sum(timed),
            "epoch_seconds": seconds, **scores, **extra}


def all_gpu(data, args):
    layout, labels, valid_layout, plan = data["layout"], data["labels"], data["valid_layout"], data["plan"]
    one = _executor(plan)
    one.initialize(layout)
    seconds = [_timed(lambda e=e: one.train_epoch(layout, labels, e, LR))[0] for e in range(args.epochs)]
    scores = _scores(one.predict(valid_layout), data["valid"])
    return _arm("all_gpu", None, data["zipf"], seconds, layout.n_rows, scores, hot_input_share=1.0, hit_ratio=1.0,
                h2d_bytes=0)


def _cache_breakdown(cache):
    """Wrap the cache's row copies and kernel launches with synchronised timers (an extra epoch, its
    side-stream overlap taken away: the parts add up to serialized_epoch_s)."""
    spent = {"load_s": 0.0, "store_s": 0.0, "kernels_s": 0.0, "rerank_s": 0.0}

    def timed(key, function):
        def run(*a, **k):
            seconds, result = _timed(lambda: function(*a, **k))
            spent[key] += seconds
            return result
        return run

    cache._load, cache._store = timed("load_s", cache._load), timed("store_s", cache._store)
    cache.working.queue_epoch = timed("kernels_s", cache.working.queue_epoch)
    cache.working.queue_batches = timed("kernels_s", cache.working.queue_batches)
    cache.refresh = timed("rerank_s", cache.refresh)
    return spent


def _cache_shape(data, budget_mb, args):
    """The planner's cache of the budget (alac.runtime.planning.param_planner): a quarter staging, a batch at least."""
    return cache_shape_for(budget_mb * 2**20, ROW_BYTES, args.batch_size * int(data["train"].row_lengths().max()))


def hybrid_hash(data, budget_mb, args, breakdown=False):
    layout, labels, plan = data["layout"], data["labels"], data["plan"]
    shape = dataclasses.replace(_cache_shape(data, budget_mb, args), refresh=args.refresh)
    forced = args.side_multiprocessors is not None
    working = _executor(working_plan(plan, TARGET["device"], args.side_multiprocessors) if forced else plan)
    cache = HybridHash(_executor(_in_host(plan)), working, shape)
    cache.initialize(layout, 1.0)
    forecast = None
    if not forced:
        # the planner's choice: the kernels timed with and without multiprocessors left to the side stream
        costs = measure_mapped_costs(TARGET["device"]) if TARGET["device"] == "cuda" else None
        forecast = forecast_cache(layout.frequency, shape, batches_of(layout.n_rows, plan), ROW_BYTES, costs)
        forecast = calibrate_kernels(cache, layout, labels, forecast)
        extra_planner = {"planner_mode": planner_mode(data, budget_mb, shape, costs)}
    seconds, before = [], None
    for epoch in range(args.epochs):
        before = (cache.statistics.rows_in, cache.statistics.rows_out, len(cache.statistics.hit_ratio))
        seconds.append(_timed(lambda e=epoch: cache.train_epoch(layout, labels, e, LR))[0])
    last = cache.statistics.hit_ratio[before[2]:]
    in_store = torch.zeros(layout.n_features, dtype=torch.bool, device=TARGET["device"])
    in_store[cache.cached[cache.cached >= 0]] = True
    stored_inputs, _ = classify_inputs(data["train_reindexed"], in_store)
    scores = _scores(cache.whole_executor().predict(data["valid_layout"]), data["valid"])
    extra = {} if forced else extra_planner
    if breakdown:
        spent = _cache_breakdown(cache)
        epoch_s, _ = _timed(lambda: cache.train_epoch(layout, labels, args.epochs, LR))
        extra["breakdown"] = {"serialized_epoch_s": epoch_s, **spent, "segments": cache.statistics.segments,
                              "rows_carried": cache.statistics.rows_carried}
    result = _arm("hybrid_hash", budget_mb, data["zipf"], seconds, layout.n_rows, scores,
                  hot_input_share=stored_inputs.numel() / layout.n_rows, hit_ratio=sum(last) / max(len(last), 1),
                  h2d_bytes=(cache.statistics.rows_in - before[0]) * ROW_BYTES,
                  d2h_bytes=(cache.statistics.rows_out - before[1]) * ROW_BYTES,
                  capacity_rows=shape.capacity, staging_rows=shape.staging,
                  map_bytes=layout.n_features * 9, programs=working.plan.programs,
                  overlapped=None if forecast is None else forecast.overlapped,
                  predicted_samples_per_s=None if forecast is None else forecast.samples_per_s(layout.n_rows),
                  **extra)
    return result


def _field_tables(counts):
    offsets = [0]
    for cardinality in KAGGLE_CARDINALITIES:
        offsets.append(offsets[-1] + cardinality)
    return [counts[a:b] for a, b in zip(offsets[:-1], offsets[1:])]


def fae(data, budget_mb, schedule, args, dirty_only=True):
    train, plan, label_map = data["train"], data["plan"], data["label_map"]
    counts = access_counts(train.indices, train.n_features)
    hot_plan = threshold_for_budget(_field_tables(counts), ROW_BYTES, budget_mb * 2**20, train.n_rows)
    hot = hot_features(_field_tables(counts), hot_plan)
    split = fae_data(train, hot, LayoutOptions(chunk_size=plan.chunk_size), TARGET["device"])
    tables = FaeTables(_executor(_in_host(plan)), _executor(plan), split.hot_ids, dirty_only=dirty_only)
    # any layout in global ids draws the initial rows (every input may be hot: no cold layout)
    tables.initialize(split.cold if split.cold is not None else data["valid_layout_global"], 1.0)
    steer = data["steer_layout_global"]
    steer_positive = data["steer"].labels > 0.5

    def validate():
        return float(metrics.logloss(tables.whole().predict(steer), steer_positive))

    scheduler = ShuffleScheduler(SCHEDULES[schedule])
    seconds, segments = [], []
    for epoch in range(args.epochs):
        copied = tables.rows_copied
        elapsed, segments = _timed(lambda e=epoch: tables.train_epoch(
            split, lambda layout: label_map.model_labels(layout.labels), e, SEED, LR, scheduler,
            validate if schedule == "dynamic" else None))
        seconds.append(elapsed)
    # the hot rows cross at every change of kind (the tables start with the cold one current)
    kinds = ["cold"] + [kind for kind, _, _ in segments]
    swaps = sum(a != b for a, b in zip(kinds, kinds[1:]))
    cold_edges = split.cold.stats.nnz if split.cold is not None else 0
    swapped = tables.rows_copied - copied
    scores = _scores(tables.whole().predict(data["valid_layout_global"]), data["valid"])
    name = f"fae {schedule}" + ("" if dirty_only else " whole hot set")
    result = _arm(name, budget_mb, data["zipf"], seconds, train.n_rows, scores,
                  hot_input_share=split.hot_input_share, hit_ratio=None,
                  h2d_bytes=(swapped + cold_edges) * ROW_BYTES, swapped_rows=swapped,
                  hot_rows=int(split.hot_ids.numel()), swaps=swaps, final_rate=scheduler.rate)
    return result


def fae_trainer(data, budget_mb, args):
    """FAE as alac train runs it (the Trainer's FaeExecutor: the budget's most accessed rows hot, the
    schedule steered by the validation loss), the budget on top of the resident layout."""
    from alac.runtime.planning.planner import layout_bytes
    from alac.train.trainer import Trainer

    train, valid = data["train"], data["valid"]
    plan = dataclasses.replace(data["plan"], memory_budget=layout_bytes(train, data["plan"].chunk_size)
                               + budget_mb * 2**20, param_mode="fae")
    trainer = Trainer(zoo_model("fm", k=K), lr=LR, epochs=args.epochs, plan=plan, seed=SEED, **TARGET,
                      optimizer="adagrad")
    trainer.fit(train, data["steer"])
    seconds = [record["seconds"] for record in trainer.history]
    return _arm("fae trainer", budget_mb, data["zipf"], seconds, train.n_rows, _scores(trainer.predict(valid), valid),
                hot_input_share=trainer.executor.split.hot_input_share, hit_ratio=None, h2d_bytes=None,
                hot_rows=trainer.placement.fae.hot_rows, final_rate=trainer.history[-1]["fae_rate"])


def pytorch_host_table(data, args):
    """FAE's baseline: the embedding tables in pinned host memory, looked up and updated (sparse
    AdaGrad) on the CPU; the lookups cross to the GPU, the FM's interactions and the loss run there."""
    train, valid, batch = data["train"], data["valid"], args.batch_size
    ids = train.indices.long().view(train.n_rows, -1).cpu()
    torch.manual_seed(SEED)
    model = PyTorchFM(train.n_features, K)
    for table_ in (model.w, model.v):
        if TARGET["device"] == "cuda":
            table_.weight.data = table_.weight.data.pin_memory()
    bias = torch.zeros(1, device=TARGET["device"], requires_grad=True)
    sparse = torch.optim.Adagrad([model.w.weight, model.v.weight], lr=LR)
    dense = torch.optim.Adagrad([bias], lr=LR)
    loss_function = torch.nn.BCEWithLogitsLoss()
    order = torch.randperm(train.n_rows, generator=torch.Generator().manual_seed(SEED))
    labels = train.labels.cpu()

    def logits(rows_ids):
        rows, width = rows_ids.shape
        w_sum = model.w(rows_ids.view(-1), torch.arange(0, rows * width, width)).squeeze(1)
        device = TARGET["device"]
        return _fm_logits(w_sum.to(device, non_blocking=True), model.v(rows_ids).to(device, non_blocking=True), bias)

    def step(b):
        rows = order[b * batch:(b + 1) * batch]
        loss = loss_function(logits(ids[rows]), labels[rows].to(TARGET["device"], non_blocking=True))
        sparse.zero_grad()
        dense.zero_grad()
        loss.backward()
        sparse.step()
        dense.step()

    for b in range(5):
        step(b)
    batches = min(args.baseline_batches, train.n_rows // batch - 5)
    seconds, _ = _timed(lambda: [step(b) for b in range(5, 5 + batches)])
    with torch.no_grad():
        valid_ids = valid.indices.long().view(valid.n_rows, -1).cpu()
        probability = torch.cat([torch.sigmoid(logits(valid_ids[s:s + 65536])) for s in range(0, valid.n_rows, 65536)])
    return _arm("pytorch_host_table", None, data["zipf"], [seconds], batches * batch, _scores(probability, valid),
                hot_input_share=0.0, hit_ratio=0.0, h2d_bytes=None, trained_samples=(batches + 5) * batch)


def prepare(zipf, args):
    every = kaggle_like(args.rows + args.valid_rows, zipf=zipf, seed=SEED, device=TARGET["device"])
    train, valid = every.take(torch.arange(args.rows, device=TARGET["device"])), \
        every.take(torch.arange(args.rows, args.rows + args.valid_rows, device=TARGET["device"]))
    del every
    plan = Plan(batch_size=args.batch_size, chunk_size=math.gcd(Plan.chunk_size, args.batch_size))
    options = LayoutOptions(chunk_size=plan.chunk_size)
    layout = build_layout(train, options, TARGET["device"])
    label_map = LabelMap.fit("binary", train.labels)
    identity = torch.arange(train.n_features, device=TARGET["device"])
    steer = valid.take(torch.arange(min(STEERING_ROWS, valid.n_rows), device=TARGET["device"]))
    old_to_new = torch.empty_like(layout.new_to_old)
    old_to_new[layout.new_to_old.long()] = torch.arange(layout.n_features, dtype=old_to_new.dtype,
                                                        device=old_to_new.device)
    reindexed = dataclasses.replace(train, indices=old_to_new[train.indices.long()].int())
    return {"zipf": zipf, "train": train, "valid": valid, "steer": steer, "plan": plan, "label_map": label_map,
            "layout": layout, "labels": label_map.model_labels(layout.labels), "train_reindexed": reindexed,
            "valid_layout": build_layout(valid, options, TARGET["device"], feature_order=layout.new_to_old),
            "valid_layout_global": build_layout(valid, options, TARGET["device"], feature_order=identity),
            "steer_layout_global": build_layout(steer, options, TARGET["device"], feature_order=identity)}


def run_zipf(zipf, args):
    data = prepare(zipf, args)
    arms = [all_gpu(data, args)]
    print(arms[-1], flush=True)
    for budget in args.budgets_mb:
        arms.append(hybrid_hash(data, budget, args, breakdown=budget == args.budgets_mb[0]))
        print(arms[-1], flush=True)
        if args.hybrid_only:
            continue
        for schedule in SCHEDULES if budget == args.schedules_at_mb else ("R(50)",):
            arms.append(fae(data, budget, schedule, args))
            print(arms[-1], flush=True)
        if budget == args.schedules_at_mb:
            arms.append(fae(data, budget, "R(1)", args, dirty_only=False))
            print(arms[-1], flush=True)
            arms.append(fae_trainer(data, budget, args))
            print(arms[-1], flush=True)
    if not args.hybrid_only:
        arms.append(pytorch_host_table(data, args))
        print(arms[-1], flush=True)
    return arms


def planner_mode(data, budget_mb, shape, costs):
    """What the Trainer's planner would take at this budget: FAE or the cache, by their forecast costs."""
    layout = data["layout"]
    return choose_placement(layout.n_features, ROW_BYTES, budget_mb * 2**20, layout.frequency,
                            batches_of(layout.n_rows, data["plan"]), shape.staging // 2, costs,
                            lambda hot_rows: hot_inputs(data["train"], layout.old_to_new, hot_rows)).mode


def planner_choices(args, arms):
    """The Trainer's planner's mode at every budget and skew of the committed arms, recomputed from the
    same data and freshly measured throughputs (no training): arms' planner_mode updated in place."""
    costs = measure_mapped_costs(TARGET["device"])
    for zipf in args.zipfs:
        data = prepare(zipf, args)
        for arm in arms:
            if arm["zipf"] == zipf and arm["name"] == "hybrid_hash":
                arm["planner_mode"] = planner_mode(data, arm["budget_mb"], _cache_shape(data, arm["budget_mb"], args),
                                                   costs)
        del data


def big_run(args):
    """A model larger than the GPU through the Trainer (alac train's path): the Kaggle-shaped fields
    each args.big_scale times larger, rows and AdaGrad state in pinned host memory, a GPU budget of
    args.big_budget_gb; the planner's forecast (its kernels timed on the cache) against the epochs."""
    from alac.train.trainer import Trainer

    memory = {}

    def used(stage):
        if TARGET["device"] == "cuda":
            memory[stage] = {"allocated": torch.cuda.memory_allocated(), "peak": torch.cuda.max_memory_allocated()}

    every = kaggle_like(args.big_rows + args.valid_rows, zipf=1.1, seed=SEED, device=TARGET["device"],
                        scale=args.big_scale, k=args.big_k)
    train = every.take(torch.arange(args.big_rows, device=TARGET["device"]))
    valid = every.take(torch.arange(args.big_rows, args.big_rows + args.valid_rows, device=TARGET["device"]))
    del every
    plan = Plan(batch_size=args.batch_size, chunk_size=math.gcd(Plan.chunk_size, args.batch_size),
                memory_budget=int(args.big_budget_gb * 2**30), param_mode="hybrid_hash")
    used("data")
    trainer = Trainer(zoo_model("fm", k=args.big_k), lr=LR, epochs=2, plan=plan, seed=SEED, **TARGET,
                      optimizer="adagrad")
    setup_s, _ = _timed(lambda: trainer.initialize_model(train))
    placement, forecast = trainer.placement, trainer.placement.forecast
    used("initialized")
    history = trainer.fit(train, valid)
    used("trained")
    statistics = trainer.executor.statistics
    cuda = TARGET["device"] == "cuda"
    return {"name": "hybrid_hash_larger_than_gpu", "budget_mb": int(args.big_budget_gb * 1024), "zipf": 1.1,
            "samples_per_s": history[-1]["rows_per_s"], "epoch_seconds": [r["seconds"] for r in history],
            "auc": history[-1]["valid_auc"], "logloss": history[-1]["valid_logloss"],
            "hit_ratio": history[-1]["hit_ratio"], "hot_input_share": None,
            "h2d_bytes": statistics.rows_in * placement.row_bytes // len(history),
            "predicted_samples_per_s": forecast.samples_per_s(train.n_rows),
            "forecast": {"kernel_s": forecast.kernel_seconds, "side_kernel_s": forecast.side_kernel_seconds,
                         "overlapped": forecast.overlapped, "traffic_s": forecast.traffic_seconds,
                         "bookkeeping_s": forecast.bookkeeping_seconds, "rerank_s": forecast.rerank_seconds,
                         "hit_ratio": forecast.hit_ratio,
                         "rows_moved": forecast.rows_moved, "segments": forecast.segments},
            "feature_rows": trainer.executor.cache.slot_of.numel(), "table_bytes": placement.table_bytes,
            "gpu_memory_bytes": torch.cuda.get_device_properties(0).total_memory if cuda else None,
            "peak_gpu_bytes": torch.cuda.max_memory_allocated() if cuda else None, "setup_seconds": setup_s,
            "training_rows": train.n_rows, "k": args.big_k, "gpu_bytes_by_stage": memory,
            "placement": placement.lines()}


def report(payload):
    env, args = payload["environment"], payload["arguments"]
    return (f"Tables over a GPU budget ({env['device']}, {env['date']}; `PYTHONPATH=. python benchmarks/placement.py "
            f"--rows {args['rows']}`)\n\n" + tables_over_budget_table(payload))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--valid-rows", type=int, default=1_000_000)
    parser.add_argument("--budgets-mb", type=lambda s: [int(x) for x in s.split(",")], default=[64, 128, 256, 512])
    parser.add_argument("--zipfs", type=lambda s: [float(x) for x in s.split(",")], default=[1.1, 1.2])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=4096)
    parser.add_argument("--refresh", type=int, default=CacheShape.refresh, help="HybridHash re-rank period (batches)")
    parser.add_argument("--side-multiprocessors", type=int, default=None,
                        help="multiprocessors HybridHash's sync kernels leave to its side stream (default: the "
                             f"planner's choice of 0 or {SIDE_MULTIPROCESSORS}, from the kernels timed both ways)")
    parser.add_argument("--schedules-at-mb", type=int, default=256)
    parser.add_argument("--baseline-batches", type=int, default=200)
    parser.add_argument("--big-scale", type=int, default=0,
                        help="also train the Kaggle-shaped model with every field this many times larger (10: "
                             "338M rows) through the Trainer")
    parser.add_argument("--big-rows", type=int, default=20_000_000)
    parser.add_argument("--big-k", type=int, default=64,
                        help="factors of the big run's FM (64 with AdaGrad: 268 bytes a row; scale 10 is 90 GB)")
    parser.add_argument("--big-budget-gb", type=float, default=6.0)
    parser.add_argument("--hybrid-only", action="store_true",
                        help="all-GPU and HybridHash arms alone (a sweep of --refresh or --side-multiprocessors), "
                             "written to --out, not rendered")
    parser.add_argument("--only-big", action="store_true", help="the big run alone, added to results/placement.json")
    parser.add_argument("--only-planner", action="store_true",
                        help="the Trainer's planner's choices alone, recomputed into results/placement.json")
    parser.add_argument("--device", default="cuda", help="cpu: a smoke run on the reference executor")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    if args.device != "cuda":
        TARGET.update(device=args.device, backend="reference")
    if args.only_planner:
        payload = json.loads((RESULTS / "placement.json").read_text())
        planner_choices(args, payload["arms"])
        payload["planner_environment"] = environment()
    elif args.only_big:
        # the big run beside the committed arms: the table's other figures stay those of their own run
        payload = json.loads((RESULTS / "placement.json").read_text())
        payload["big"] = {**big_run(args), "environment": environment(), "arguments": vars(args)}
    else:
        arms = [arm for zipf in args.zipfs for arm in run_zipf(zipf, args)]
        if args.hybrid_only:
            write("placement_sweep", {"environment": environment(), "arguments": vars(args), "arms": arms}, "",
                  args.out or "/tmp")
            return
        payload = {"environment": environment(), "arguments": vars(args), "row_bytes": ROW_BYTES, "arms": arms}
        if args.big_scale:
            payload["big"] = big_run(args)
        elif (RESULTS / "placement.json").exists():
            # the committed big run stays beside the new arms (it is rerun with --only-big)
            payload["big"] = json.loads((RESULTS / "placement.json").read_text()).get("big")
    write("placement", payload, report(payload), args.out)
    print(report(payload))


if __name__ == "__main__":
    main()
