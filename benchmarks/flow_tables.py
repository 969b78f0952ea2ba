"""The tables of the flow benchmarks' sections of BENCHMARKS.md (flow.py, flow_sweep.py,
optimizers.py, sync_breakdown.py, async_floor.py, fit_queue.py), one function per result."""

from __future__ import annotations

from benchmarks.report import last, table


def wide_factor_table(results):
    """flow.py's FM runs at k = 32 and 64, a row per k and arm, each against the floor of its accesses."""
    rows = []
    for result in results:
        arms = result["arms"]
        baseline = next((a["ms_per_epoch"] for a in arms if a["name"] == "pytorch_embeddingbag_b1024"), None)
        for a in arms:
            floor = (a.get("roofline") or {}).get("floor_ms")
            rows.append([str(result["arguments"]["k"]), a["name"], f"{a['ms_per_epoch']:.2f}",
                         f"{baseline / a['ms_per_epoch']:,.0f}×" if baseline else "-",
                         f"{a['ms_per_epoch'] / floor:.2f}× ({floor:.2f} ms)" if floor else "-",
                         f"{last(a['val_logloss']):.4f}"])
    return table(["k", "arm", "ms / epoch", "vs PyTorch b1024", "× its floor", "val logloss"], rows)


def flow_pair_table(results):
    """flow.py's LR and FM k = 16 runs side by side, a row per arm (their arms are the same); time to
    target: the wall clock until the validation logloss is within 0.002 of the sync b1024 arm's last."""
    columns = []
    for result in results:
        arms = {a["name"]: a for a in result["arms"]}
        baseline = arms.get("pytorch_embeddingbag_b1024")
        columns.append({name: [f"{a['ms_per_epoch']:.2f}",
                               f"{baseline['ms_per_epoch'] / a['ms_per_epoch']:,.0f}×" if baseline else "-",
                               f"{last(a['val_logloss']):.4f}",
                               "-" if a.get("time_to_target_s") is None else f"{a['time_to_target_s']:.2f}"]
                        for name, a in arms.items()})
    names = dict.fromkeys(name for column in columns for name in column)
    rows = [[name, *(cell for column in columns for cell in column.get(name, ["-"] * 4))] for name in names]
    return table(["arm", *(f"{model} {what}" for model in ("LR", "FM") for what in
                           ("ms / epoch", "vs PyTorch b1024", "val logloss", "s to target"))], rows)


def scaling_table(result):
    # the default's fixed shares (the chunk queue's rows, within 7 % of them, stay in the JSON)
    rows = [[f"{r['rows']:,}", f"{r['ms_per_epoch']:.2f}", f"{r['ns_per_nnz']:.4f}", f"{r['ms_per_epoch_queued']:.2f}",
             f"{r['ns_per_nnz_queued']:.4f}"] for r in result["scaling"] if not r["chunk_queue"]]
    return table(["rows", "ms / epoch", "ns / nnz", "ms / epoch (queued)", "ns / nnz (queued)"], rows)


def real_data_table(result):
    rows = [[r["data"], r["lr"], r["batch_size"], f"{r['sync_auc']:.4f}", f"{r['async_auc']:.4f}"]
            for r in result["real_data"]]
    return table(["data", "lr", "batch", "sync test AUC", "async test AUC"], rows)


def sweep_table(result):
    rows = []
    for model in dict.fromkeys(r["model"] for r in result["results"]):
        for semantics in ("sync", "async"):
            runs = [r for r in result["results"] if r["model"] == model and r["semantics"] == semantics]
            if not runs:
                continue
            fastest, best = min(runs, key=lambda r: r["ms_per_epoch"]), min(runs, key=lambda r: r["val_logloss"])
            for label, run in ((("fastest and best logloss", fastest),) if fastest is best else
                               (("fastest", fastest), ("best logloss", best))):
                rows.append([model, semantics, label, run["chunk_size"], run["hot_size"], run["flush_every"] or "-",
                             run["programs"], f"{run['ms_per_epoch']:.2f}", f"{run['val_logloss']:.4f}"])
    return table(["model", "semantics", "run", "C", "H", "K", "programs", "ms / epoch", "val logloss"], rows)


