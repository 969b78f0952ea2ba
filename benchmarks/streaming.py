"""Streamed training against resident training: blocks from pinned host memory or from disk.

    PYTHONPATH=. python benchmarks/streaming.py [--rows 4000000] [--budget-gb 1] [--epochs 4]
        [--big-rows 540000000] [--disk-dir DIR] [--out DIR]

The 4M x 39 synthetic set (benchmarks/flow.py's), async LR and FM k = 16 with the flow's async plan:
resident (the layout on the GPU), streamed from pinned host memory with the copies of the next
blocks overlapping the kernels of block i (2, 4 or 8 blocks per budget; ids as int32 or in the
narrow 16-bit form of alac.runtime.movement.wire), the same without overlap (every copy in the kernels'
stream), and streamed from a block store on disk opened with page_cache=False: every range read is
dropped from the page cache at once, so every epoch, and the next epoch's blocks read ahead during
it, come from the disk (its read bandwidth also per ring depth and reader threads).
An arm's epoch time is the median over --time-runs runs of --epochs epochs queued back to back after
a first one (as a fit without validation runs them: one wait for the GPU per run); its validation
loss per epoch is the median of --loss-runs runs from fresh parameters, run r with seed --seed + r
(its own initial parameters and chunk and block orders: async epochs are not reproducible, and one
order's bump is not the arm's), every run's figures kept in the JSON. copy_bound_ms
is the bytes an epoch moves at the measured pinned host -> device bandwidth, read_bound_ms at the
measured read bandwidth of the store's files. The big arm trains
async LR on --big-rows rows held as pinned blocks with int32 ids (more bytes than the GPU's memory)
for 2 epochs. Writes results/streaming.json and .md and a timeline of copies and kernels per block
(streaming_timeline.png).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from alac.runtime.device.timing import gpu_milliseconds
from benchmarks.flow import _model, _seconds, synthetic_train_valid
from benchmarks.render import streaming_table
from benchmarks.report import environment, write


def pinned_gb_per_s(megabytes=256):
    source = torch.empty(megabytes * 2**20 // 4).pin_memory()
    target = torch.empty_like(source, device="cuda")
    milliseconds, _ = gpu_milliseconds(lambda: target.copy_(source, non_blocking=True), repeats=10)
    return source.numel() * 4 / milliseconds / 1e6


def drop_from_page_cache(folder):
    """Evict a store's files from the page cache, so that the next read comes from the disk."""
    os.sync()
    for path in Path(folder).glob("block-*.bin"):
        with open(path, "rb") as handle:
            os.posix_fadvise(handle.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)


def disk_read_gb_per_s(store):
    """The store's files read through its reader threads, from the disk: bytes per second."""
    for _, _, release in store.read([0]):
        release(None)  # the ring's pinned buffers and threads are made off the clock
    drop_from_page_cache(store.folder)
    started = time.perf_counter()
    total = 0
    for _, buffer, release in store.read(range(len(store.blocks))):
        total += buffer.numel()
        release(None)
    return total / (time.perf_counter() - started) / 1e9


def ring_sweep(folder):
    """The store's read bandwidth from disk (GB/s) per (ring depth, reader threads)."""
    from alac.runtime.movement.block_store import DiskBlocks

    sweep = []
    for depth, readers in ((2, 1), (3, 2), (4, 4), (8, 4)):
        store = DiskBlocks(folder, pin=True, ring_depth=depth, readers=readers, page_cache=False)
        sweep.append({"ring_depth": depth, "readers": readers, "gb_per_s": disk_read_gb_per_s(store)})
        store.close()
    return sweep


def _back_to_back(epochs, args):
    """(median, every run) of the milliseconds per epoch of --time-runs runs of --epochs epochs queued
    back to back (each epoch's copies counted, the next epoch's first block included); epochs(first,
    count) queues count epochs from first."""
    runs = [1000 * _seconds(lambda: epochs(1 + run * args.epochs, args.epochs)) / args.epochs
            for run in range(args.time_runs)]
    return statistics.median(runs), runs


