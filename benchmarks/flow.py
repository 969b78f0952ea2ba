"""Flow-based training on the synthetic Criteo-shaped set: every arm side by side on one GPU.

    PYTHONPATH=. python benchmarks/flow.py --model lr [--rows 4000000] [--epochs 10] [--out DIR]
    PYTHONPATH=. python benchmarks/flow.py --model fm --k 16
    PYTHONPATH=. python benchmarks/flow.py --model lr --scaling 1000000,4000000,16000000,64000000
    PYTHONPATH=. python benchmarks/flow.py --model lr --real-data ../shared/data

Arms (same data, same lr on the batch-mean gradient, zero or seeded init):
- pytorch_embeddingbag_b1024 / _b16384: idiomatic PyTorch, sparse embeddings + optim.SGD;
- pytorch_stage_b1024: hand-written stage-based PyTorch (gather, sigmoid, index_add_);
- alac_fused_sync_launches_b1024: alac's fused kernels, exact mini-batch SGD, two launches per
  batch replayed as a CUDA graph, the update finding each touched feature once (touched flags);
  alac_stage_sync_b1024, alac_fused_sync_b1024: the default sync plan, the epoch one persistent
  launch with grid-wide barriers and SGD's edge updates (stage or fused kernels);
  alac_fused_sync_deterministic_b1024 the same steps without float atomics (bit-for-bit
  repeatable); alac_fused_sync_hot[_replicas]_b1024 add the hot segment;
- alac_async (fused accums) -> alac_async_hot_flush1 (+ hot segment: per-program sums of the hot
  gradients, applied after every chunk) -> alac_async_hot (+ applied every 8 chunks: the default
  async plan, H from the cost model) -> alac_async_hot_tuned (+ chunk size and warps autotuned): the
  cuWide Fig. 16 ablation (in async the per-program sums are the replicas).
Per arm: ms per epoch (median), G non-zeros per second, the fraction of the measured copy bandwidth
that the bytes it must read represent, an async arm's epoch against the floor of the accesses it
must make (alac.runtime.planning.roofline: flat kernels of the same gathers and additions; its roofline line
printed), validation logloss after every epoch, and the training time to reach the target (the
sync batch-1024 validation logloss after all epochs + 0.002).
`--sync-batches 256 4096 16384` adds the fused sync arm at those batch sizes (time to the target
beside epoch time). Writes results/flow_<model>.json, .md and .png (and the scaling / real-data tables when asked).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from alac.runtime.device.timing import gpu_milliseconds
from benchmarks.report import environment, result_folders, table, write


def synthetic_train_valid(rows, valid_rows, device, seed=0):
    """Training rows and validation rows of one planted model (rows after the training ones)."""
    from alac.data.synthetic import criteo_like

    data = criteo_like(rows + valid_rows, seed=seed, device=device)
    return data.take(torch.arange(rows, device=device)), data.take(torch.arange(rows, rows + valid_rows, device=device))


def _seconds(function):
    """One call's wall time (CUDA events, host work included; the call moves training on; the clock
    off a GPU, for --backend interpret)."""
    if not torch.cuda.is_available():
        start = time.perf_counter()
        function()
        return time.perf_counter() - start
    return gpu_milliseconds(function, repeats=1, warmup=0)[0] / 1000


def _logloss(logits, labels):
    from alac import metrics
    return metrics.logloss(torch.sigmoid(logits), labels > 0.5)


def _fm_logits(w_sum, v, b):
    """Logits of FM rows from their weights' sum and their [rows, fields, k] factors."""
    return b + w_sum + 0.5 * (v.sum(dim=1).pow(2) - v.pow(2).sum(dim=1)).sum(dim=1)