def tiles_table(result):
    """Per k: the planner's automatic tile and the fastest swept one, each against its floor."""
    rows = []
    for k in dict.fromkeys(r["k"] for r in result["results"]):
        runs = [r for r in result["results"] if r["k"] == k]
        automatic = next((r for r in runs if r["automatic_tile"]), None)
        fastest = min(runs, key=lambda r: r["ms_per_epoch"])
        for label, run in (("automatic", automatic), ("fastest", fastest)):
            if run is not None:
                rows.append([k, label, run["chunk_size"], run["slots"], run["warps"], run["programs"],
                             f"{run['ms_per_epoch']:.2f}", f"{run['floor_ms']:.2f}",
                             f"{run['ms_per_epoch'] / run['floor_ms']:.2f}×", f"{run['val_logloss']:.4f}"])
    return table(["k", "tile", "C", "S", "warps", "programs", "ms / epoch", "floor ms", "× its floor",
                  "val logloss"], rows)


def hot_table(result):
    """flow_sweep.py --hot: a row per k, its epoch without a hot segment, with the cost model's H, with
    the planner's (capped) H and with the fastest H swept; H (hot sums MB) ms (x its floor)."""
    def cell(run):
        return (f"{run['hot_size']:,} ({run['hot_sums_mb']:.0f} MB): {run['ms_per_epoch']:.2f} "
                f"({run['ms_per_epoch'] / run['floor_ms']:.2f}×), {run['val_logloss']:.4f}")

    rows = []
    for k in dict.fromkeys(r["k"] for r in result["results"]):
        runs = [r for r in result["results"] if r["k"] == k]
        by_choice = {r["hot_choice"]: r for r in runs}
        swept = min((r for r in runs if isinstance(r["hot_choice"], int)), key=lambda r: r["ms_per_epoch"])
        rows.append([k, f"{by_choice[None]['ms_per_epoch']:.2f}", cell(by_choice["uncapped"]),
                     cell(by_choice["model"]), cell(swept)])
    return table(["k", "no hot segment ms", "cost model's H", "planner's H (capped)", "fastest H swept"], rows)


def optimizers_table(result):
    """A row per model and optimizer, sync and async side by side."""
    by_key = {(r["model"], r["optimizer"], r["semantics"]): r for r in result["results"]}

    def cells(model, optimizer, semantics):
        r = by_key.get((model, optimizer, semantics))
        if r is None:
            return ["-", "-", "-"]
        return [f"{r['ms_per_epoch']:.2f}", f"{r['cost_vs_sgd']:.2f}×", f"{last(r['val_logloss']):.4f}"]

    keys = dict.fromkeys((r["model"], r["optimizer"], r["lr"]) for r in result["results"])
    rows = [[model, optimizer, lr, *cells(model, optimizer, "sync"), *cells(model, optimizer, "async")]
            for model, optimizer, lr in keys]
    return table(["model", "optimizer", "lr", "sync ms / epoch", "vs SGD", "val logloss", "async ms / epoch",
                  "vs SGD", "val logloss"], rows)


def sync_resident_table(result):
    """The sync epoch's forms (benchmarks/sync_resident.py): a row per model and chunk size, its ms per
    epoch in each form (the same batches and results in every form of a row)."""
    arms = result["arms"]
    forms = list(dict.fromkeys(a["form"] for a in arms))
    rows = []
    for model, chunk_size in dict.fromkeys((a["model"], a["chunk_size"]) for a in arms):
        ran = {a["form"]: a for a in arms if (a["model"], a["chunk_size"]) == (model, chunk_size)}
        rows.append([model, str(chunk_size), *(f"{ran[f]['ms_per_epoch']:.2f}" if f in ran else "-" for f in forms),
                     f"{next(iter(ran.values()))['val_logloss'][-1]:.4f}"])
    return table(["model", "C", *(f"{f}: ms / epoch" for f in forms), "val logloss"], rows)


def _reduction_hits(counters):
    """The share of a launch's L2 reduction (atomic addition) sectors that hit the L2, in %."""
    if counters.get("l2_reduction_sectors"):
        return 100 * counters.get("l2_reduction_hit_sectors", 0.0) / counters["l2_reduction_sectors"]
    return None