def _losses(epochs, executor, trainer, valid_layout, valid, args):
    """(median over runs, every run) of the validation logloss after each epoch of --loss-runs runs
    from fresh parameters, run r with seed --seed + r."""
    every = []
    for run in range(args.loss_runs):
        executor.state, executor.seed = None, args.seed + run
        losses = []
        for e in range(args.epochs):
            epochs(e, 1)
            trainer.executor.state = executor.state   # the trainer's evaluation reads these params
            losses.append(trainer.evaluate_layout(valid_layout, valid)["logloss"])
        every.append(losses)
    executor.seed = args.seed
    return [statistics.median(run[e] for run in every) for e in range(args.epochs)], every


def _arm(name, source, streamed, executor, epochs, args, trainer, valid_layout, valid, bandwidth):
    """Time and validation losses of a streamed arm; epochs(first, count) trains count epochs from first."""
    epochs(0, 1)  # compiles the kernels and makes the parameters off the clock
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base_bytes = torch.cuda.memory_allocated()
    ms, ms_runs = _back_to_back(epochs, args)
    peak = torch.cuda.max_memory_allocated()
    losses, runs = _losses(epochs, executor, trainer, valid_layout, valid, args)
    ids = ("int32" if "edge_id16" not in streamed.source.optional
           else "field_ranks" if streamed.source.field_ranks is not None else "narrow")
    return {"name": name, "source": source, "ids": ids, "blocks": len(streamed.blocks),
            "bytes_per_epoch": streamed.bytes_per_epoch,
            "bytes_per_edge": streamed.bytes_per_epoch / streamed.host.stats.nnz, "ms_per_epoch": ms,
            "ms_per_epoch_runs": ms_runs,
            "copy_bound_ms": 1000 * streamed.bytes_per_epoch / (bandwidth * 1e9), "val_logloss": losses,
            "val_logloss_runs": runs, "peak_gpu_bytes": peak, "peak_gpu_bytes_above_start": peak - base_bytes}


def run_model(k, train, valid, args, bandwidth, disk):
    from alac.plan import Plan
    from alac.runtime.execution.executor import Executor
    from alac.runtime.movement.block_store import DiskBlocks
    from alac.runtime.movement.streams import StreamedLayout
    from alac.runtime.planning.planner import hot_size_for_data
    from alac.train.trainer import Trainer

    base = Plan(semantics="async", batch_size=1024, chunk_size=32)
    plan = Plan(semantics="async", batch_size=1024, chunk_size=32,
                hot_size=hot_size_for_data(train, base, "cuda", k))
    lr = args.fm_lr if k else args.lr
    name = f"fm_k{k}" if k else "lr"
    trainer = Trainer(_model(k), lr=lr, plan=plan, backend="triton", device="cuda", seed=args.seed)
    layout, labels = trainer.prepare(train)
    valid_layout = trainer.layout_of(valid)
    budget = int(args.budget_gb * 2**30)
    results = []

    def model_labels(block):
        return trainer.labels.model_labels(block.labels)

    pinned = () if args.disk_only else ((True, 4, "int32"), (True, 4, "narrow"), (True, 2, "narrow"),
                                         (True, 8, "narrow"), (False, 4, "narrow"))
    for overlap, depth, ids in pinned:
        streamed = StreamedLayout.from_layout(layout, plan.chunks_per_batch, budget, "cuda", overlap, depth, ids=ids)
        executor = Executor(_model(k), plan, backend="triton", device="cuda", seed=args.seed)

        def epochs(first, count, streamed=streamed, executor=executor):
            return executor.train_streamed_epochs(streamed, model_labels, first, count, lr)

        results.append(_arm(f"{name}_streamed_{depth}_per_budget_{ids}" + ("" if overlap else "_no_overlap"),
                            "host_pinned", streamed, executor, epochs, args, trainer, valid_layout, valid, bandwidth))
        streamed.close()
    for suffix, folder in disk["folders"].items():
        # every read comes from the disk: the pages read are dropped at once, also those of the next
        # epoch's blocks read ahead during this one
        store = DiskBlocks(folder, pin=True, page_cache=False)
        drop_from_page_cache(store.folder)
        codec = store.codec
        streamed = StreamedLayout(store, "cuda")
        executor = Executor(_model(k), plan, backend="triton", device="cuda", seed=args.seed)

        def from_disk(first, count, streamed=streamed, executor=executor):
            return executor.train_streamed_epochs(streamed, model_labels, first, count, lr)

        arm = _arm(f"{name}_streamed_from_disk{suffix}", "disk", streamed, executor, from_disk, args, trainer,
                   valid_layout, valid, bandwidth)
        stored = sum(path.stat().st_size for path in Path(folder).glob("block-*.bin"))
        arm.update(disk_read_gb_per_s=disk["read_gb_per_s"], codec=codec, stored_bytes=stored,
                   read_bound_ms=1000 * stored / (disk["read_gb_per_s"] * 1e9))
        results.append(arm)
        streamed.close()
    if not k and not args.disk_only:
        results[-1]["timeline"] = timeline(layout, plan, budget, lr, model_labels, args)
    trainer.executor.state = None
    executor = trainer.executor

    def resident(first, count):
        return executor.train_epochs(layout, labels, first, count, lr)

    resident(0, 1)
    resident_ms, resident_runs = _back_to_back(resident, args)
    losses, runs = _losses(resident, executor, trainer, valid_layout, valid, args)
    results.append({"name": f"{name}_resident", "source": "device", "ms_per_epoch": resident_ms,
                    "ms_per_epoch_runs": resident_runs, "val_logloss": losses, "val_logloss_runs": runs})
    for r in results:
        r["resident_ms"] = resident_ms
    return results


