"""Several GPUs through torch.distributed (alac.runtime.ranks.distributed); run under torchrun:
`PYTHONPATH=. torchrun --nproc-per-node 2 benchmarks/distributed.py [--parts flow,scd]`;
a scaling run: `torchrun --nproc-per-node 4 benchmarks/distributed.py --gpus 2 --own-rows
--flow-rows 256000000` (the first 1, 2 and 4 ranks, each making only its share of the rows).

The flow part: async LR and FM k = 16 on the synthetic Criteo-shaped sets (`--flow-rows`, 4M and 64M
rows), `--flow-epochs` at `--lr` (LR) and `--fm-lr` (FM) with the cost model's plan: one GPU (the
other ranks waiting), then DataParallelTrainer over the ranks once for each aggregation
(alac.train.data_parallel), synchronised once an epoch, and with its tables sharded row-wise over the ranks
(alac.runtime.rows.sharded, the sequential aggregation: each epoch's rows gathered by all-to-all and
their changes sent back), all of them or the cold ones only (hybrid: the hot segment replicated, its
changes all-reduced). Per arm `name`, `ranks`, `ms_per_epoch` (the median of epochs queued back to
back), `ms_per_epoch_validated` (the median with the validation set evaluated between epochs),
`val_logloss` per epoch,
`bytes_communicated` (per rank and epoch: a ring all-reduce's, or the rows an all-to-all sends to
other ranks).

The scd part: (1) CoCoA over the ranks against the virtual workers: ridge on a webspam-shaped set of
1/32 the size (8,216 x 21,272, lambda 1e-3), primal (columns split over the ranks) and dual (rows),
the default aggregation, the float64 sequential local solver over gloo, against
ScdSolver(workers=ranks) on rank 0, epoch by epoch; (2) TPA-SCD's Criteo problem, the dual ridge at
lambda 1e-3 on the Criteo-shaped set of benchmarks/scd.py (200M x 75M, 25-39 entries a row), its rows
split over the ranks, with the adaptive gamma (TPA-SCD's line search) and the plane search
(`--scd-aggregations`; alac.runtime.solvers.cocoa), to gap 1e-6: seconds (every rank's share taken from
the whole set and its solver set up, then its epochs), the seconds its collectives took, split into waiting for the
slowest rank and moving data (one all-reduce of the shared vector's change and one of two sums an
epoch), the bytes each rank sent. Per arm `name`, `ranks`, `ms_per_epoch`, `gap` per epoch,
`time_to_gap`, `bytes_communicated`.

The placement part: FM k = 16 with AdaGrad on the Kaggle-shaped set with its cardinalities scaled
until the model's rows exceed one GPU (x32: 1.08 billion rows, 82 GB, past an H100; x63, the most int32 ids
allow: 2.1 billion rows, 162 GB, past an H200), each rank making its share
of the rows, the tables left to DataParallelTrainer's auto (hybrid where they exceed a rank's
budget): epoch time, validation logloss, the rows each rank holds. Rank 0 writes
results/distributed.json and .md (distributed_<W>gpu.* for W ranks other than 2).
"""

from __future__ import annotations

import argparse
import faulthandler
import shlex
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from alac.data.synthetic import criteo_like
from alac.runtime.ranks.distributed import first_ranks, gloo_ranks, init_ranks
from alac.runtime.solvers.cocoa_ranks import DistributedScdSolver
from alac.runtime.solvers.scd import ScdSolver
from alac.train.data_parallel import DataParallelTrainer
from alac.train.trainer import TrainingDiverged
from benchmarks.distributed_tables import tables
from benchmarks.report import environment, merge, write
from benchmarks.scd import criteo_dual_like, time_to_gap, webspam_like


def _device(ranks):
    """The rank's GPU (one rank, with no process group: the current one)."""
    return ranks.device if ranks.backend == "nccl" else torch.device("cuda", torch.cuda.current_device())


def _now():
    torch.cuda.synchronize()
    return time.perf_counter()