class PyTorchFM(torch.nn.Module):
    """Idiomatic PyTorch: sparse embeddings for w (and v), the model as tensor code."""

    def __init__(self, n_features, k):
        super().__init__()
        self.w = torch.nn.EmbeddingBag(n_features, 1, mode="sum", sparse=True)
        torch.nn.init.zeros_(self.w.weight)
        self.v = torch.nn.Embedding(n_features, k, sparse=True) if k else None
        if self.v is not None:
            torch.nn.init.normal_(self.v.weight, std=0.01)
        self.b = torch.nn.Parameter(torch.zeros(1))

    def forward(self, ids):
        rows, width = ids.shape
        w_sum = self.w(ids.view(-1), torch.arange(0, rows * width, width, device=ids.device)).squeeze(1)
        if self.v is None:
            return w_sum + self.b
        return _fm_logits(w_sum, self.v(ids), self.b)


def pytorch_idiomatic(train, valid, epochs, lr, batch_size, k, seed):
    device = train.device
    width = int(train.row_lengths()[0])
    ids, valid_ids = train.indices.long().view(-1, width), valid.indices.long().view(-1, width)
    torch.manual_seed(seed)
    model = PyTorchFM(train.n_features, k).to(device)
    sparse = torch.optim.SGD([p for n, p in model.named_parameters() if n != "b"], lr=lr)
    dense = torch.optim.SGD([model.b], lr=lr)
    loss_function = torch.nn.BCEWithLogitsLoss()
    generator = torch.Generator(device=device).manual_seed(seed)
    history = []
    for _ in range(epochs):
        def epoch():
            order = torch.randperm(train.n_rows, device=device, generator=generator)
            for start in range(0, train.n_rows, batch_size):
                rows = order[start:start + batch_size]
                loss = loss_function(model(ids[rows]), train.labels[rows])
                sparse.zero_grad()
                dense.zero_grad()
                loss.backward()
                sparse.step()
                dense.step()
        seconds = _seconds(epoch)
        with torch.no_grad():
            history.append((seconds, _logloss(model(valid_ids), valid.labels)))
    return history


def pytorch_stage(train, valid, epochs, lr, batch_size, k, seed):
    """Hand-written stage-based PyTorch: gather, per-sample gradient, index_add_ per stage."""
    device = train.device
    width = int(train.row_lengths()[0])
    ids, valid_ids = train.indices.long().view(-1, width), valid.indices.long().view(-1, width)
    w = torch.zeros(train.n_features, device=device)
    generator = torch.Generator().manual_seed(seed)
    v = (torch.randn(train.n_features, k, generator=generator) * 0.01).to(device) if k else None
    b = torch.zeros(1, device=device)
    y = 2 * train.labels - 1
    history = []

    def logits(rows_ids):
        if v is None:
            return b + w[rows_ids].sum(dim=1)
        return _fm_logits(w[rows_ids].sum(dim=1), v[rows_ids], b)

    order_generator = torch.Generator(device=device).manual_seed(seed)
    for _ in range(epochs):
        def epoch():
            order = torch.randperm(train.n_rows, device=device, generator=order_generator)
            for start in range(0, train.n_rows, batch_size):
                rows = order[start:start + batch_size]
                batch_ids = ids[rows]
                z = logits(batch_ids)                                       # aggregate + loss
                delta = -y[rows] * torch.sigmoid(-y[rows] * z) / rows.numel()  # dloss/dz, batch mean
                flat = batch_ids.reshape(-1)
                w_grad = delta[:, None].expand(-1, width).reshape(-1)
                if v is not None:                                           # apply
                    factors = v[batch_ids]
                    v_grad = delta[:, None, None] * (factors.sum(dim=1, keepdim=True) - factors)
                    v.index_add_(0, flat, v_grad.reshape(-1, k), alpha=-lr)
                w.index_add_(0, flat, w_grad, alpha=-lr)
                b.sub_(lr * delta.sum())
        seconds = _seconds(epoch)
        history.append((seconds, _logloss(logits(valid_ids), valid.labels)))
    return history


BACKEND = "triton"


