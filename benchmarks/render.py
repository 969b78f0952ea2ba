"""BENCHMARKS.md, generated from benchmarks/results/*.json and benchmarks/not_kept.json, so that the
document shows exactly what the last runs measured.

    PYTHONPATH=. python benchmarks/render.py          (or: alac bench render)

A section per benchmark: what it measures, its command, the device, versions and date of the run,
and one short table. tests/benchmarks/test_render.py checks that BENCHMARKS.md is this output.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # run as a script: benchmarks.* importable

from benchmarks.block_codecs import codecs_table
from benchmarks.distributed_tables import tables as distributed_tables
from benchmarks.flow_tables import (
    fit_queue_table,
    floor_table,
    flow_pair_table,
    hot_table,
    optimizers_table,
    real_data_table,
    scaling_table,
    sweep_table,
    sync_resident_table,
    tiles_table,
    wide_factor_table,
)
from benchmarks.report import last, table
from benchmarks.rows_on_disk import disk_table

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
NOT_KEPT = ROOT / "benchmarks" / "not_kept.json"


def run_line(result):
    env = result.get("environment", {})
    parts = [env.get("device") or result.get("device", "device not recorded")]
    if env.get("triton"):
        parts.append(f"triton {env['triton']}")
    if env.get("torch"):
        parts.append(f"torch {env['torch']}")
    if env.get("date"):
        parts.append(env["date"][:10])
    return "Run: " + ", ".join(parts) + "."


def bullets(notes):
    """Notes under a section's tables, an item of one list each (no list without notes)."""
    return "\n\n" + "\n".join(f"- {note}" for note in notes) if notes else ""


def kept(optimizers):
    """The optimizers the auto race kept over the seeds: "sgd 8/10, adagrad 2/10"."""
    counts = {name: optimizers.count(name) for name in dict.fromkeys(optimizers)}
    return ", ".join(f"{name} {count}/{len(optimizers)}" for name, count in counts.items()) or "-"


def defaults_table(result):
    rows = []
    for r in result["results"]:
        metric = r["metric"]
        tuned = r.get("tuned")
        data = r["data"] + (f" (mean of {r['seeds']} seeds)" if r.get("seeds", 1) > 1 else "")
        rows.append([data, r["model"], metric, f"{r['defaults'][metric]:.4f}",
                     f"{tuned[metric]:.4f}" if tuned else "-",
                     " ".join(f"{k}={v}" for k, v in tuned["config"].items()) if tuned else "-",
                     kept(r["defaults"].get("optimizers", [])), "yes" if r.get("within_target") else "no"])
    text = table(["data", "model", "metric", "defaults", "tuned", "tuned config", "auto kept", "within target"], rows)
    for r in result["results"]:
        if "measured" in r:
            text += (f"\n\n{r['data']} {r['model']}: its defaults re-measured on {r['measured']['device']}, "
                     f"{r['measured']['date'][:10]} (`--update`), its sweep in the run above.")
        if "ridge" in r:
            text += (f"\n\n{r['data']}: FM with defaults RMSE {r['defaults']['rmse']:.4f}, scikit-learn Ridge on the "
                     f"one-hot ids {r['ridge']['rmse']:.4f} (alpha {r['ridge']['alpha']:g}).")
    return text


def layout_table(result):
    rows = [[device, f"{r['generate_s']:.3f}", f"{r['build_s']:.3f}", f"{r['build_again_s']:.3f}"]
            for device, r in result["results"].items()]
    return table(["device", "generate (s)", "layout build (s)", "again (s)"], rows)


def parse_table(result):
    threads = next(k for k in result["results"][0] if k.startswith("alac_") and k != "alac_1_threads_s")
    rows = [[f"{r['input']} ×{r['copies']} ({r['megabytes']:.0f} MB)", f"{r['megabytes'] / r['sklearn_s']:.0f}",
             f"{r['megabytes'] / r['alac_1_threads_s']:.0f}", f"{r['megabytes'] / r[threads]:.0f}",
             f"{r['first_load_layout_s']:.2f} / {r['cached_load_layout_s']:.3f}"] for r in result["results"]]
    n = threads.split("_")[1]
    return table(["input", "scikit-learn MB/s", "alac 1 thread MB/s", f"alac {n} threads MB/s",
                  "load_layout first / cached (s)"], rows)


def placement_table(result):
    """A row per access pattern, the table on the device and in host memory side by side."""
    by_key = {(a["op"], a["pattern"], a["row_floats"], a["placement"]): a for a in result["arms"]}
    rows = []
    for op, pattern, floats in dict.fromkeys((a["op"], a["pattern"], a["row_floats"]) for a in result["arms"]):
        device, host = by_key[op, pattern, floats, "device"], by_key[op, pattern, floats, "host"]
        rows.append([op, pattern, floats, f"{device['ms']:.2f}", f"{host['ms']:.2f}",
                     f"{host['ms'] / device['ms']:.1f}×", f"{device['g_accesses_per_s']:.3f}",
                     f"{host['g_accesses_per_s']:.3f}",
                     f"{device['gb_per_s']:.1f}", f"{host['gb_per_s']:.1f}"])
    return (table(["op", "ids", "floats per row", "device ms", "host ms", "host / device", "device G accesses/s",
                   "host G accesses/s", "device GB/s of rows", "host GB/s of rows"], rows)
            + f"\n\nPinned host → device copy: {result['copy_gb_per_s']:.1f} GB/s.")