def _counter_cells(counters):
    """A launch's Nsight Compute summary (benchmarks/nsight.py) as table cells."""
    if not counters:
        return ["-"] * 5
    stall, hits = counters.get("top_stall"), _reduction_hits(counters)
    return [f"{counters['l2_hit_pct']:.0f}" if "l2_hit_pct" in counters else "-",
            "-" if hits is None else f"{hits:.2f}",
            f"{counters['l2_busy_pct']:.0f}" if "l2_busy_pct" in counters else "-",
            f"{counters['dram_busy_pct']:.0f}" if "dram_busy_pct" in counters else "-",
            f"{stall[0].replace('_', ' ')} ({stall[1]:.1f})" if stall else "-"]


def _generated_counters(case, c):
    """A sentence's clause on a generated epoch's Nsight Compute summary."""
    hits = _reduction_hits(c)
    return (f"{case.removeprefix('generated async LR, ')}: {c['ms']:.2f} ms, L2 {c.get('l2_busy_pct', 0):.0f} % and "
            f"DRAM {c.get('dram_busy_pct', 0):.0f} % busy"
            + ("" if hits is None else f", {c['l2_reduction_sectors'] / 1e6:.0f} M reduction sectors, {hits:.2f} % "
               "of them L2 hits")
            + f", {c.get('achieved_occupancy_pct', 0):.0f} % occupancy ({c.get('registers_per_thread', 0):.0f} "
            f"registers a thread), warps mostly waiting on {c['top_stall'][0].replace('_', ' ')} "
            f"({c['top_stall'][1]:.1f} cycles an issue)")


def floor_table(result):
    kernels = ", ".join(f"{model} {k['ms_per_epoch']:.2f} ms (H = {k['hot_size']:,}"
                        + (f", val logloss {k['val_logloss']:.4f})" if "val_logloss" in k else ")")
                        for model, k in result["kernels"].items())
    traffic = {(r["model"], r["traffic"]): r for r in result["traffic"]}
    together = traffic.get(("lr", "segment axis: the three together"))
    own = traffic.get(("lr", "w gathered, and the kernel's split of atomic additions"))
    free = traffic.get(("lr", "w gathered, and cold edges' atomic additions only (hot sums free)"))
    segments = "" if together is None or own is None else (
        f" An LR epoch over feature segments (cuWide's 2D partition) makes the three segment-axis accesses: "
        f"{together['ms']:.2f} ms together, against {own['ms']:.2f} ms for the async kernel's own.")
    bound = "" if free is None or own is None else (
        f" Hot sums that cost nothing at all (on chip or anywhere) would take at most {own['ms'] - free['ms']:.2f} ms "
        f"off LR's floor ({own['ms']:.2f} against {free['ms']:.2f} ms): its epoch less that is "
        f"{result['kernels']['lr']['ms_per_epoch'] - own['ms'] + free['ms']:.2f} ms.")
    counters = result.get("counters") or {}
    measured = counters and "unavailable" not in counters
    generated = "" if not measured else " Nsight Compute, the generated LR epoch: " + "; ".join(
        _generated_counters(case, c) for case, c in counters.items()
        if case.startswith("generated") and "ms" in c and "top_stall" in c) + "."
    header = ["model", "traffic alone", "ms", "G accesses/s"]
    rows = [[r["model"], r["traffic"], f"{r['ms']:.2f}", f"{r['gaccesses_per_s']:.0f}"] for r in result["traffic"]
            if r is not together]
    if measured:
        header += ["L2 hits %", "reductions' L2 hits %", "L2 busy %", "DRAM busy %",
                   "warps mostly wait on (cycles an issue)"]
        rows = [row + _counter_cells(counters.get(f"flat: {row[1]}") if row[0] == "lr" else None) for row in rows]
    return (f"The generated async epochs, same process: {kernels}.{segments}{bound}{generated}\n\n"
            + table(header, rows))


def fit_queue_table(result):
    rows = [[f"{r['rows']:,}", r["mode"], r["measurements"], f"{r['ms_per_epoch_median']:.3f}",
             f"{r['ns_per_nnz_median']:.4f}", "–".join(f"{v:.4f}" for v in r["ns_per_nnz_range"])]
            for r in result["summary"]]
    return table(["rows", "epochs", "measurements", "ms / epoch (median)", "ns / nnz (median)", "ns / nnz (range)"],
                 rows)