class History(list):
    """(seconds, validation logloss) per epoch; programs and resident_programs: the async kernel's
    launched programs and how many of them the GPU holds at once; roofline: an epoch's accesses
    (alac.runtime.planning.roofline.plan_roofline) and, on a GPU, their floor (None for sync arms without
    edge updates or grid barriers)."""

    programs = resident_programs = roofline = None


def alac_arm(train, valid, epochs, lr, k, seed, plan, optimizer="sgd"):
    from alac.runtime.planning.roofline import plan_roofline
    from alac.train.trainer import Trainer

    model = _model(k)
    trainer = Trainer(model, lr=lr, plan=plan, backend=BACKEND, device=train.device, seed=seed, optimizer=optimizer)
    layout, labels = trainer.prepare(train)
    valid_layout = trainer.layout_of(valid)
    warm = Trainer(model, lr=lr, plan=plan, backend=BACKEND, device=train.device, seed=seed, optimizer=optimizer)
    warm.executor.train_epoch(layout, labels, 0, lr)  # compiles every kernel off the clock
    history = History()
    for epoch in range(epochs):
        seconds = _seconds(lambda: trainer.executor.train_epoch(layout, labels, epoch, lr))
        history.append((seconds, trainer.evaluate_layout(valid_layout, valid)["logloss"]))
    history.programs = trainer.executor.backend.async_programs
    history.resident_programs = trainer.executor.backend.resident_async_programs()
    accesses, floor = plan_roofline(trainer.executor.ir, trainer.plan, layout)
    if accesses is not None:
        kernel_ms = 1000 * statistics.median(s for s, _ in history)
        print(accesses.line(floor, kernel_ms), flush=True)
        history.roofline = {"edges": accesses.edges, "hot_edges": accesses.hot_edges,
                            "floats_per_edge": accesses.floats_per_edge, "row_bytes": accesses.row_bytes,
                            "streamed_bytes": accesses.streamed_bytes, "barriers": accesses.barriers,
                            "floor_ms": floor}
    return history


def _model(k):
    from alac.models import zoo_model

    if k:
        return zoo_model("fm", k=k)
    return zoo_model("lr")


def _tuned_plan(train, k, seed, base, lr):
    """Autotune C and warps of an async hot-segment plan (H from the cost model for each C, within the
    planner's cap on the programs' sums; max_in_flight and the flush period fixed) on one epoch each."""
    from alac.runtime.planning.planner import autotune, hot_size_for_data
    from alac.train.trainer import Trainer

    candidates = []
    for chunk_size in (16, 32, 64):
        plan = dataclasses.replace(base, chunk_size=chunk_size)
        plan = dataclasses.replace(plan, hot_size=hot_size_for_data(train, plan, train.device, k))
        candidates += [dataclasses.replace(plan, num_warps=warps) for warps in (4, 8)]

    def run_epoch(plan):
        trainer = Trainer(_model(k), lr=lr, plan=plan, backend=BACKEND, device=train.device, seed=seed)
        layout, labels = trainer.prepare(train)
        trainer.executor.train_epoch(layout, labels, 0, lr)
        return _seconds(lambda: trainer.executor.train_epoch(layout, labels, 1, lr))

    best, timings = autotune(candidates, run_epoch)
    return best, timings