def scd_match(args, ranks):
    """The ranks' CoCoA epochs against the virtual workers', gap by gap, for each form: the float64
    sequential local solver on the CPU, over gloo (the GPU kernels' lanes race, so that two runs of
    them differ; tests/runtime/solvers/test_cocoa_ranks.py checks them under the interpreter)."""
    data = webspam_like(args.rows // 32, args.columns // 32, args.nnz_per_row, 1.0, args.seed)
    cpu = gloo_ranks(ranks)
    arms = []
    for form in ("primal", "dual"):
        options = dict(form=form, loss="squared", l2=1e-3, backend="sequential", device="cpu", seed=args.seed)
        solver = DistributedScdSolver(data, ranks=cpu, **options)     # the default aggregation
        gaps = []
        for _ in range(args.match_epochs):
            solver.epoch()
            gaps.append(solver.gap())
        arm = {"name": f"scd_{form}_ridge_webspam_small_sequential", "ranks": ranks.world, "gap": gaps,
               "epochs": len(gaps), "ms_per_epoch": 1e3 * solver.seconds / len(gaps)}
        if ranks.rank == 0:
            virtual = ScdSolver(data, workers=ranks.world, **options)
            expected = []
            for _ in range(args.match_epochs):
                virtual.epoch()
                expected.append(virtual.gap())
            arm.update(virtual_gap=expected,
                       largest_relative_difference=max(abs(a - b) / abs(b) for a, b in zip(gaps, expected)))
        arms.append(arm)
    return arms


def scd_criteo(args, ranks, rows, columns, name="scd_dual_ridge_criteo", aggregation="adaptive", max_epochs=None):
    """The Criteo-shaped dual ridge of rows x columns over the ranks to gap 1e-6 (--own-rows: each rank
    makes and is given only its contiguous share of the rows), the ranks' changes aggregated by
    TPA-SCD's line search (adaptive) or the plane search (subspace; alac.runtime.solvers.cocoa)."""
    first, count = share_range(rows, ranks.world, ranks.rank) if args.own_rows else (0, rows)
    data = criteo_dual_like(count, columns, 25, 39, args.seed, _device(ranks), first_row=first)
    data.labels = data.labels * 2 - 1
    options = dict(form="dual", loss="squared", l2=1e-3, backend="triton", seed=args.seed, ranks=ranks,
                   device=_device(ranks), rows="own" if args.own_rows else "whole", aggregation=aggregation)
    start = _now()
    solver = DistributedScdSolver(data, **options)
    del data
    setup = _now() - start
    epochs = []
    ranks.wait_apart = True
    for _ in range(max_epochs or args.epochs):
        collective, waited, sent = ranks.traffic.seconds, ranks.traffic.waiting_seconds, ranks.traffic.bytes
        before = solver.seconds
        gamma = solver.epoch()
        epochs.append({"seconds": solver.seconds, "gamma": gamma, "bytes": ranks.traffic.bytes - sent,
                       "collective_seconds": ranks.traffic.seconds - collective,
                       "waiting_seconds": ranks.traffic.waiting_seconds - waited})
        # this rank's own part of the epoch: its local solver, before it waits for the others
        epochs[-1]["local_seconds"] = solver.seconds - before - epochs[-1]["collective_seconds"]
        epochs[-1]["gap"] = solver.gap()        # the certificate's collectives after the epoch's count
        if epochs[-1]["gap"] <= 1e-6:
            break
    # every rank's mean local epoch and coordinates in flight: which rank the others wait for, and why
    own = torch.zeros(ranks.world, 2, dtype=torch.float64, device=ranks.device)
    own[ranks.rank] = torch.tensor([1e3 * sum(e["local_seconds"] for e in epochs) / len(epochs), solver.in_flight],
                                   dtype=torch.float64)
    per_rank = ranks.all_reduce(own).cpu().tolist()
    if ranks.rank == 0:
        print(f"{name}: each rank's own epoch (ms) and coordinates in flight: {per_rank}", flush=True)
    return {"name": name, "ranks": ranks.world, "rows": rows, "aggregation": aggregation,
            "local_ms_per_epoch_by_rank": [r[0] for r in per_rank], "in_flight_by_rank": [int(r[1]) for r in per_rank],
            "columns": columns, "l2": 1e-3, "epochs": len(epochs), "gap": [e["gap"] for e in epochs],
            "gamma": [e["gamma"] for e in epochs], "setup_seconds": setup, "seconds": setup + solver.seconds,
            "ms_per_epoch": 1e3 * solver.seconds / len(epochs),
            # collectives: waiting at the barrier for the slowest rank, then the transfers
            "waiting_ms_per_epoch": 1e3 * sum(e["waiting_seconds"] for e in epochs) / len(epochs),
            "communication_ms_per_epoch": 1e3 * sum(e["collective_seconds"] - e["waiting_seconds"]
                                                    for e in epochs) / len(epochs),
            "bytes_communicated": epochs[-1]["bytes"], "in_flight": solver.in_flight,
            "time_to_gap": time_to_gap([(setup + e["seconds"], e["gap"]) for e in epochs])}


def flow_plan(model, device, seed):
    """The async plan `alac train` would choose (the cost model's hot segment), from a layout of the
    first 4M rows: one plan for every arm and every rank."""
    from alac.ir.pipeline import lower
    from alac.plan import Plan
    from alac.runtime.movement.layout import LayoutOptions, build_layout
    from alac.runtime.planning.planner import plan_for

    sample = criteo_like(4_000_000, seed=seed, device=device)
    base = Plan(semantics="async", batch_size=1024, chunk_size=32)
    layout = build_layout(sample, LayoutOptions(chunk_size=32), device)
    return plan_for(layout, lower(model), "async", 1024, base, device=device.type).plan


def median_ms(records):
    """The median epoch of a fit's records, in milliseconds."""
    return 1e3 * sorted(r["seconds"] for r in records)[len(records) // 2]


def flow_arm(name, model, plan, train, valid, args, trained_by, set_rows, **options):
    """Epochs of a DataParallelTrainer over trained_by (one rank's GPU alone, or the first W of the
    launched ranks: alac.runtime.ranks.distributed.first_ranks), after one epoch that compiles the
    kernels: queued back to back as `alac train` runs them with nothing to evaluate between epochs
    (ms per epoch, the median epoch), then again with the validation set evaluated after each epoch
    (its logloss per epoch, and the median epoch's time with a group of one epoch's start and end in
    it); bytes each rank sent per epoch. set_rows: the whole set's rows (train may be this rank's share)."""
    common = dict(plan=plan, seed=args.seed, device=_device(trained_by), ranks=trained_by)
    common.update(options)
    sent = []          # bytes sent so far at each epoch's end
    trainer = DataParallelTrainer(model, epochs=args.flow_epochs, callbacks=[
        lambda _, record: sent.append(trained_by.traffic.bytes)], **common)
    try:
        DataParallelTrainer(model, epochs=1, **common).fit(train)
        queued = DataParallelTrainer(model, epochs=args.flow_epochs, **common).fit(train)
        if trained_by.rank == 0:
            print(trainer.describe(), flush=True)
        history = trainer.fit(train, valid)
    except TrainingDiverged as error:
        # every rank sees the same mean loss and the same replicated parameters: all stop here together
        if trained_by.rank == 0:
            print(f"{name}: {error}", flush=True)
        return {"name": name, "ranks": trained_by.world, "rows": set_rows, "lr": common["lr"],
                "aggregation": options.get("aggregation"), "diverged": str(error)}
    arm = {"name": name, "ranks": trained_by.world, "rows": set_rows, "epochs": len(history),
           "ms_per_epoch": median_ms(queued), "queued_epoch_seconds": [r["seconds"] for r in queued],
           "ms_per_epoch_validated": median_ms(history), "epoch_seconds": [r["seconds"] for r in history],
           "val_logloss": [r["valid_logloss"] for r in history],
           # between epochs' ends: their all-reduces, not the feature counts' before the first
           "bytes_communicated": (sent[-1] - sent[0]) // max(1, len(sent) - 1),
           "sync_every": options.get("sync_every"), "aggregation": trainer.aggregation, "tables": trainer.tables,
           "lr": common["lr"],
           "plan": plan.describe()}
    if trained_by.rank == 0:
        print(f"{name} {arm['rows']:,} rows: {arm['ms_per_epoch']:.2f} ms/epoch queued, "
              f"{arm['ms_per_epoch_validated']:.2f} validated, val {arm['val_logloss']}", flush=True)
    del trainer
    torch.cuda.empty_cache()
    return arm


def flow_part(args, ranks):
    """LR and FM k = 16 on the synthetic Criteo-shaped sets: one GPU, the first W ranks for each W of
    --gpus (the sequential aggregation), and all of them with every aggregation and placement."""
    from alac.models import zoo_model

    arms = []
    device = _device(ranks)
    models = [(label, model, flow_plan(model, device, args.seed), lr)
              for label, model, lr in (("lr", zoo_model("lr"), args.lr), ("fm16", zoo_model("fm", k=16), args.fm_lr))
              if label in args.models.split(",")]
    # every rank makes every group together (torch.distributed.new_group)
    groups = {world: first_ranks(ranks, world) for world in sorted({1, ranks.world, *args.gpus})}
    share = "own" if args.own_rows else "whole"
    for rows in args.flow_rows:
        valid = criteo_like(args.valid_rows, seed=args.seed, device=device, first_row=rows)
        whole = None if args.own_rows else criteo_like(rows, seed=args.seed, device=device)
        for world, trained_by in groups.items():
            if trained_by is not None:
                train = whole if whole is not None else share_rows(rows, world, trained_by.rank, args.seed, device)
                for label, model, plan, lr in models:
                    arms += flow_arms(f"flow_{label}_{world}gpu", model, plan, train, valid, args, trained_by,
                                      every=world == ranks.world, set_rows=rows, lr=lr, rows=share)
                del train
                torch.cuda.empty_cache()
            _barrier(ranks)
        del whole, valid
        torch.cuda.empty_cache()
    return arms


def flow_arms(name, model, plan, train, valid, args, trained_by, every, **options):
    """One GPU's arm (name ..._1gpu), or the ranks' with the sequential aggregation, and where every,
    with each other aggregation and with sharded and hybrid tables."""
    if trained_by.world == 1:
        return [flow_arm(name, model, plan, train, valid, args, trained_by, **options)]
    arms, chosen = [], args.all_ranks_arms.split(",") if every else []
    for aggregation in ("sequential", *(a for a in ("rows", "adding", "averaging") if a in chosen)):
        arms.append(flow_arm(f"{name}_{aggregation}", model, plan, train, valid, args, trained_by,
                             aggregation=aggregation, **options))
    for placed in (t for t in ("sharded", "hybrid") if t in chosen):
        arms.append(flow_arm(f"{name}_{placed}", model, plan, train, valid, args, trained_by,
                             aggregation="sequential", tables=placed, **options))
    return arms


def share_range(rows, world, rank):
    """(first row, rows) of rank `rank`'s contiguous share of `rows`, as torch.tensor_split cuts them."""
    counts = [rows // world + (r < rows % world) for r in range(world)]
    return sum(counts[:rank]), counts[rank]


def share_rows(rows, world, rank, seed, device, piece_rows=1 << 24):
    """Rank `rank`'s contiguous share of the first `rows` synthetic rows (as torch.tensor_split cuts
    them), each rank making only its own: made piece by piece on the device into tensors of the
    share's size, without field ids (LR and FM read none; they would double an edge's bytes)."""
    from alac.data.dataset import SparseDataset

    first, count = share_range(rows, world, rank)
    indptr = torch.zeros(count + 1, dtype=torch.int64, device=device)
    indices, labels = None, torch.empty(count, dtype=torch.float32, device=device)
    for start in range(0, count, piece_rows):
        piece = criteo_like(min(piece_rows, count - start), seed=seed, device=device, first_row=first + start)
        if indices is None:
            # one-hot rows: a field an entry, as many entries in every row
            per_row = piece.nnz // piece.n_rows
            indices = torch.empty(count * per_row, dtype=piece.indices.dtype, device=device)
            n_features = piece.n_features
        offset = start * per_row
        indices[offset:offset + piece.nnz] = piece.indices
        indptr[start + 1:start + piece.n_rows + 1] = piece.indptr[1:] + offset
        labels[start:start + piece.n_rows] = piece.labels
        del piece
    return SparseDataset(indptr, indices, None, labels, n_features)


def placement_part(args, ranks):
    """FM k = 16 with AdaGrad on the Kaggle-shaped set, its cardinalities times --placement-scale
    (labels from a planted LR: no planted table of factors), each rank making only its share of the
    rows: tables left to DataParallelTrainer's auto, which shards them (hybrid) where the model's rows
    exceed the GPU budget for them. Epoch time, validation logloss, the table's bytes against one GPU's
    memory and the rows each rank holds."""
    from alac.data.synthetic import kaggle_like
    from alac.models import zoo_model
    from alac.plan import Plan
    from alac.runtime.planning.planner import hot_size_for_data

    device, started = _device(ranks), _now()
    if ranks.rank == 0:
        # where the minutes go on billions of rows: every thread's stack each minute until the run ends
        faulthandler.dump_traceback_later(60, repeat=True)

    def progress(text):
        # minutes of work on billions of rows: each stage said as it ends
        if ranks.rank == 0:
            print(f"placement, {_now() - started:.0f} s: {text}", flush=True)

    first, count = share_range(args.placement_rows, ranks.world, ranks.rank)
    options = dict(zipf=1.1, seed=args.seed, model="lr", device=device, scale=args.placement_scale)
    train = kaggle_like(count, first_row=first, **options)
    valid = kaggle_like(args.valid_rows, first_row=args.placement_rows, **options)
    progress(f"{count:,} rows a rank made, {train.n_features:,} features")
    base = Plan(semantics="async", batch_size=1024, chunk_size=32)
    plan = Plan(semantics="async", batch_size=1024, chunk_size=32,
                hot_size=hot_size_for_data(train, base, device.type, 16))
    sent = []
    trainer = DataParallelTrainer(zoo_model("fm", k=16), optimizer="adagrad", lr=args.placement_lr, plan=plan,
                                  seed=args.seed, device=device, ranks=ranks, rows="own", epochs=args.placement_epochs,
                                  callbacks=[lambda _, record: sent.append(ranks.traffic.bytes)],
                                  log=lambda record: progress(f"epoch {record['epoch']}: {record['seconds']:.1f} s, "
                                                              f"val logloss {record.get('valid_logloss', 0):.4f}"))
    progress(f"hot segment {trainer.plan.hot_size:,} rows (the ranks' smallest; rank 0's rows chose {plan.hot_size:,})")
    trainer.prepare(train)
    progress(f"laid out; {trainer.describe()}")
    history = trainer.fit(train, valid)
    held = (trainer.executor.table.shape[0] + trainer.executor.hot_table.shape[0]) if trainer.sharded_tables else None
    arm = {"name": f"placement_fm16_adagrad_kaggle_x{args.placement_scale}", "ranks": ranks.world,
           "rows": args.placement_rows, "features": train.n_features, "tables": trainer.tables,
           "sync_every": trainer.sync_every, "hot_rows": trainer.plan.hot_size,
           "table_bytes": trainer.placement.table_bytes,
           "budget_bytes": trainer.placement.budget_bytes,
           "gpu_bytes": torch.cuda.get_device_properties(device).total_memory, "rows_held": held,
           "epochs": len(history), "epoch_seconds": [r["seconds"] for r in history],
           "ms_per_epoch": median_ms(history),
           "val_logloss": [r["valid_logloss"] for r in history],
           "bytes_communicated": (sent[-1] - sent[0]) // max(1, len(sent) - 1) if len(sent) > 1 else None,
           "placement": trainer.placement.lines()}
    del trainer, train, valid
    torch.cuda.empty_cache()
    faulthandler.cancel_dump_traceback_later()
    return arm


def _barrier(ranks):
    if ranks.world > 1:
        torch.distributed.barrier()


def recorded_command(argv):
    """The run's arguments as a shell would take them, less --out (results go to results/ by default)."""
    kept = [a for i, a in enumerate(argv) if a != "--out" and (i == 0 or argv[i - 1] != "--out")]
    return shlex.join(kept)


def result_name(world):
    """results/distributed.json for two ranks (the 2-GPU machine's runs), distributed_<W>gpu.json for W."""
    return "distributed" if world == 2 else f"distributed_{world}gpu"


def report(payload):
    env, ranks = payload["environment"], payload["ranks"]
    runs = payload.get("runs") or [{"command": payload.get("command", f"--parts {payload['arguments']['parts']}"),
                                    "date": env["date"]}]
    # runs merged (--merge): each its command, date and what became of its arms
    said = "; ".join(f"`PYTHONPATH=. torchrun --nproc-per-node {ranks} benchmarks/distributed.py {run['command']}` "
                     f"{run['date']}" + (f" ({run['note']})" if run.get("note") else "") for run in runs)
    return f"Distributed ({env['device']} x {ranks}: {said})\n\n" + tables(payload)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parts", default="flow,scd")
    parser.add_argument("--flow-rows", type=int, nargs="+", default=[4_000_000, 64_000_000])
    parser.add_argument("--valid-rows", type=int, default=500_000)
    parser.add_argument("--gpus", type=int, nargs="*", default=[],
                        help="also train on the first W ranks for each W (sequential aggregation): a scaling run")
    parser.add_argument("--own-rows", action="store_true",
                        help="each rank makes only its share of the rows (no rank holds the whole set)")
    parser.add_argument("--flow-epochs", type=int, default=5)
    parser.add_argument("--models", default="lr,fm16", help="flow models: of lr, fm16")
    parser.add_argument("--all-ranks-arms", default="rows,adding,averaging,sharded,hybrid",
                        help="flow arms on all the ranks beside the sequential aggregation")
    parser.add_argument("--lr", type=float, default=2.0)   # benchmarks/flow.py's
    # at 2.0 one GPU's own FM validation loss rises after epoch 3 and differs by 0.004 between seeds
    # (H100, 3 seeds, 5 epochs); at 0.5 it falls every epoch (benchmarks/streaming.py's FM)
    parser.add_argument("--fm-lr", type=float, default=0.5)
    parser.add_argument("--rows", type=int, default=262_938)
    parser.add_argument("--columns", type=int, default=680_715)
    parser.add_argument("--nnz-per-row", type=int, default=200)
    parser.add_argument("--match-epochs", type=int, default=30)
    parser.add_argument("--criteo-rows", type=int, default=200_000_000)
    parser.add_argument("--criteo-columns", type=int, default=75_000_000)
    parser.add_argument("--criteo-scale", type=int, default=1,
                        help="also the Criteo-shaped problem this many times larger in rows and columns")
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--scd-aggregations", default="adaptive,subspace",
                        help="the Criteo-shaped SCD arms' aggregations (alac.runtime.solvers.cocoa)")
    parser.add_argument("--placement-rows", type=int, default=64_000_000)
    # x32: 1.08 billion feature rows of FM k = 16 with AdaGrad, 82 GB: over an H100's memory
    parser.add_argument("--placement-scale", type=int, default=32)
    parser.add_argument("--placement-epochs", type=int, default=2)
    parser.add_argument("--placement-lr", type=float, default=0.1)   # benchmarks/placement.py's
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=None)
    parser.add_argument("--merge", nargs="+", metavar="JSON", help="write one result of these runs' JSON files")
    args = parser.parse_args()
    if args.merge:
        payload = merge(args.merge, "distributed.py")
        write(result_name(payload["ranks"]), payload, report(payload), args.out)
        return
    ranks = init_ranks()
    if not torch.cuda.is_available() or ranks.backend not in (None, "nccl"):
        raise SystemExit("benchmarks/distributed.py runs on GPUs: launch it with torchrun on a machine with CUDA")
    print(f"alac: {ranks.describe()}", flush=True)
    arms = []
    if "flow" in args.parts.split(","):
        arms += flow_part(args, ranks)
    if "scd" in args.parts.split(","):
        ranks.timed = True
        arms += scd_match(args, ranks)
        # an unrecorded epoch of each size first: the first arm paid the kernels' compilation and a first
        # epoch's other one-time costs (2 H200s: 2.35 s in its first three epochs, then 0.363 s each)
        scd_criteo(args, ranks, args.criteo_rows, args.criteo_columns, max_epochs=1)
        if args.criteo_scale > 1:
            scd_criteo(args, ranks, args.criteo_rows * args.criteo_scale, args.criteo_columns * args.criteo_scale,
                       max_epochs=1)
        for aggregation in args.scd_aggregations.split(","):
            suffix = "" if aggregation == "adaptive" else f"_{aggregation}"
            arms.append(scd_criteo(args, ranks, args.criteo_rows, args.criteo_columns,
                                   name=f"scd_dual_ridge_criteo{suffix}", aggregation=aggregation))
            if args.criteo_scale > 1:
                # and one --criteo-scale times larger in rows and columns (x4: 800M x 300M)
                arms.append(scd_criteo(args, ranks, args.criteo_rows * args.criteo_scale,
                                       args.criteo_columns * args.criteo_scale, aggregation=aggregation,
                                       name=f"scd_dual_ridge_criteo_x{args.criteo_scale}{suffix}"))
    if "placement" in args.parts.split(","):
        arms.append(placement_part(args, ranks))
    if ranks.rank == 0:
        payload = {"environment": environment(), "arguments": vars(args), "ranks": ranks.world, "arms": arms,
                   "command": recorded_command(sys.argv[1:])}
        write(result_name(ranks.world), payload, report(payload), args.out)
        print(report(payload), flush=True)


if __name__ == "__main__":
    main()
