"""The SCD benchmark's tables and comparisons (benchmarks/scd.py; BENCHMARKS.md through render.py)."""

from __future__ import annotations

from benchmarks.render import bullets
from benchmarks.report import table

GAPS = (1e-3, 1e-4, 1e-5, 1e-6, 1e-7, 1e-8)


def _epochs_to(arm, threshold):
    return next((i + 1 for i, gap in enumerate(arm["gap"]) if gap <= threshold), None)


def scd_comparisons(arms):
    """Per lambda of the webspam-shaped set, the figures the issue asks for: alac's epochs to 1e-8
    over the sequential solver's, its drift, the wild control's last gap, and each peer's time to a
    gap over alac's."""
    lines = []
    for l2 in sorted({a["l2"] for a in arms if a.get("data") == "webspam_like"}, reverse=True):
        by_name = {a["name"]: a for a in arms if a.get("data") == "webspam_like" and a["l2"] == l2}
        ours, sequential = by_name.get("alac"), by_name.get("sequential")
        if ours is None or sequential is None:
            continue
        parts = [f"epochs to 1e-8: alac {_epochs_to(ours, 1e-8)}, sequential {_epochs_to(sequential, 1e-8)}",
                 f"alac's drift |A beta - w| / |w| {ours['drift']:.1e}"
                 + (f" ({ours['drift_after_30_epochs']:.1e} after 30 epochs)"
                    if ours.get("drift_after_30_epochs") is not None else "")]
        if "alac_wild" in by_name:
            parts.append(f"the wild control's last gap {by_name['alac_wild']['gap'][-1]:.1e}")
        # alac's best form against each peer's best at each gap (seconds; None: not reached)
        def best(names):
            return {f"{t:g}": min((by_name[n]["time_to_gap"][f"{t:g}"] for n in names if n in by_name
                                   and by_name[n]["time_to_gap"][f"{t:g}"] is not None), default=None) for t in GAPS}
        mine = best(("alac", "alac_dual"))
        for peer, names in (("Snap ML (its faster form)", ("snapml_primal", "snapml_dual")),
                            ("sklearn_ridge", ("sklearn_ridge",))):
            theirs = best(names)
            ratios = [f"{t:g}: {theirs[f'{t:g}'] / mine[f'{t:g}']:.1f}x" for t in GAPS[:4]
                      if theirs[f"{t:g}"] and mine[f"{t:g}"]]
            if any(n in by_name for n in names):
                parts.append(f"{peer} time / alac's (its faster form) at gap "
                             + (", ".join(ratios) or "none reached by both"))
        lines.append(f"lambda {l2:g}: " + "; ".join(parts) + ".")
    return lines


def scd_table(result):
    """Time to gap of every solver arm; the virtual workers' epochs to 1e-6 in a table of their own."""
    def seconds(arm, threshold):
        reached = arm["time_to_gap"][f"{threshold:g}"]
        return "-" if reached is None else f"{reached:.3f}"

    arms = [a for a in result["arms"] if "workers" not in a]
    rows = [[a["data"], f"{a['l2']:.3g}", a["name"], a["epochs"] if isinstance(a["epochs"], int) else len(a["epochs"]),
             f"{a['gap'][-1]:.2e}"] + [seconds(a, t) for t in GAPS] for a in arms]
    text = table(["data", "lambda", "arm", "epochs / fits", "last gap"] + [f"s to {t:g}" for t in GAPS], rows)
    workers = {(a["form"], a["workers"], a["aggregation"]): a for a in result["arms"] if "workers" in a}
    if workers:
        def epochs(form, k, aggregation):
            reached = _epochs_to(workers[form, k, aggregation], 1e-6)
            return f"> {workers[form, k, aggregation]['epochs']}" if reached is None else reached

        # a row per form, its K side by side, for each aggregation the run has
        ks = list(dict.fromkeys(k for _, k, _ in workers))
        aggregations = [a for a in ("averaging", "adaptive", "subspace") if any(key[2] == a for key in workers)]
        rows = [[form] + [" / ".join(str(epochs(form, k, aggregation)) for k in ks) for aggregation in aggregations]
                + [" / ".join(f"{min(workers[form, k, 'adaptive']['gamma'][2:], default=float('nan')):.3f}"
                              for k in ks)]
                for form in dict.fromkeys(f for f, _, _ in workers)]
        label = "/".join(str(k) for k in ks)
        text += "\n\nVirtual workers (CoCoA, sequential local epochs), epochs to gap 1e-6:\n\n" + table(
            ["form", *(f"{aggregation}, K = {label}" for aggregation in aggregations),
             f"smallest adaptive gamma from epoch 3, K = {label}"], rows)
    comparisons = scd_comparisons(result["arms"])
    notes = [" ".join(comparisons)] if comparisons else []
    scored = [a for a in arms if "test_auc" in a]
    if scored:
        notes.append("Test AUC (in brackets LIBLINEAR's solution of the same problem, tol 1e-10): " + "; ".join(
            f"{a['data']} {a['name']} {a['test_auc']:.4f}"
            + (f" ({a['liblinear_test_auc']:.4f})" if "liblinear_test_auc" in a else "") for a in scored) + ".")
    notes += [_floor_note(a) for a in arms if "floor_seconds" in a]
    return text + bullets(notes + [f"Not run: {m}." for m in result.get("missing", [])])


def _floor_note(arm):
    """A Criteo-shaped arm's fastest epoch against the bytes it reads and its accesses' flat kernels."""
    note = (f"{arm['data']} {arm['name']}, lambda {arm['l2']:.3g} ({arm['rows']:,} x {arm['columns']:,}, "
            f"{arm['entries']:,} entries, {max(arm['in_flight']):,} in flight): fastest epoch "
            f"{min(arm['epoch_seconds']):.3f} s against {arm['floor_seconds']:.3f} s for the "
            f"{arm['floor_bytes'] / 1e9:.1f} GB it reads at {arm['copy_gb_per_s']:.0f} GB/s "
            f"({arm['epoch_over_floor']:.1f}x)")
    if "flat_floors" in arm:
        f = arm["flat_floors"]
        note += (f"; flat kernels of its accesses alone: a gather at every entry {f['gather_ms']:.0f} ms "
                 f"({f['gather_ms'] / 1e3 / arm['floor_seconds']:.1f}x those bytes' time), an atomic addition at "
                 f"every entry {f['add_ms']:.0f} ms (the most frequent id in {f['hottest_share']:.1%} of them), "
                 f"as many at uniform ids {f['uniform_add_ms']:.0f} ms: the epoch is "
                 f"{arm['epoch_over_flat']:.2f}x the gathers and the uniform additions.")
    return note