def run_arms(args, train, valid, k):
    from alac.ir.pipeline import lower
    from alac.plan import Plan
    from alac.runtime.movement.layout import LayoutOptions, build_layout
    from alac.runtime.planning.planner import plan_for

    # C = 8 for sync (results/sync_resident.md) and 32 for async (the plan sweep, results/flow_sweep.md)
    b1024 = Plan(batch_size=1024, kernels="fused", chunk_size=8)
    layout = build_layout(train, LayoutOptions(chunk_size=8), train.device)
    ir = lower(_model(k))
    device = train.device.type
    sync_choice = plan_for(layout, ir, "sync", 1024, b1024, device=device, use_hot_segment=True)
    del layout
    async_base = Plan(semantics="async", batch_size=1024, chunk_size=32, max_in_flight=args.max_in_flight)
    layout = build_layout(train, LayoutOptions(chunk_size=32), train.device)
    async_choice = plan_for(layout, ir, "async", 1024, async_base, device=device, use_hot_segment=True)
    every_chunk = plan_for(layout, ir, "async", 1024, dataclasses.replace(async_base, flush_every=1), device=device,
                           use_hot_segment=True)
    del layout
    arms = [
        ("pytorch_embeddingbag_b1024",
         lambda: pytorch_idiomatic(train, valid, args.baseline_epochs, args.lr, 1024, k, args.seed)),
        ("pytorch_embeddingbag_b16384",
         lambda: pytorch_idiomatic(train, valid, args.epochs, args.lr, 16384, k, args.seed)),
        ("pytorch_stage_b1024", lambda: pytorch_stage(train, valid, args.baseline_epochs, args.lr, 1024, k, args.seed)),
        ("alac_stage_sync_b1024", lambda: alac_arm(train, valid, args.epochs, args.lr, k, args.seed,
                                                   dataclasses.replace(b1024, kernels="stage"))),
        ("alac_fused_sync_launches_b1024", lambda: alac_arm(train, valid, args.epochs, args.lr, k, args.seed,
                                                            dataclasses.replace(b1024, grid_barrier=False,
                                                                                edge_updates=False))),
        ("alac_fused_sync_b1024", lambda: alac_arm(train, valid, args.epochs, args.lr, k, args.seed, b1024)),
        ("alac_fused_sync_deterministic_b1024", lambda: alac_arm(train, valid, args.epochs, args.lr, k, args.seed,
                                                                 dataclasses.replace(b1024, deterministic=True))),
        ("alac_fused_sync_hot_b1024", lambda: alac_arm(train, valid, args.epochs, args.lr, k, args.seed,
                                                       dataclasses.replace(sync_choice.plan, replicas=1))),
        ("alac_fused_sync_hot_replicas_b1024", lambda: alac_arm(train, valid, args.epochs, args.lr, k, args.seed,
                                                                sync_choice.plan)),
        ("alac_async", lambda: alac_arm(train, valid, args.epochs, args.lr, k, args.seed, async_base)),
        ("alac_async_hot_flush1", lambda: alac_arm(train, valid, args.epochs, args.lr, k, args.seed, every_chunk.plan)),
        ("alac_async_hot", lambda: alac_arm(train, valid, args.epochs, args.lr, k, args.seed, async_choice.plan)),
        ("alac_async_hot_queue", lambda: alac_arm(train, valid, args.epochs, args.lr, k, args.seed,
                                                  dataclasses.replace(async_choice.plan, chunk_queue=True))),
    ]
    selected = [a for a in arms if not args.arms or a[0] in args.arms.split(",")]
    # the sync epoch at other batch sizes, for time to the target beside its epoch time
    selected += [(f"alac_fused_sync_b{size}", lambda size=size: alac_arm(
        train, valid, args.epochs, args.lr, k, args.seed, dataclasses.replace(b1024, batch_size=size)))
        for size in args.sync_batches if size != 1024]
    results, plans = [], {"sync": sync_choice.reasons, "async": async_choice.reasons,
                          "plans": {"sync_hot": sync_choice.plan.describe(), "async_hot": async_choice.plan.describe(),
                                    "async_hot_flush1": every_chunk.plan.describe()}}
    for name, run in selected:
        history = run()
        results.append(_summarize(name, history, train))
        print(f"{name}: {results[-1]['ms_per_epoch']:.2f} ms/epoch, val logloss {history[-1][1]:.5f}", flush=True)
    if not args.arms or "alac_async_hot_tuned" in args.arms.split(","):
        tuned, timings = _tuned_plan(train, k, args.seed, async_choice.plan, args.lr)
        plans["autotune"] = timings
        plans["tuned"] = tuned.describe()
        history = alac_arm(train, valid, args.epochs, args.lr, k, args.seed, tuned)
        results.append(_summarize("alac_async_hot_tuned", history, train))
        print(f"alac_async_hot_tuned ({tuned.describe()}): {results[-1]['ms_per_epoch']:.2f} ms/epoch", flush=True)
    return results, plans