def fields_table(result):
    runs = result.get("runs", [result["arguments"]])
    def run_of(part):
        return next((r for r in runs if part in r.get("parts", (part,))), runs[0])

    args, deep_args = run_of("synthetic"), run_of("deepfm")
    baselines = {"synthetic": "pytorch_per_field", "criteo_like": "pytorch_deepfm", "ipinyou": "pytorch_deepfm",
                 "criteo_like_ffm": "pytorch_ffm", "ipinyou_ffm": "alac_fm_one_field",
                 "criteo_tiny_ffm": "alac_fm_one_field"}
    rows = []
    for a in result["arms"]:
        data = a.get("data", "synthetic")
        base = next(b for b in result["arms"] if b["name"] == baselines[data] and b.get("data", "synthetic") == data)
        rows.append([data, a["name"], a["fields"], "-" if a["kernels_per_step"] is None else a["kernels_per_step"],
                     f"{a['samples_per_s'] / 1e3:.1f}", f"{a['samples_per_s'] / base['samples_per_s']:.2f}×",
                     f"{a['auc']:.4f}", f"{a['auc'] - base['auc']:+.4f}", f"{a['logloss']:.4f}",
                     f"{a['ms_per_epoch']:.0f}" if "ms_per_epoch" in a else "-", a.get("best_epoch", "-")])
    compiled = "" if not args.get("no_compile") else " The torch.compile arm was left out (`--no-compile`)."
    deepfm = "" if not deep_args.get("deepfm_rows") else (
        f" DeepFM arms: {deep_args['deepfm_epochs']:g} epochs of each set ({deep_args['deepfm_rows']:,} "
        "Criteo-shaped rows), "
        "scored on its held-out rows; each compared with the PyTorch arm of its data.")
    backends = " The alac arms' tables run their reference programs (torch gathers and index_add)" + (
        ", the *_kernels arms' and alac_packed_graphed's their generated kernels (alac.codegen.bag_kernels, "
        "alac.nn's default on a GPU)."
        if any(a["name"].endswith("_kernels") for a in result["arms"]) else " (no generated kernels for them yet).")
    captured = sorted({f"{a['name']} ({a['data']})" for a in result["arms"] if a.get("cuda_graphs")})
    graphed = "" if not captured else (f" Steps replayed from CUDA graphs (alac.nn.GraphedStep): "
                                       f"{', '.join(captured)}; kernels per step counts a replay's kernels.")
    return (f"{args['fields']} fields, batches of {args['batch_size']}, {args['steps']} timed steps, scored on "
            f"{args['valid_rows']:,} held-out rows.{compiled}{deepfm}{backends}{graphed}\n\n"
            + table(["data", "arm", "fields", "kernels per step", "k samples/s", "vs base", "AUC",
                     "AUC − base", "logloss", "ms/epoch", "best epoch"], rows)
            + "\n\nbase: the arm each row is compared with, by data: one nn.EmbeddingBag per field (synthetic), "
            "plain PyTorch DeepFM (criteo_like, ipinyou) and FFM (criteo_like_ffm), FM trained as the FFM "
            "(ipinyou_ffm, criteo_tiny_ffm: test logloss and AUC at the best validation epoch).")


# the duality gaps whose time an SCD arm reports (benchmarks/scd.py)
def scd_table(result):
    from benchmarks.scd_tables import scd_table as tables  # it imports this module's table()

    return tables(result)


def _kernel_schedule(arm):
    """How a HybridHash arm's sync kernels ran: beside the side stream on the programs they left it
    (overlapped) or on every multiprocessor (serial), as the planner chose."""
    if arm.get("overlapped") is None:
        return "-"
    return f"overlapped ({arm['programs']} programs)" if arm["overlapped"] else "serial"


