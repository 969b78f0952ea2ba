"""Shared by the benchmarks: the environment record and the JSON + markdown writers."""

from __future__ import annotations

import json
import os
import platform
import tempfile
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"


def environment():
    import numba
    import numpy
    import torch

    info = {
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "torch": torch.__version__,
        "numpy": numpy.__version__,
        "numba": numba.__version__,
        "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu",
    }
    try:
        import triton
        info["triton"] = triton.__version__
    except ImportError:
        info["triton"] = None
    if torch.cuda.is_available():
        info["cuda"] = torch.version.cuda
    return info


def result_folders(out_dir=None, device=None):
    """Where a benchmark writes: out_dir (e.g. $OUT on the GPU machine, whence the files are copied
    into results/ after a check), or results/ when none is given, except for a run on a CPU (a smoke
    run: it goes to the temporary folder's alac-results, leaving the committed GPU figures alone)."""
    if out_dir:
        return [Path(out_dir)]
    return [Path(tempfile.gettempdir()) / "alac-results"] if device == "cpu" else [RESULTS]


def write(name, payload, markdown, out_dir=None):
    """Write <name>.json and <name>.md into result_folders(out_dir, the payload's device)."""
    for folder in result_folders(out_dir, payload.get("environment", {}).get("device")):
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{name}.json").write_text(json.dumps(payload, indent=2) + "\n")
        (folder / f"{name}.md").write_text(markdown + "\n")


def merge(paths, script):
    """One payload of several runs' arms (each part in its own process, so that each fits the GPU
    machine's ten-minute calls), refused unless every run was on the same device; `runs` lists each
    run's arguments with its command and date where the payload has them."""
    payloads = [json.loads(Path(path).read_text()) for path in paths]
    devices = {p["environment"]["device"] for p in payloads}
    if len(devices) != 1:
        raise SystemExit(f"{script} --merge: runs on different devices ({', '.join(sorted(devices))}) do not merge")
    runs = [run for p in payloads for run in p.get("runs") or [
        {**p["arguments"], **{key: p[key] for key in ("command", "note") if key in p},
         "date": p["environment"]["date"]}]]
    # the measured rows: "arms" (most benchmarks) or "results" (the sweeps)
    rows = {key: [row for p in payloads for row in p[key]] for key in ("arms", "results") if key in payloads[0]}
    kept = {key: payloads[0][key] for key in ("ranks", "device") if key in payloads[0]}
    return {"environment": payloads[0]["environment"], "arguments": runs[0], "runs": runs, **rows, **kept}


def last(value):
    """A per-epoch list's last value (a single figure stays as it is)."""
    return value[-1] if isinstance(value, list) else value


def table(header, rows):
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)