def _summarize(name, history, train):
    seconds = [s for s, _ in history]
    median = statistics.median(seconds)
    # A sync arm's first epoch also captures its CUDA graph (launched eagerly once): counted at the
    # median in the wall clock, reported as it was in ms_per_epoch_all.
    wall, total = [], 0.0
    for epoch, s in enumerate(seconds):
        total += min(s, median) if epoch == 0 else s
        wall.append(total)
    return {"name": name, "ms_per_epoch": 1000 * median, "ms_per_epoch_all": [1000 * s for s in seconds],
            "gnnz_per_s": train.nnz / median / 1e9, "val_logloss": [v for _, v in history], "wall_s": wall,
            "programs": getattr(history, "programs", None),
            "resident_programs": getattr(history, "resident_programs", None),
            "roofline": getattr(history, "roofline", None)}


def _times_floor(result):
    """An arm's epoch against the floor of its accesses (alac.runtime.planning.roofline)."""
    floor = (result.get("roofline") or {}).get("floor_ms")
    return f"{result['ms_per_epoch'] / floor:.2f}× ({floor:.2f} ms)" if floor else "-"


def _programs(result):
    if not result["programs"]:
        return "-"
    at_once = result["resident_programs"]
    return f"{result['programs']:,}" + (f" ({at_once:,} at once)" if at_once and at_once < result["programs"] else "")


def _finish(results, copy_gb_per_s, train):
    reference = next((r for r in results if r["name"] == "alac_fused_sync_b1024"), None)
    target = reference["val_logloss"][-1] + 0.002 if reference else None
    must_read = train.nnz * 4 + train.n_rows * 4       # feature ids and labels, once
    for r in results:
        seconds = r["ms_per_epoch"] / 1000
        r["bandwidth_fraction"] = must_read / (copy_gb_per_s * 1e9) / seconds if copy_gb_per_s else None
        r["time_to_target_s"] = next((w for w, v in zip(r["wall_s"], r["val_logloss"]) if target and v <= target), None)
    return target


# epochs per loss read in the scaling run's queued figure: a run of many epochs, where one exposed
# launch lead per read is a small share (3 per read left 5-8 % of a 1M-row epoch to it on H100)
QUEUED_EPOCHS = 10


def scaling(args, k):
    """Async ms per epoch and ns per non-zero from 1M to 64M rows (the planner's plan each time,
    with fixed shares per program and with the chunk queue)."""
    from alac.data.synthetic import criteo_like
    from alac.plan import Plan
    from alac.runtime.planning.planner import hot_size_for_data
    from alac.train.trainer import Trainer

    rows_list = [int(r) for r in args.scaling.split(",")]
    out = []
    for rows in rows_list:
        data = criteo_like(rows, seed=args.seed, device="cuda")
        for queue in (False, True):
            plan = Plan(semantics="async", batch_size=1024, chunk_size=32, max_in_flight=args.max_in_flight,
                        chunk_queue=queue)
            plan = dataclasses.replace(plan, hot_size=hot_size_for_data(data, plan))
            trainer = Trainer(_model(k), lr=args.lr, plan=plan, backend="triton", device="cuda", seed=args.seed)
            layout, labels = trainer.prepare(data)
            trainer.executor.train_epoch(layout, labels, 0, args.lr)
            times = [_seconds(lambda: trainer.executor.train_epoch(layout, labels, e, args.lr)) for e in range(1, 4)]
            seconds = statistics.median(times)
            # epochs queued back to back (Executor.train_epochs): the host work of an epoch overlaps
            # the previous one's kernel instead of preceding its own
            queued = [_seconds(lambda: trainer.executor.train_epochs(layout, labels, e, QUEUED_EPOCHS, args.lr))
                      / QUEUED_EPOCHS for e in (10, 20, 30)]
            queued_seconds = statistics.median(queued)
            out.append({"rows": rows, "nnz": data.nnz, "chunk_queue": queue, "ms_per_epoch": 1000 * seconds,
                        "ns_per_nnz": seconds / data.nnz * 1e9, "ms_per_epoch_queued": 1000 * queued_seconds,
                        "ns_per_nnz_queued": queued_seconds / data.nnz * 1e9, "plan": plan.describe(),
                        "programs": trainer.executor.backend.async_programs,
                        "resident_programs": trainer.executor.backend.resident_async_programs()})
            print(out[-1], flush=True)
            layout = labels = trainer = None
        data = None
        torch.cuda.empty_cache()
    return out


