"""The distributed benchmark's tables (benchmarks/distributed.py; BENCHMARKS.md through render.py): the
flow arms a row per set and model against one GPU, the scaling over counts of ranks, the placement runs,
the SCD arms and their matches against the virtual workers."""

from __future__ import annotations

from benchmarks.report import table


def _delta(alone, other):
    """An arm's last validation logloss against one GPU's."""
    if other is None:
        return "-"
    if "diverged" in other:
        return "diverged"
    return f"{other['val_logloss'][-1] - alone['val_logloss'][-1]:+.4f}"


def _placed(alone, found):
    """A sharded or hybrid arm (sequential aggregation) against one GPU, in one cell."""
    if found is None:
        return "-"
    if "diverged" in found:
        return "diverged"
    return (f"{found['ms_per_epoch']:.1f}, {alone['ms_per_epoch'] / found['ms_per_epoch']:.2f}×, "
            f"{_delta(alone, found)}, {found['bytes_communicated'] / 1e6:.1f}")


def _validated_speedup(alone, ranked):
    if "ms_per_epoch_validated" not in alone:
        return "-"
    return f"{alone['ms_per_epoch_validated'] / ranked['ms_per_epoch_validated']:.2f}×"


def _placement_table(placed):
    """The placement runs: the model's table against one GPU's memory, what each rank holds."""
    if not placed:
        return ""
    return "\n\n" + table(
        ["placement run", "ranks", "tables", "table GB", "one GPU's GB", "rows a rank holds", "sync every",
         "s per epoch", "val logloss per epoch", "MB sent / epoch / rank"],
        [[a["name"], a["ranks"], a["tables"], f"{a['table_bytes'] / 1e9:.1f}", f"{a['gpu_bytes'] / 1e9:.1f}",
          "-" if a["rows_held"] is None else f"{a['rows_held']:,} of {a['features']:,}",
          a["sync_every"] or "epoch", " / ".join(f"{s:.1f}" for s in a["epoch_seconds"]),
          " / ".join(f"{v:.4f}" for v in a["val_logloss"]),
          "-" if a["bytes_communicated"] is None else f"{a['bytes_communicated'] / 1e6:.0f}"] for a in placed])


def _scaling_table(flow):
    """Where a run trained on more than one count of ranks beside one GPU (in place of the table of
    aggregations): the sequential arm of each count against one GPU, its speed-up over the count (the
    scaling efficiency)."""
    rows = []
    for size, model in dict.fromkeys((a["rows"], a["name"].split("_")[1]) for a in flow):
        alone = next((a for a in flow if a["rows"] == size and a["name"] == f"flow_{model}_1gpu"), None)
        for world in sorted({a["ranks"] for a in flow})[1:]:
            found = next((a for a in flow if a["rows"] == size and a["name"] == f"flow_{model}_{world}gpu_sequential"),
                         None)
            if alone is None or found is None or "diverged" in alone or "diverged" in found:
                continue
            speedup = alone["ms_per_epoch"] / found["ms_per_epoch"]
            rows.append([f"{size:,}", model, f"{alone['ms_per_epoch']:.1f}", world, f"{found['ms_per_epoch']:.1f}",
                         f"{speedup:.2f}×", _validated_speedup(alone, found), f"{speedup / world:.2f}",
                         _delta(alone, found)])
    return table(["rows", "model", "1 GPU ms / epoch", "GPUs", "ms / epoch", "speed-up",
                  "speed-up, validating each epoch", "of linear", "Δ val logloss"], rows)


