"""Trainer.fit with its epochs queued in groups (one loss read per group) against one epoch at a
time (a no-op callback forces that), async LR with the default plan on the synthetic Criteo-shaped
set, two rounds of each in one process. Each measurement trains at least --epochs epochs and at
least --seconds of training (a long run's steady state: fit's first group is one epoch that measures
the group size, and every group waits once for its host work), so small sets run many epochs.

    PYTHONPATH=. python benchmarks/fit_queue.py [--rows 1000000,4000000] [--epochs 40] [--seconds 2]
                                                [--modes "one at a time,queued"] [--placements 1]
                                                [--out DIR]

The epoch time of one size moved with where its tensors lay in GPU memory (a process's allocation
history) more than with size, before GPU tables started at 2 MiB boundaries
(alac.runtime.device.memory.TABLE_ALIGNMENT_BYTES); smaller tensors still fall anywhere.
--placements P measures each size and mode P times, the p-th with p x PLACEMENT_STEP_BYTES allocated
before the trainer (so that its tensors start elsewhere), and the table reports the median and the
range of the P figures.

Writes results/fit_queue.json and .md: ms per epoch as fit records them (the layout build of each
fit call is not counted), ns per non-zero and its ratio to the largest set's queued figure, the last
training loss.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.report import environment, table, write

MODES = ("one at a time", "queued")
# The pad between placements (a separate allocation, so each step moves where the trainer's next
# allocations land in the address space by at least the 2 MiB the caching allocator rounds to).
PLACEMENT_STEP_BYTES = 2 * 1024 * 1024 + 4096


def summarize(results, modes):
    """Per (rows, mode): the median ms / epoch and ns / non-zero of its measurements, their range,
    the ratio to the largest size's median; and per mode the largest over the smallest median."""
    import statistics

    summary = []
    for rows in dict.fromkeys(r["rows"] for r in results):
        for mode in modes:
            figures = [r for r in results if r["rows"] == rows and r["mode"] == mode]
            per_nnz = [r["ns_per_nnz"] for r in figures]
            summary.append({"rows": rows, "mode": mode, "measurements": len(figures),
                            "epochs": min(r["epochs"] for r in figures),
                            "ms_per_epoch_median": statistics.median(r["ms_per_epoch"] for r in figures),
                            "ns_per_nnz_median": statistics.median(per_nnz),
                            "ns_per_nnz_range": [min(per_nnz), max(per_nnz)],
                            "last_train_loss": figures[-1]["last_train_loss"]})
    largest = max(r["rows"] for r in summary)
    for mode in modes:
        reference = next(r["ns_per_nnz_median"] for r in summary if r["rows"] == largest and r["mode"] == mode)
        for r in summary:
            if r["mode"] == mode:
                r["vs_largest"] = r["ns_per_nnz_median"] / reference
    spread = {mode: max(r["ns_per_nnz_median"] for r in summary if r["mode"] == mode)
              / min(r["ns_per_nnz_median"] for r in summary if r["mode"] == mode) for mode in modes}
    return summary, spread


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", default="1000000,4000000")
    parser.add_argument("--epochs", type=int, default=40)
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--modes", default=",".join(MODES), help=f"comma-separated, of {MODES}")
    parser.add_argument("--placements", type=int, default=1, help="measurements of each size and mode, each with "
                        "the trainer's tensors at another place in GPU memory (median and range reported)")
    parser.add_argument("--out", default=os.environ.get("OUT"))
    args = parser.parse_args()
    modes = [mode.strip() for mode in args.modes.split(",")]
    if not modes or any(mode not in MODES for mode in modes):
        parser.error(f"--modes takes a comma-separated list of {MODES}, got {args.modes!r}")
    if args.placements < 1:
        parser.error(f"--placements must be >= 1, got {args.placements}")

    import torch

    from alac.data.synthetic import criteo_like
    from alac.models import zoo_model
    from alac.plan import Plan
    from alac.runtime.planning.planner import hot_size_for_data
    from alac.train.trainer import Trainer

    results = []
    for rows in [int(r) for r in args.rows.split(",")]:
        data = criteo_like(rows, device="cuda")
        plan = Plan(semantics="async", batch_size=1024, chunk_size=32)
        plan = dataclasses.replace(plan, hot_size=hot_size_for_data(data, plan))
        for mode, placement in [(mode, p) for p in range(args.placements) for mode in modes] * 2:
            callbacks = [lambda trainer, record: False] if mode == "one at a time" else []
            # the last trainer's layout goes before this one builds its own: at 64M rows two layouts
            # and the build's temporaries do not fit in 80 GB together
            trainer = pad = None
            torch.cuda.empty_cache()
            pad = torch.empty(placement * PLACEMENT_STEP_BYTES, dtype=torch.uint8, device="cuda")
            trainer = Trainer(zoo_model("lr"), lr=2.0, plan=plan, backend="triton",
                              device="cuda", callbacks=callbacks)
            trainer.fit(data, epochs=3)  # compiles, and measures an epoch for the group size
            epochs = max(args.epochs, math.ceil(args.seconds / trainer.history[-1]["seconds"]))
            trainer.fit(data, epochs=epochs)
            ms = 1000 * sum(r["seconds"] for r in trainer.history[-epochs:]) / epochs
            results.append({"rows": rows, "nnz": data.nnz, "mode": mode, "placement": placement, "epochs": epochs,
                            "ms_per_epoch": ms, "ns_per_nnz": ms / data.nnz * 1e6,
                            "last_train_loss": trainer.history[-1]["train_loss"]})
            print(results[-1], flush=True)
        del data, trainer, pad
    summary, spread = summarize(results, modes)
    env = environment()
    markdown = "\n".join([
        f"Trainer.fit, async LR (default plan), at least {args.epochs} epochs and {args.seconds:g} s per "
        f"measurement, {args.placements} placement(s) x 2 rounds per size and mode; medians, the range of "
        f"ns / non-zero over the measurements, the ratio to the median at {max(r['rows'] for r in summary):,} rows; "
        f"{env['device']}, "
        f"torch {env['torch']}, triton {env['triton']}, {env['date']}.", "",
        table(["rows", "mode", "measurements", "ms / epoch", "ns / non-zero", "range", "ratio", "last training loss"],
              [[f"{r['rows']:,}", f"{r['mode']} (>= {r['epochs']} epochs)", r["measurements"],
                f"{r['ms_per_epoch_median']:.3f}", f"{r['ns_per_nnz_median']:.4f}",
                f"{r['ns_per_nnz_range'][0]:.4f}-{r['ns_per_nnz_range'][1]:.4f}", f"{r['vs_largest']:.3f}",
                f"{r['last_train_loss']:.5f}"] for r in summary]), "",
        "Largest over smallest median ns / non-zero: "
        + ", ".join(f"{mode} {value:.3f}" for mode, value in spread.items())
        + "."])
    write("fit_queue", {"device": env["device"], "environment": env, "arguments": vars(args), "results": results,
                           "summary": summary, "spread": spread},
          markdown, args.out)
    print(markdown)


if __name__ == "__main__":
    main()