def tables_over_budget_table(result):
    args, rows, notes, breakdowns = result["arguments"], [], [], []
    # FAE's other schedules where every input is hot have nothing to schedule: R(50) stands for them
    unscheduled = [a for a in result["arms"] if a["name"].startswith("fae ") and a["name"] not in ("fae R(50)",
                                                                                                   "fae trainer")
                   and a["hot_input_share"] == 1.0]
    left_out = "" if not unscheduled else (f" Left out: {len(unscheduled)} rows of FAE's other schedules where "
                                           "every input is hot (nothing cold to schedule; figures in the JSON).")
    for arm in (a for a in result["arms"] if a not in unscheduled):
        reference = next(a for a in result["arms"] if a["name"] == "all_gpu" and a["zipf"] == arm["zipf"])
        baseline = next(a for a in result["arms"] if a["name"] == "pytorch_host_table" and a["zipf"] == arm["zipf"])
        rows.append([arm["zipf"], arm["name"], arm["budget_mb"] or "-", f"{arm['samples_per_s'] / 1e6:.2f}",
                     f"{arm['samples_per_s'] / baseline['samples_per_s']:.1f}×",
                     f"{reference['samples_per_s'] / arm['samples_per_s']:.2f}×", f"{arm['hot_input_share']:.3f}",
                     "-" if arm["hit_ratio"] is None else f"{arm['hit_ratio']:.3f}",
                     "-" if arm["h2d_bytes"] is None else f"{arm['h2d_bytes'] / 1e9:.2f}",
                     f"{arm['auc']:.4f}", f"{arm['auc'] - reference['auc']:+.4f}", f"{arm['logloss']:.4f}",
                     _kernel_schedule(arm)])
        if "breakdown" in arm:
            b = arm["breakdown"]
            breakdowns.append(f"at {arm['budget_mb']} MB, Zipf {arm['zipf']}: {b['serialized_epoch_s']:.2f} s, of "
                              f"which kernels {b['kernels_s']:.2f} s, loads into the cache {b['load_s']:.2f} s, "
                              f"write-backs {b['store_s']:.2f} s, re-ranks {b['rerank_s']:.3f} s, bookkeeping the "
                              f"rest ({b['segments']} segments so far, {b['rows_carried']:,} rows carried between "
                              "staging halves)")
    if breakdowns:
        notes.append("HybridHash's epoch timed in parts with its side stream's overlap taken away, "
                     + "; ".join(breakdowns) + ".")
    if (result.get("big") or {}).get("gpu_memory_bytes"):
        b = result["big"]
        scale = b.get("arguments", args)["big_scale"]
        notes.append(f"Larger than the GPU (`--big-scale {scale}`, through the Trainer): {b['feature_rows']:,} rows, "
                     f"{b['table_bytes'] / 2**30:.1f} GiB of FM k = {b.get('k', 16)} params "
                     f"and AdaGrad state in pinned host memory against the GPU's "
                     f"{b['gpu_memory_bytes'] / 2**30:.1f} GiB; {b['training_rows']:,} training rows, a "
                     f"{b['budget_mb'] / 1024:g} GiB budget; {b['samples_per_s'] / 1e6:.2f} M samples/s in epoch 2 "
                     f"against the planner's {b['predicted_samples_per_s'] / 1e6:.2f} M predicted "
                     f"({b['samples_per_s'] / b['predicted_samples_per_s']:.2f}×), hit ratio {b['hit_ratio']:.3f} "
                     f"(predicted {b['forecast']['hit_ratio']:.3f}), validation AUC {b['auc']:.4f}, logloss "
                     f"{b['logloss']:.4f}; epochs {' / '.join(f'{s:.1f}' for s in b['epoch_seconds'])} s, set-up "
                     f"{b['setup_seconds']:.0f} s, peak GPU memory {b['peak_gpu_bytes'] / 2**30:.1f} GiB "
                     f"(measured {b['environment']['date']}).")
    chosen = {zipf: [(a["budget_mb"], a["planner_mode"]) for a in result["arms"]
                     if a["zipf"] == zipf and a["name"] == "hybrid_hash" and "planner_mode" in a]
              for zipf in sorted({a["zipf"] for a in result["arms"]})}
    if any(chosen.values()):
        notes.append("The Trainer's planner (FAE or HybridHash by their forecast row traffic, FAE's pure batches "
                     "costed per edge): " + "; ".join(
            f"at Zipf {zipf} " + ", ".join(f"{mode} at {budget} MB" for budget, mode in modes)
            for zipf, modes in chosen.items() if modes)
                     + (f" (recomputed on the same data with the current cost model, "
                        f"{result['planner_environment']['date']})" if "planner_environment" in result else "") + ".")
    if result.get("missing"):
        notes.append(f"Not measured with the current code: {result['missing']}.")
    header = ["zipf", "arm", "budget MB", "M samples/s", "vs host table", "all-GPU / arm", "hot input share",
              "hit ratio", "H2D GB/epoch", "AUC", "AUC − all-GPU", "logloss", "cache kernels"]
    return (f"{args['rows']:,} training rows, FM k = 16 with AdaGrad ({result['row_bytes']} bytes per row), sync "
            f"batches of {args['batch_size']}, {args['epochs']} epochs; samples/s of the "
            f"{'last epoch' if args['epochs'] <= 2 else 'mean epoch after the first'} (the host-table "
            f"baseline: {args['baseline_batches']} batches, its AUC after them).{left_out}\n\n" + table(header, rows)
            + bullets(notes))