def timeline(layout, plan, budget, lr, model_labels, args):
    """One streamed LR epoch's copies and kernels per block (ms from the epoch's start), drawn to
    streaming_timeline.png."""
    from alac.runtime.execution.executor import Executor
    from alac.runtime.movement.streams import StreamedLayout

    streamed = StreamedLayout.from_layout(layout, plan.chunks_per_batch, budget, "cuda")
    executor = Executor(_model(0), plan, backend="triton", device="cuda", seed=args.seed)
    executor.train_streamed_epoch(streamed, model_labels, 0, lr)
    streamed.copy_events = []
    origin = torch.cuda.Event(enable_timing=True)
    origin.record()
    kernels = []
    executor.train_streamed_epoch(streamed, model_labels, 1, lr, kernel_events=kernels)
    torch.cuda.synchronize()
    spans = {kind: [(i, origin.elapsed_time(a), origin.elapsed_time(b)) for i, a, b in events]
             for kind, events in (("copy", streamed.copy_events), ("compute", kernels))}
    out = Path(args.out or Path(__file__).parent / "results")
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    figure, axes = plt.subplots(figsize=(9, 2.2))
    for row, (kind, color) in enumerate((("copy", "tab:blue"), ("compute", "tab:orange"))):
        for index, start, end in spans[kind]:
            axes.broken_barh([(start, end - start)], (row - 0.4, 0.8), color=color, edgecolor="white")
            axes.text((start + end) / 2, row, str(index), ha="center", va="center", fontsize=7)
    axes.set_yticks([0, 1], ["copy stream", "kernels"])
    axes.set_xlabel("ms from the epoch's start (block index in the bars)")
    figure.tight_layout()
    out.mkdir(parents=True, exist_ok=True)
    figure.savefig(out / "streaming_timeline.png", dpi=120)
    return spans