def real_data(args, k):
    """Test AUC of sync (batch 1024) and async on the shared real sets (ipinyou, 20news)."""
    from alac.data import load_libsvm_files
    from alac.plan import Plan
    from alac.runtime.planning.planner import hot_size_for_data
    from alac.train.trainer import Trainer

    sets = [("ipinyou", "ipinyou/train.fm.txt", "ipinyou/test.fm.txt", False, 1.0, 1024),
            ("20news", "20news/20news.binary.train.svm", "20news/20news.binary.test.svm", True, 2.0, 128)]
    out = []
    for name, train_file, test_file, normalize, lr, batch in sets:
        train, test = load_libsvm_files([Path(args.real_data) / train_file, Path(args.real_data) / test_file])
        if normalize:
            train, test = train.normalize_rows(), test.normalize_rows()
        row = {"data": name, "lr": lr, "batch_size": batch}
        for semantics in ("sync", "async"):
            plan = Plan(semantics=semantics, batch_size=batch, chunk_size=16, max_in_flight=args.max_in_flight)
            plan = dataclasses.replace(plan, hot_size=hot_size_for_data(train, plan))
            trainer = Trainer(_model(k), lr=lr, epochs=args.epochs, plan=plan, backend="triton", seed=args.seed)
            trainer.fit(train)
            row[f"{semantics}_auc"] = trainer.evaluate(test)["auc"]
        row["auc_difference"] = row["async_auc"] - row["sync_auc"]
        out.append(row)
        print(row, flush=True)
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="lr", choices=["lr", "fm"])
    parser.add_argument("--k", type=int, default=16)
    parser.add_argument("--rows", type=int, default=4_000_000)
    parser.add_argument("--valid-rows", type=int, default=500_000)
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--baseline-epochs", type=int, default=3, help="epochs of the slow PyTorch b1024 arms")
    parser.add_argument("--lr", type=float, default=2.0)
    parser.add_argument("--max-in-flight", type=int, default=132 * 128)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--arms", default="", help="comma-separated subset of the arms")
    parser.add_argument("--sync-batches", type=int, nargs="*", default=[],
                        help="also the fused sync arm at these batch sizes (e.g. 256 4096 16384)")
    parser.add_argument("--scaling", default="", help="comma-separated row counts for the scaling run")
    parser.add_argument("--real-data", default="", help="the shared data folder, for the real-data run")
    parser.add_argument("--backend", default="triton", choices=["triton", "interpret"],
                        help="interpret: a CPU smoke run of the harness (TRITON_INTERPRET=1)")
    parser.add_argument("--out", default=os.environ.get("OUT"))
    args = parser.parse_args()
    k = args.k if args.model == "fm" else 0
    global BACKEND
    BACKEND = args.backend
    device = "cuda" if args.backend == "triton" else "cpu"
    name = f"flow_{args.model}" + (f"_k{k}" if k and k != 16 else "")
    if args.scaling:
        name += "_scaling"
    elif args.real_data:
        name += "_real_data"

    from alac.runtime.planning.planner import measure_access_costs

    env = environment()
    costs = measure_access_costs() if device == "cuda" else None
    payload = {"device": env["device"], "environment": env, "arguments": vars(args),
               "access_costs": dataclasses.asdict(costs) if costs else None}
    lines = []
    if args.scaling:
        payload["scaling"] = scaling(args, k)
        lines += [f"Async scaling (queued: {QUEUED_EPOCHS} epochs per loss read, Executor.train_epochs):", "",
                  table(["rows", "non-zeros", "chunks", "ms / epoch", "ns / non-zero", "ms / epoch, queued",
                         "ns / non-zero, queued"], [
                      [f"{r['rows']:,}", f"{r['nnz']:,}", "queue" if r["chunk_queue"] else "fixed shares",
                       f"{r['ms_per_epoch']:.2f}", f"{r['ns_per_nnz']:.4f}",
                       f"{r['ms_per_epoch_queued']:.2f}", f"{r['ns_per_nnz_queued']:.4f}"]
                      for r in payload["scaling"]]), ""]
    if args.real_data:
        payload["real_data"] = real_data(args, k)
        lines += ["Real data, test AUC after the epochs, sync (b1024 / b128) against async:", "", table(
            ["data", "sync AUC", "async AUC", "difference"],
            [[r["data"], f"{r['sync_auc']:.4f}", f"{r['async_auc']:.4f}", f"{r['auc_difference']:+.4f}"]
             for r in payload["real_data"]]), ""]
    if not args.scaling and not args.real_data:
        train, valid = synthetic_train_valid(args.rows, args.valid_rows, device, args.seed)
        results, plans = run_arms(args, train, valid, k)
        target = _finish(results, costs.copy_gb_per_s if costs else None, train)
        payload.update({"arms": results, "target_val_logloss": target, "plans": plans})
        baseline = next((r for r in results if r["name"] == "pytorch_embeddingbag_b1024"), None)
        rows = [[r["name"], _programs(r), f"{r['ms_per_epoch']:.2f}",
                 f"{r['gnnz_per_s']:.2f}",
                 f"{100 * r['bandwidth_fraction']:.1f}%" if r["bandwidth_fraction"] else "-",
                 f"{baseline['ms_per_epoch'] / r['ms_per_epoch']:.0f}×" if baseline else "-",
                 _times_floor(r), f"{r['val_logloss'][-1]:.4f}",
                 f"{r['time_to_target_s']:.2f}" if r["time_to_target_s"] is not None else "not reached"]
                for r in results]
        lines += [f"{'FM k=' + str(k) if k else 'LR'}, synthetic Criteo-shaped set, {train.n_rows:,} rows × 39 "
                  f"({train.nnz:,} non-zeros), {valid.n_rows:,} validation rows, lr {args.lr}; {env['device']}, "
                  f"torch {env['torch']}, triton {env['triton']}, {env['date']}; copy bandwidth "
                  f"{costs.copy_gb_per_s if costs else 0:.0f} GB/s; target val logloss {target or 0:.4f}.", "",
                  table(["arm", "async programs", "ms / epoch", "G nnz / s", "of copy bandwidth", "vs PyTorch b1024",
                         "× its floor", "val logloss (last epoch)", "time to target (s)"], rows)]
        _plot(results, name, args.out, k)
    write(name, payload, "\n".join(lines), args.out)
    print("\n".join(lines))


def _plot(results, name, out_dir, k):
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    figure, axis = plt.subplots(figsize=(8, 5))
    for r in results:
        axis.plot(r["wall_s"], r["val_logloss"], marker="o", markersize=3, label=r["name"])
    axis.set_xscale("log")
    axis.set_xlabel("training wall time (s, log scale)")
    axis.set_ylabel("validation logloss")
    axis.set_title(f"{'FM k=' + str(k) if k else 'LR'}: validation loss against training time, per arm")
    axis.legend(fontsize=7)
    figure.tight_layout()
    for folder in result_folders(out_dir, None if torch.cuda.is_available() else "cpu"):
        Path(folder).mkdir(parents=True, exist_ok=True)
        figure.savefig(Path(folder) / f"{name}.png", dpi=120)


if __name__ == "__main__":
    main()