def streaming_table(result):
    def bound(arm):
        return max(arm.get("copy_bound_ms", 0.0), arm.get("read_bound_ms", 0.0))

    arms = result["arms"]
    rows = [[a["name"], a["source"], a.get("ids", "-"), a.get("blocks", "-"),
             f"{a['bytes_per_edge']:.2f}" if "bytes_per_edge" in a else "-", f"{a['ms_per_epoch']:.2f}",
             f"{bound(a):.2f}" if bound(a) else "-", f"{a['resident_ms']:.2f}" if a["resident_ms"] else "-",
             f"{a['ms_per_epoch'] / max(bound(a), a['resident_ms']):.2f}",
             f"{a['peak_gpu_bytes'] / 2**30:.2f}" if "peak_gpu_bytes" in a else "-",
             " / ".join(f"{v:.4f}" for v in a["val_logloss"])] for a in arms]
    by_name = {a["name"]: a for a in arms}
    narrow = [(name[:-len("_int32")], by_name[name]["ms_per_epoch"] / by_name[name[:-len("int32")] + "narrow"]
               ["ms_per_epoch"]) for name in by_name if name.endswith("_int32") and name[:-5] + "narrow" in by_name]
    big = [a for a in arms if "rows" in a]
    raw = {a["name"]: a for a in arms if a.get("source") == "disk" and not a.get("codec")}
    zstd = [(a["name"], a["ids"], raw[name]["ms_per_epoch"] / a["ms_per_epoch"],
             raw[name]["stored_bytes"] / a["stored_bytes"])
            for a in arms if a.get("codec") for name in raw if a["name"].startswith(name + "_")]
    return (table(["arm", "source", "ids", "blocks", "bytes/edge", "ms/epoch", "bound ms (copy or disk read)",
                   "resident ms", "epoch / max(bound, resident)", "peak GPU GiB", "val logloss per epoch"], rows)
            + f"\n\nPinned host → device copy: {result['pinned_h2d_gb_per_s']:.1f} GB/s; "
            + (f"block store read from disk: {result['disk_read_gb_per_s']:.2f} GB/s"
               + "".join(f"{'; by (ring depth, readers)' if i == 0 else ','} ({r['ring_depth']}, {r['readers']}) "
                         f"{r['gb_per_s']:.2f}" for i, r in enumerate(result.get("disk_ring_sweep", ())))
               + ". " if "disk_read_gb_per_s" in result else "")
            + "".join(f"Narrow ids against int32 ({name}): {ratio:.2f}x faster. " for name, ratio in narrow)
            + "".join(f"{name} ({ids} ids, stored {stored:.2f}x smaller than the raw store): {ratio:.2f}x the raw "
                      f"store's speed. " for name, ids, ratio, stored in zstd)
            + "".join(f"{a['name']}: {a['rows']:,} rows, {a['bytes_per_epoch'] / 2**30:.1f} GiB per epoch on a GPU "
                      f"of {a['gpu_memory_bytes'] / 2**30:.1f} GiB, budget {a['budget_bytes'] / 2**30:.0f} GiB. "
                      for a in big)).rstrip()


def benchmark_table(name, function="arms_table"):
    """The table of a benchmark that renders its own (benchmarks/<name>.py's `function`), imported when
    it renders: those modules import this one's table()."""
    def render_table(result):
        import importlib

        return getattr(importlib.import_module(f"benchmarks.{name}"), function)(result)
    return render_table