def tables(payload):
    """The flow arms a row per set and model (one GPU against the ranks' aggregations), the SCD arms."""
    text, arms = "", payload["arms"]
    flow = [a for a in arms if a["name"].startswith("flow_")]
    if len({a["ranks"] for a in flow}) > 2:
        text += _scaling_table(flow)
    elif flow and max(a["ranks"] for a in flow) == 1:
        # one rank (torchrun --nproc-per-node 1): its epochs queued and validated, nothing to speed up
        text += table(["rows", "model", "lr", "ms / epoch queued", "ms / epoch, validating each epoch",
                       "val logloss"],
                      [[f"{a['rows']:,}", a["name"].split("_")[1], a.get("lr", "-"), f"{a['ms_per_epoch']:.1f}",
                        f"{a['ms_per_epoch_validated']:.1f}", f"{a['val_logloss'][-1]:.4f}"] for a in flow])
    elif flow:
        def arm(rows, model, suffix):
            return next((a for a in flow if a["rows"] == rows and a["name"] == f"flow_{model}_{suffix}"), None)

        ranks = max(a["ranks"] for a in flow)
        # the default aggregation's time and traffic (rows where a run has no sequential arm)
        shown = "sequential" if any(a["name"].endswith("gpu_sequential") for a in flow) else "rows"
        rows = []
        for size, model in dict.fromkeys((a["rows"], a["name"].split("_")[1]) for a in flow):
            alone, ranked = arm(size, model, "1gpu"), arm(size, model, f"{ranks}gpu_{shown}")
            deltas = [_delta(alone, arm(size, model, f"{ranks}gpu_{a}"))
                      for a in ("sequential", "rows", "averaging", "adding")]
            rows.append([f"{size:,}", model, alone.get("lr", "-"), f"{alone['ms_per_epoch']:.1f}",
                         f"{ranked['ms_per_epoch']:.1f}",
                         f"{alone['ms_per_epoch'] / ranked['ms_per_epoch']:.2f}×", _validated_speedup(alone, ranked),
                         f"{alone['val_logloss'][-1]:.4f}",
                         *deltas, f"{ranked['bytes_communicated'] / 1e6:.1f}",
                         *(_placed(alone, arm(size, model, f"{ranks}gpu_{kind}")) for kind in ("sharded", "hybrid"))])
        text += table(["rows", "model", "lr", "1 GPU ms / epoch", f"{ranks} GPUs ({shown})", "speed-up",
                       "speed-up, validating each epoch", "1 GPU val logloss", "Δ sequential", "Δ rows",
                       "Δ averaging", "Δ adding", "MB sent / epoch / rank",
                       "sharded tables: ms, speed-up, Δ, MB sent", "hybrid tables: ms, speed-up, Δ, MB sent"], rows)
    text += _placement_table([a for a in arms if a["name"].startswith("placement_")])
    # the matches against the virtual workers are a note each
    scd = [a for a in arms if "gap" in a and "largest_relative_difference" not in a]
    if scd:
        def ms(arm, key):
            return f"{arm[key]:.1f}" if key in arm else "-"

        rows = [[a["name"], a["ranks"], a["epochs"], f"{a['ms_per_epoch']:.1f}", ms(a, "waiting_ms_per_epoch"),
                 ms(a, "communication_ms_per_epoch"),
                 f"{a['bytes_communicated'] / 1e6:.1f}" if "bytes_communicated" in a else "-", f"{a['gap'][-1]:.2e}",
                 "-" if a.get("time_to_gap", {}).get("1e-06") is None else f"{a['time_to_gap']['1e-06']:.2f}",
                 " ".join("-" if g is None else f"{g:.2f}" for g in a.get("gamma", [])) or "-"]
                for a in scd]
        text += ("\n\n" if text else "") + table(
            ["SCD arm", "ranks", "epochs", "ms / epoch", "of it waiting for a rank", "of it communicating",
             "MB sent / epoch / rank", "last gap", "s to gap 1e-6", "γ per epoch"], rows)
    matches = [a for a in arms if "largest_relative_difference" in a]
    if matches:
        text += ("\n\n- CoCoA over the ranks against as many virtual workers, the largest relative difference of "
                 "their gaps: " + "; ".join(f"{a['name']} {a['largest_relative_difference']:.1e} over {a['epochs']} "
                                            f"epochs ({a['ms_per_epoch']:.1f} ms an epoch)" for a in matches) + ".")
    return text
