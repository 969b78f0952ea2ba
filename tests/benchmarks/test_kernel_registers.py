"""benchmarks/kernel_registers.py: ptxas's registers and spills of a generated kernel, without a GPU."""

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_a_larger_tile_of_the_same_warps_takes_more_registers():
    # a process of its own: compiling for a GPU needs Triton imported without the interpreter
    env = {**os.environ, "TRITON_INTERPRET": "0", "PYTHONPATH": str(ROOT)}
    run = subprocess.run([sys.executable, "benchmarks/kernel_registers.py", "--k", "16", "--tile", "32", "4", "8",
                          "--tile", "32", "16", "8"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    (small, small_spill), (large, _) = [(int(r), int(s)) for r, s in
                                        re.findall(r"^\| 16 \| 32 \| \d+ \| 8 \| (\d+) \| (\d+) \|$", run.stdout, re.M)]
    assert 0 < small < large <= 255 and small_spill == 0