# (result file, title, what it measures, command, table)
SECTIONS = [
    ("defaults", "Defaults that learn",
     "`alac train` with no options against the best of a sweep (optimizers sgd, adagrad, ftrl, adam × 3 learning "
     "rates; FM also k 8/16 × L2 0/0.01; chosen on validation), test metric, on the shared real data sets.",
     "PYTHONPATH=. python benchmarks/defaults.py", defaults_table),
    (("flow_lr", "flow_fm"), "LR and FM k = 16, 4M × 39 synthetic rows: alac against PyTorch",
     "Epoch time and validation logloss after 10 epochs of every execution arm, side by side in one process "
     "(PyTorch: idiomatic nn.EmbeddingBag(sparse=True) + SGD); LR and FM in a process each. Time to target: "
     "wall seconds until the validation logloss is within 0.002 of the sync b1024 arm's last (sync over batch "
     "sizes 256-16,384 against async; every epoch's loss in the JSON).",
     "PYTHONPATH=. python benchmarks/flow.py --model lr --baseline-epochs 2 --sync-batches 256 4096 16384` and "
     "`PYTHONPATH=. python benchmarks/flow.py --model fm --k 16 --lr 0.5 --baseline-epochs 2 --sync-batches 256 "
     "4096 16384", flow_pair_table),
    (("flow_fm_k32", "flow_fm_k64"), "FM k = 32 and 64",
     "The sync and async arms at 32 and 64 factors, each against the floor of its own accesses (a floor below the "
     "epoch of an arm without a hot segment: its flat atomic kernel queues on the most frequent features' lines "
     "all at once, which the kernel's spread in time does not).",
     "PYTHONPATH=. python benchmarks/flow.py --model fm --k 32 --lr 0.5 --arms alac_fused_sync_b1024,alac_async,"
     "alac_async_hot` and `PYTHONPATH=. python benchmarks/flow.py --model fm --k 64 --lr 0.5 --baseline-epochs 1 "
     "--arms pytorch_embeddingbag_b1024,alac_fused_sync_b1024,alac_async,alac_async_hot", wide_factor_table),
    ("async_floor", "What the async kernels could reach: flat per-edge traffic",
     "Flat kernels that make only an async epoch's per-edge accesses (gathers, atomic additions), beside the "
     "generated kernels: the access floor of per-edge SGD; LR's kernels with Nsight Compute's counters (ncu, clocks "
     "left alone).",
     "PYTHONPATH=. python benchmarks/async_floor.py --counters", floor_table),
    ("sync_resident", "Sync epochs at batch 1024",
     "Exact mini-batch SGD (grid-barrier epochs with edge updates) of LR and FM k = 16 in the forms built for it: the "
     "most frequent features' ids in frequency order or spread over cache lines (`Plan.spread_lines`), the epoch "
     "kernel's general form (edge gradients through the batch's edge buffer) or resident chunks (a program's one "
     "chunk a batch held in registers, in one whole-row tile: `Plan.resident_tiles`), and resident chunks that read "
     "the next batch's chunk before the second barrier (`Plan.prefetch_chunks`: the default, with spread lines, "
     "resident chunks and C = 8), at chunk sizes 16 and 8; and a hand-written LR kernel of that last form. Same "
     "batches and results in every form of a row.",
     "PYTHONPATH=. python benchmarks/sync_resident.py", sync_resident_table),
    ("optimizers", "Optimizers inside the kernels",
     "Epoch cost and validation logloss of every optimizer, sync and async, at its default learning rate "
     "(SGD at the tuned one).", "PYTHONPATH=. python benchmarks/optimizers.py", optimizers_table),
    ("flow_sweep", "Plan sweep",
     "Chunk size, hot segment and flush period swept for LR and FM; the fastest run and the best-logloss run.",
     "PYTHONPATH=. python benchmarks/flow_sweep.py", sweep_table),
    ("flow_tiles", "FM's async edge tiles against their floors",
     "Async FM (the cost model's hot segment) at k = 16, 32 and 64 over chunk sizes 8, 16 and 32, [S, C] edge tiles "
     "of 2,048 to 16,384 values with the factor block and two warp counts, each against flat kernels of its own "
     "accesses (alac.runtime.planning.roofline); the planner's automatic tile and the fastest.",
     "PYTHONPATH=. python benchmarks/flow_sweep.py --tiles 16,32,64 --epochs 4", tiles_table),
    ("flow_hot", "Async FM's hot segment against the L2",
     "Async FM (C = 32, flush every 8 chunks) at k = 16, 32 and 64 with H hot features summed in each of the 528 "
     "programs' own rows: the cost model's H, the planner's (its sums within planner.HOT_SUMS_L2_SHARE of the L2) "
     "and H from 16,384 / 4k to 32,768 / k; each cell H (the programs' sums in MB): ms an epoch (× the floor of "
     "its accesses), validation logloss after 4 epochs.",
     "PYTHONPATH=. python benchmarks/flow_sweep.py --hot 16,32,64 --epochs 4", hot_table),
    ("flow_lr_scaling", "Async LR from 1M to 64M rows", "Per-non-zero time of one async epoch, alone and queued.",
     "PYTHONPATH=. python benchmarks/flow.py --model lr --scaling 1000000,4000000,16000000,64000000",
     scaling_table),
    ("fit_queue", "Trainer.fit's steady state from 1M to 64M rows",
     "Queued epochs of a long fit (at least 2 s per measurement), 3 placements of the data per size.",
     "PYTHONPATH=. python benchmarks/fit_queue.py --placements 3", fit_queue_table),
    ("flow_lr_real_data", "Sync and async LR on real data", "Test AUC of the two semantics at the same learning rate.",
     "PYTHONPATH=. python benchmarks/flow.py --model lr --real-data ../shared/data", real_data_table),
    ("streaming", "Streamed training, 4M × 39 synthetic rows from pinned host memory",
     "Async LR and FM k = 16 trained block by block (a 1 GB budget cut into 2, 4 or 8 blocks' worth) with the "
     "next blocks' copies overlapping the kernels, and without overlap, ids moved as int32 or in the narrow "
     "16-bit form (decoded on the device), from pinned host memory or from a block store on disk, against the "
     "resident layout; ms/epoch the median of five runs of four epochs queued back to back, validation loss "
     "per epoch the median of three runs (seeds 0, 1, 2: their own initial parameters and orders).",
     "PYTHONPATH=. python benchmarks/streaming.py", streaming_table),
    ("streaming_disk", "Block stores from disk: raw and zstd-compressed block files",
     "The arms streamed from a block store on disk (opened with page_cache=False: every range read is dropped "
     "from the page cache at once, so every epoch and the next one's blocks read ahead come from the disk) against "
     "the resident layout: the raw store with 16-bit ids (as stores were written before field ranks), the same "
     "zstd-compressed (level 1, frames of 4 MiB as byte planes, decompressed on a shared pool of threads, the "
     "planes undone on the GPU), and zstd with the ids as ranks within their field (a store of these rows by "
     "default); every block file read by the disk threads at once, a range each. ms/epoch the median of three "
     "runs of four epochs queued back to back, validation loss of one run.",
     "PYTHONPATH=. python benchmarks/streaming.py --disk-only --big-rows 0 --loss-runs 1 --time-runs 3",
     streaming_table),
    ("block_codecs", "Block ids on disk: wire forms against the entropy of an id given its field",
     "The ids of 1M synthetic Criteo-shaped rows (39M edges) re-indexed by frequency as a block store does, in "
     "the narrow wire form block stores move and transformed before zstd (FRAME_BYTES frames); bytes per edge "
     "count the ids alone (a block also holds its labels and chunk bounds); decompression on one core of the "
     "machine named (a CPU run: its bytes are exact, its speeds this CPU's).",
     "PYTHONPATH=. python benchmarks/block_codecs.py --out benchmarks/results", codecs_table),
    ("placement_access", "Rows in host memory against rows on the device",
     "Gathers and atomic additions of Triton kernels on a table in pinned host memory (mapped pointers) and on the "
     "device: 16M accesses to 16M rows, random and sequential ids, 1 and 16 floats per row.",
     "PYTHONPATH=. python benchmarks/placement_access.py", placement_table),
    ("placement", "Tables over a GPU budget: HybridHash and FAE",
     "The Kaggle-shaped synthetic set (the Criteo Kaggle set's 26 categorical fields, 33.8M feature rows, Zipf ids"
     " per field) with the model's rows in pinned host memory and a GPU budget for hot rows: HybridHash (mixed "
     "batches; a hot store of 3/4 of the budget re-ranked every 1024 batches, 1/4 staging in two halves for "
     "alternate segments' misses, gathered and written back by GPU kernels over the host table's UVA mapping on a "
     "side stream while the previous segment trains on all but 4 of the multiprocessors (a batch's chunks in as many "
     "rounds as on all of them), or between segments with the kernels on all of them, whichever the planner timed "
     "faster: the table's cache kernels column; a segment's rows found by one kernel of bit marks), FAE (pure"
     " hot and cold batches, the hot rows from the threshold search; cold batches on the host table through mapped"
     " pointers; shuffle schedules R(100), R(50), R(1) and dynamic), PyTorch's host-table hybrid (FAE's baseline: "
     "the embeddings in pinned host memory, looked up and updated by sparse AdaGrad on the CPU, the FM on the GPU)"
     " and all rows on the GPU. FAE swaps copy the hot rows changed since the last swap (the whole hot set in the "
     "arm that says so).",
     "PYTHONPATH=. python benchmarks/placement.py --budgets-mb 256 --zipfs 1.1,1.2", tables_over_budget_table),
    ("rows_on_disk", "Rows on disk: a model over the GPU and the host memory budget",
     "FM k = 16 with AdaGrad through the Trainer on 10M rows of the Kaggle-shaped set (Zipf 1.1; 33.8M rows of 76 "
     "bytes: a 2.6 GB table), sync batches of 4096, three epochs: every row on the GPU, a HybridHash cache of a "
     "256 MiB GPU budget over the table in pinned host memory, and the same cache over memory-mapped files under a "
     "1 GiB host memory budget (rows crossing through the CPU); peak anon: the process's resident anonymous memory "
     "while it trained (the table's file pages are the OS's cache, not the process's).",
     "PYTHONPATH=. python benchmarks/rows_on_disk.py", disk_table),
    ("fields", "Many feature fields: one nn.EmbeddingBag per field against packed tables",
     "A synthetic set of many one-hot fields (dims from 4, 8, 16, 32; Zipf ids; planted labels): every field's "
     "embedding into the same MLP, one `nn.EmbeddingBag` per field (eager and under `torch.compile`, sparse "
     "AdaGrad) against `alac.nn.PackedEmbeddingBags` (one pack per dim, AdaGrad inside backward); kernels per "
     "training step counted by torch.profiler.",
     "PYTHONPATH=. python benchmarks/fields.py --parts synthetic --out A; the same with --parts deepfm,ffm --out B; "
     "then --merge A/fields.json B/fields.json", fields_table),
    ("rank_faults", "A rank that fails under torchrun",
     "Two ranks train LR (parameters synchronised every batch) under torchrun; once training runs, one rank is "
     "killed or stopped: seconds until the other rank has exited (its watch names the failed rank) and until "
     "torchrun has (it gives a stopped rank 30 s after SIGTERM before it kills it), with the survivor's line.",
     "PYTHONPATH=. python benchmarks/rank_faults.py", benchmark_table("rank_faults", "report")),
    ("deep_defaults", "The field models' defaults on real data",
     "`alac train --model ffm|deepfm|wide_deep` with no options (the tables' AdaGrad step 1 / the sparse fields, "
     "at most 0.5) against a sweep of --lr (0.5 to 0.02; tuned: the lowest mean best validation logloss, 10 % of "
     "the training rows): MovieLens ratings above 3.5 as clicks (user and movie fields, 90/10 split), iPinYou "
     "(fields by position; test AUC means of 10 seeds), criteo-tiny (39 fields, 100 validation rows: whether a "
     "step blows the logits up; its validation logloss), with LR's and FM's defaults on the same rows.",
     "PYTHONPATH=. python benchmarks/deep_defaults.py --sets ipinyou --out A; the same with --sets "
     "'ml-latest-small liked,criteo-tiny' --out B; then --merge A/deep_defaults.json B/deep_defaults.json",
     benchmark_table("deep_defaults", "report")),
    ("scd", "Stochastic coordinate descent to a duality gap",
     "Ridge on a webspam-shaped set (262,938 × 680,715, power-law columns, unit rows) by alac's SCD kernels, "
     "primal and dual (and the wild, non-atomic control), the float64 sequential solver, scikit-learn's Ridge and "
     "Snap ML's GPU solver, primal and dual (alac's seconds include its setup, the data onto the GPU); dual "
     "logistic and hinge on a9a and w8a beside LIBLINEAR's test AUC, ridge on 20news, CoCoA's virtual workers "
     "(averaging, TPA-SCD's adaptive line search, the plane search of alac.runtime.solvers.cocoa); "
     "TPA-SCD's Criteo problem (dual ridge, 200M × 75M Criteo-shaped) against its bytes and flat access kernels.",
     "PYTHONPATH=. python benchmarks/scd.py --parts webspam --epochs 200; the same with --parts real; with --parts "
     "workers --device cpu; with --parts criteo --epochs 30",
     scd_table),
    ("distributed", "Several GPUs: data-parallel flow training and CoCoA SCD",
     "Async flow LR and FM k = 16 on the synthetic Criteo-shaped sets, 5 epochs (LR at lr 2, FM at 0.5) with the "
     "cost model's plan, on one GPU (the other waiting) and on the ranks, each its share of the rows, the "
     "parameters' changes all-reduced once an epoch: time (the median of epochs queued back to back, and the "
     "speed-up with the validation set evaluated after each epoch), speed-up and traffic of the default "
     "aggregation (sequential: each row's "
     "summed changes scaled to what sequential SGD would make of them), Δ the validation logloss against one "
     "GPU's after the same epochs, per aggregation (rows: each feature row's changes averaged over the ranks "
     "that changed it); the tables replicated, sharded row-wise over the ranks (alac.runtime.rows.sharded) "
     "or hybrid (the hot segment replicated, the cold rows sharded), where a run has them. SCD: CoCoA over "
     "the ranks against the "
     "virtual workers (float64 sequential local solvers over gloo, 1/32 of the webspam-shaped set, λ 1e-3), and "
     "TPA-SCD's Criteo problem (dual ridge, λ 1e-3, 200M × 75M) to gap 1e-6, its rows split, TPA-SCD's adaptive γ "
     "and the plane search (_subspace); the adaptive arm ran first and its first epochs hold the kernels' "
     "compilation (its later epochs take the plane search's 363 ms).",
     "PYTHONPATH=. torchrun --nproc-per-node 2 benchmarks/distributed.py", distributed_tables),
    ("distributed_1gpu", "One GPU under torchrun: epochs queued against epochs validated one by one",
     "The flow arms' one-GPU fits on 64M synthetic Criteo-shaped rows: five epochs queued back to back (what fit "
     "does without validation) and five with the validation set evaluated after each.",
     "PYTHONPATH=. torchrun --nproc-per-node 1 benchmarks/distributed.py --parts flow --flow-rows 64000000 "
     "--models lr,fm16", distributed_tables),
    *((f"distributed_{world}gpu", f"Scaling over {world} GPUs",
       f"The flow arms (LR and FM k = 16, the sequential aggregation) on the first 1, 2, ... {world} ranks, each "
       f"making only its share of the 256M rows, and the SCD arms over {world} ranks: TPA-SCD's Criteo-shaped dual "
       "problem and one 4× larger in rows and columns (the first SCD arm's first epochs hold the kernels' "
       "compilation); the placement run: FM k = 16 with AdaGrad (lr 0.1, batch 1024) on 64M rows of the "
       "Kaggle-shaped set with its cardinalities ×63 (2.1 billion feature rows, more than one GPU holds), "
       "each rank making its 16M, the tables left to auto (hybrid: the ranks' smallest hot segment "
       "replicated, the cold rows sharded), 2 epochs (the first holds the kernels' compilation; most "
       "validation ids are rare at this scale, so its logloss is a sanity figure, not a quality one).",
       f"PYTHONPATH=. torchrun --nproc-per-node {world} benchmarks/distributed.py --parts flow --models lr "
       f"--all-ranks-arms '' --gpus {' '.join(str(w) for w in (2, 4, 8) if w < world)} --own-rows --flow-rows "
       "256000000`, the same with `--models fm16`, `--parts scd --own-rows --criteo-scale 4`, and "
       "`PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True` with `--parts placement --placement-scale 63",
       distributed_tables) for world in (4, 8)),
    ("deep_ranks", "DeepFM over two GPUs: the tables across ranks",
     "DeepFM k = 16 (MLP 256, 128) on 4M synthetic Criteo-shaped rows (39 one-hot fields, planted FM labels), "
     "batch 4096, 3 epochs: DeepTrainer on one GPU (its steps replayed from CUDA graphs, and launched one by one), "
     "and over both, each rank half of every 4096-row step (measured before `--batch-size` became the rows of each "
     "rank, DDP's convention; not yet re-measured), the tables replicated, sharded row-wise or hybrid "
     "(alac.nn.ranked: rows fetched from their owners, every entry's change sent where its row is held; the steps "
     "replayed from CUDA graphs); PyTorch DDP with one `nn.Embedding` of sparse gradients (all-gathered: NCCL has "
     "no sparse all-reduce) and Adagrad on 1M of the rows. samples/s: training rows over the median epoch; "
     "validation s: the median epoch's validation and set-up.",
     "PYTHONPATH=. torchrun --nproc-per-node 2 benchmarks/deep_ranks.py", benchmark_table("deep_ranks")),
    ("deep_host_tables", "DeepFM beyond the GPU's memory: its tables and training rows in host memory",
     "DeepFM k = 16 (MLP 256, 128) on 4M rows of the Kaggle-shaped set (26 fields of Zipf 1.1 ids, 33.8M feature "
     "rows: 2.6 GB of tables, planted FM labels), batch 4096, 3 epochs: everything on the GPU, against the "
     "tables' rows in host memory with the most-read ones cached on the GPU at budgets of a share of the tables' bytes "
     "(alac.nn.host_cached: a step's other rows staged over their mapped addresses, stepped on the GPU and written "
     "back, the steps replayed from CUDA graphs), the training rows in host memory (an epoch's parts gathered by "
     "the GPU over their mapped addresses), and both; PyTorch with its `nn.Embedding` table and Adagrad in host "
     "memory (sparse gradients), the MLP on the GPU, on 200,000 rows (its AUC is of fewer rows).",
     "PYTHONPATH=. python benchmarks/deep_host_tables.py --rows 4000000 --scale 1 --epochs 3 --budgets "
     "0.5,0.2,0.1", benchmark_table("deep_host_tables")),
    ("fm_mcmc", "Factorization machines by MCMC and ALS against myFM",
     "MovieLens latest-small (random 90/10 split, seed 0) ratings and the same ratings as classes (liked: above "
     "3.5), iPinYou's clicks: alac's MCMC (probit for classes) and ALS against myFM's Gibbs sampler at the same "
     "rank (8), iterations and kept samples (200 and 150; 1000 and 800 where the row says), and alac's SGD FM "
     "with its defaults; seconds per MCMC "
     "iteration on power-law synthetic ratings (alac.data.synthetic.ratings_like) on the GPU and the CPU "
     "against myFM's on the CPU.",
     "PYTHONPATH=. python benchmarks/fm_mcmc.py --parts quality --out A; ... --parts quality --tasks liked "
     "--iterations 1000 --burn-in 200 --out D; ... --parts speed --sizes 100000,10000000 --out B; ... --parts speed "
     "--sizes 100000000 --speed-iterations 2 --out C; then --merge A/fm_mcmc.json D/fm_mcmc.json B/fm_mcmc.json "
     "C/fm_mcmc.json", benchmark_table("fm_mcmc")),
    ("pack_interleaving", "Packed tables side by side: PICASSO's K-interleaving by Eq. 3",
     "benchmarks/fields.py's 200 fields (dims 4, 8, 16 and 32: four packs, Zipf 1.1 ids, MLP 256, 128), 200 steps "
     "on the tables' generated kernels: the packs in turn against the packs of each Eq. 3 group (parameters of a "
     "step within one wave of the GPU's programs) side by side on streams of their own (alac.nn.PackedEmbeddingBags' "
     "default inside a CUDA graph; eagerly the packs run in turn).",
     "PYTHONPATH=. python benchmarks/pack_interleaving.py", benchmark_table("pack_interleaving")),
    ("dp_aggregation", "How data-parallel ranks' changes combine",
     "Two gloo ranks on the CPU with the reference backend (an async plan runs there as exact sequential SGD, "
     "chunk after chunk), each training half the rows and synchronising once an epoch, against one process on "
     "all of them: LR on 400,000 synthetic Criteo-shaped rows at lr 2, FM k = 8 on 200,000 at lr 0.5, "
     "validated on 50,000.", "PYTHONPATH=. python benchmarks/dp_aggregation.py --out benchmarks/results",
     benchmark_table("dp_aggregation", "report")),
    ("layout_build", "Layout build, 4M × 39 synthetic rows", "Generating and laying out the data on the CPU and GPU.",
     "PYTHONPATH=. python benchmarks/layout_build.py", layout_table),
    ("parse_speed", "Parsing LIBSVM text",
     "The shared a9a and 20news files repeated to ≥ 200 MB, parsed by scikit-learn's load_svmlight_file and by "
     "alac (results checked equal); then load_layout first and from its disk cache.",
     "PYTHONPATH=. python benchmarks/parse_speed.py --repeats 2", parse_table),
]