def big_run(args, bandwidth):
    """Async LR on more rows than the GPU holds, as pinned blocks made piece by piece: 2 epochs."""
    from alac.data.synthetic import criteo_like
    from alac.plan import Plan
    from alac.runtime.movement.block_store import pinned_blocks, synthetic_pieces
    from alac.runtime.movement.layout import LayoutOptions
    from alac.runtime.planning.planner import hot_size_for_data
    from alac.train.trainer import Trainer

    budget = int(args.big_budget_gb * 2**30)
    sample = criteo_like(4_000_000, seed=args.seed, device="cuda")
    base = Plan(semantics="async", batch_size=1024, chunk_size=32)
    plan = Plan(semantics="async", batch_size=1024, chunk_size=32, hot_size=hot_size_for_data(sample, base, "cuda", 0))
    del sample
    started = time.perf_counter()
    source = pinned_blocks(synthetic_pieces(args.big_rows, 1 << 24, seed=args.seed, device="cuda"),
                           LayoutOptions(chunk_size=32), plan.chunks_per_batch, budget // 4, "cuda", ids="int32",
                           progress=lambda done, rows: print(f"  made {done:,} of {rows:,} rows", flush=True)
                           if done % (1 << 27) < (1 << 23) else None)
    build_seconds = time.perf_counter() - started
    valid = criteo_like(args.valid_rows, seed=args.seed, device="cuda", first_row=args.big_rows)
    trainer = Trainer(_model(0), lr=args.lr, epochs=2, plan=plan, backend="triton", device="cuda", seed=args.seed)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    history = trainer.fit(source, valid)
    streamed = trainer.train_layout
    return {"name": "lr_larger_than_gpu", "source": "host_pinned", "ids": "int32", "rows": args.big_rows,
            "blocks": len(streamed.blocks), "bytes_per_epoch": streamed.bytes_per_epoch,
            "bytes_per_edge": streamed.bytes_per_epoch / source.meta.stats.nnz,
            "gpu_memory_bytes": torch.cuda.get_device_properties(0).total_memory, "budget_bytes": budget,
            "ms_per_epoch": 1000 * history[-1]["seconds"], "epoch_ms": [1000 * r["seconds"] for r in history],
            "copy_bound_ms": 1000 * streamed.bytes_per_epoch / (bandwidth * 1e9), "resident_ms": 0.0,
            "val_logloss": [r["valid_logloss"] for r in history],
            "peak_gpu_bytes": torch.cuda.max_memory_allocated(), "build_seconds": build_seconds}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=4_000_000)
    parser.add_argument("--valid-rows", type=int, default=400_000)
    parser.add_argument("--budget-gb", type=float, default=1.0)
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--lr", type=float, default=2.0)
    parser.add_argument("--fm-lr", type=float, default=0.5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--loss-runs", type=int, default=3, help="runs whose median validation loss an arm reports")
    parser.add_argument("--time-runs", type=int, default=5, help="runs whose median epoch time an arm reports")
    parser.add_argument("--big-rows", type=int, default=540_000_000, help="0: no larger-than-GPU run")
    parser.add_argument("--big-budget-gb", type=float, default=4.0)
    parser.add_argument("--disk-dir", default=None, help="where the block store is written (a temporary folder)")
    parser.add_argument("--disk-only", action="store_true",
                        help="only the arms streamed from disk (raw and zstd) and the resident ones")
    parser.add_argument("--out", default=os.environ.get("OUT"))
    args = parser.parse_args()
    from alac.runtime.movement.block_store import synthetic_pieces, write_block_store
    from alac.runtime.movement.layout import LayoutOptions

    bandwidth = pinned_gb_per_s()
    train, valid = synthetic_train_valid(args.rows, args.valid_rows, "cuda", args.seed)
    with tempfile.TemporaryDirectory(dir=args.disk_dir) as folder:
        def store_of(name, **options):
            return write_block_store(Path(folder) / name, synthetic_pieces(args.rows, seed=args.seed, device="cuda"),
                                     LayoutOptions(chunk_size=32), 1024 // 32, int(args.budget_gb * 2**30) // 4, "cuda",
                                     **options)

        # the raw store with 16-bit ids; the same zstd-compressed (alac.runtime.movement.block_codec), and
        # zstd-compressed with its ids as ranks within their field (what a store of these rows is by default)
        store = store_of("store", ids="narrow")
        disk = {"folders": {"": store.folder}, "read_gb_per_s": disk_read_gb_per_s(store)}
        store.close()
        sweep = ring_sweep(store.folder)
        disk["folders"]["_zstd"] = store_of("store_zstd", ids="narrow", codec="zstd").folder
        disk["folders"]["_zstd_field_ranks"] = store_of("store_zstd_ranks", codec="zstd").folder
        arms = [arm for k in (0, 16) for arm in run_model(k, train, valid, args, bandwidth, disk)]
    del train, valid
    torch.cuda.empty_cache()
    env = environment()
    payload = {"environment": env, "device": env["device"], "pinned_h2d_gb_per_s": bandwidth,
               "disk_read_gb_per_s": disk["read_gb_per_s"], "disk_ring_sweep": sweep, "rows": args.rows,
               "budget_gb": args.budget_gb,
               "arms": arms}
    report(payload, args)
    if args.big_rows:
        arms.append(big_run(args, bandwidth))
        report(payload, args)


def report(payload, args):
    env = payload["environment"]
    markdown = (f"Streamed against resident training ({env['device']}, {env['date']}; `PYTHONPATH=. python "
                f"benchmarks/streaming.py`): {args.rows:,} x 39 synthetic rows, async plans, budget "
                f"{args.budget_gb:g} GB.\n\n" + streaming_table(payload))
    print(markdown, flush=True)
    write("streaming", payload, markdown, args.out)


if __name__ == "__main__":
    main()
