"""Nsight Compute counters of chosen kernel launches, for benchmarks that explain where a kernel's
time goes (async_floor.py --counters): the benchmark runs a child of itself under `ncu` with the
CUDA profiler on only around the launches it names (`profiled`), and reads ncu's raw CSV page
back (`parse_raw_csv`). ncu replays each launch once per counter pass and restores memory in
between, so a launch's counters describe that one launch."""

from __future__ import annotations

import csv
import re
import shutil
import subprocess
from pathlib import Path

# ncu's sections read: throughput against peaks, the memory tables (L2 hits, atomics), warp stalls,
# occupancy and launch shape
SECTIONS = ("SpeedOfLight", "MemoryWorkloadAnalysis", "MemoryWorkloadAnalysis_Tables", "WarpStateStats", "Occupancy",
            "LaunchStats")
# ncu's time units per millisecond (2025.3 writes "ns" with --print-units base)
TIME_UNITS_PER_MS = {"ns": 1e6, "nsecond": 1e6, "us": 1e3, "usecond": 1e3, "ms": 1.0, "msecond": 1.0, "s": 1e-3,
                     "second": 1e-3}
# the counters a summary keeps, each the first of its names that ncu reported (names vary by version)
SUMMARY = {
    "ms": ("gpu__time_duration.sum",),
    "l2_hit_pct": ("lts__t_sector_hit_rate.pct",),
    "l2_busy_pct": ("lts__throughput.avg.pct_of_peak_sustained_elapsed",),
    "dram_busy_pct": ("dram__throughput.avg.pct_of_peak_sustained_elapsed",
                      "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed"),
    "dram_bytes": ("dram__bytes.sum",),
    "l2_reduction_sectors": ("lts__t_sectors_srcunit_tex_op_red.sum",),
    "l2_reduction_hit_sectors": ("lts__t_sectors_srcunit_tex_op_red_lookup_hit.sum",),
    "l2_atomic_sectors": ("lts__t_sectors_srcunit_tex_op_atom.sum",),
    "achieved_occupancy_pct": ("sm__warps_active.avg.pct_of_peak_sustained_active",),
    "registers_per_thread": ("launch__registers_per_thread",),
}
STALL = re.compile(r"^smsp__average_warps?_(?:issue_stalled|latency_issue_stalled)_(\w+?)_per_issue_active\.ratio$")


class NsightUnavailable(RuntimeError):
    """ncu is not installed, or could not read this GPU's counters."""


def profiled(launch):
    """Run launch() with the CUDA profiler on: a child under `ncu --profile-from-start off` has
    these launches profiled and no others."""
    import torch

    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    launch()
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()


def run_under_ncu(argv, kernel_regex, log_path):
    """The launches matching kernel_regex inside profiled() calls of the command argv, run under
    ncu (clocks left alone): one parse_raw_csv row per launch, in launch order."""
    ncu = shutil.which("ncu") or next((str(p) for p in Path("/usr/local/cuda/bin").glob("ncu")), None)
    if ncu is None:
        raise NsightUnavailable("ncu is not on the PATH")
    sections = [arg for section in SECTIONS for arg in ("--section", section)]
    command = [ncu, "--csv", "--page", "raw", "--print-units", "base", "--profile-from-start", "off",
               "--clock-control", "none", "-k", f"regex:{kernel_regex}", *sections, "--log-file", str(log_path), *argv]
    finished = subprocess.run(command)
    text = Path(log_path).read_text() if Path(log_path).exists() else ""
    if finished.returncode != 0 or "==ERROR==" in text:
        errors = [line for line in text.splitlines() if "ERROR" in line]
        raise NsightUnavailable(f"ncu exited {finished.returncode}: {' '.join(errors)[:500]}")
    return parse_raw_csv(text)


def _number(text):
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return None


def parse_raw_csv(text):
    """ncu's raw CSV page (its log's quoted lines: a header of names, a row of units, a row per
    launch) as a dict per launch: numbers as floats (thousands separators dropped), times in
    milliseconds, other values as text."""
    rows = list(csv.reader(line for line in text.splitlines() if line.startswith('"')))
    if not rows:
        return []
    header, rows = rows[0], rows[1:]
    units = rows.pop(0) if rows and not rows[0][0] else [""] * len(header)
    launches = []
    for row in rows:
        launch = {}
        for name, unit, raw in zip(header, units, row):
            number = _number(raw)
            launch[name] = raw if number is None else number / TIME_UNITS_PER_MS.get(unit, 1.0)
        launches.append(launch)
    return launches


def summary(launch):
    """The SUMMARY counters of a parsed launch that ncu reported, and its top warp stall: the
    reason most cycles between a warp's issues went to (stall, cycles per issue)."""
    out = {}
    for key, names in SUMMARY.items():
        found = next((launch[n] for n in names if isinstance(launch.get(n), float)), None)
        if found is not None:
            out[key] = found
    # "selected" is the issue itself, one cycle an issue
    stalls = {m.group(1): value for name, value in launch.items()
              if isinstance(value, float) and (m := STALL.match(name)) and m.group(1) != "selected"}
    if stalls:
        reason = max(stalls, key=stalls.get)
        out["top_stall"] = [reason, stalls[reason]]
    return out