def headline_table():
    """The README's table: PyTorch against alac's default sync and async plans (flow.py's arms)."""
    rows = []
    for name, model, sync_arm in (("flow_lr", "LR", "alac_fused_sync_b1024"),
                                  ("flow_fm", "FM, k = 16", "alac_fused_sync_b1024")):
        arms = {a["name"]: a for a in json.loads((RESULTS / f"{name}.json").read_text())["arms"]}
        baseline = arms["pytorch_embeddingbag_b1024"]

        def cell(arm, ratio=True):
            text = f"{arm['ms_per_epoch']:,.{0 if arm is baseline else 1}f} ms"
            if ratio:
                text += f" ({baseline['ms_per_epoch'] / arm['ms_per_epoch']:,.0f}×)"
            return f"{text}, {last(arm['val_logloss']):.4f}"

        rows.append([model, cell(baseline, False), cell(arms[sync_arm]), cell(arms["alac_async_hot"])])
    return table(["model", "PyTorch `nn.EmbeddingBag` + SGD, batch 1024",
                  "alac sync (exact mini-batch SGD, batch 1024)", "alac async (lock-free, hot segment)"], rows)


def render():
    lines = ["# Benchmarks", "",
             "Generated by `benchmarks/render.py` from `benchmarks/results/*.json` (what the last run of each "
             "benchmark measured, every arm side by side in one process); do not edit by hand. Each benchmark "
             "writes its JSON (device, versions, every figure) with `--out DIR` or `$OUT` into DIR, else into "
             "`benchmarks/results/`. The last table: what was measured, then left out of the code (the code is "
             "in the repository's history).", ""]
    for names, title, what, command, render_table in SECTIONS:
        # a section of one result, or (a tuple of names) of several side by side
        paths = [RESULTS / f"{name}.json" for name in ((names,) if isinstance(names, str) else names)]
        if not all(path.is_file() for path in paths):
            continue
        results = [json.loads(path.read_text()) for path in paths]
        runs = "Run: " + "; ".join(dict.fromkeys(run_line(result)[len("Run: "):-1] for result in results)) + "."
        lines += [f"## {title}", f"{what} `{command}`. {runs}", "",
                  render_table(results[0] if isinstance(names, str) else results), ""]
    not_kept = json.loads(NOT_KEPT.read_text())
    lines += ["## Tried and not kept",
              table(["what", "figure", "why not"], [[n["what"], n["figure"], n["why"]] for n in not_kept]), ""]
    return "\n".join(lines)


def main():
    target = ROOT / "BENCHMARKS.md"
    target.write_text(render())
    print(f"wrote {target}", file=sys.stderr)


if __name__ == "__main__":
    main()
