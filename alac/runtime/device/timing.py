"""The one GPU timer of alac and its benchmarks: CUDA events around each call, median of the calls.

Kept instead of triton.testing.do_bench because callers need an exact number of calls (a training
epoch is one call whose state moves on) and every call's time, where do_bench repeats by time and
clears L2 between calls. A call's host work counts too: the start event is recorded before it.
"""

from __future__ import annotations

import statistics

import torch


def gpu_milliseconds(function, repeats=5, warmup=1):
    """(median, every call's) milliseconds of `repeats` calls of function() after `warmup` calls."""
    for _ in range(warmup):
        function()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        function()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times), times
