"""Seconds a training step's exchanges take over the ranks, measured by running them on zeros: the
collective bandwidth and latency, at the sizes a step moves, that the rank-table planner
(alac.train.deep_ranks) weighs. Kept beside Ranks rather than in a benchmark because a run measures
its own interconnect (NVLink, PCIe, a network or gloo on CPUs) before it chooses."""

from __future__ import annotations

import statistics
import time

import torch

from alac.runtime.ranks.distributed import Traffic, _synchronize

# rounds timed after one warm-up round (the first round of a size sets up NCCL's buffers)
REPEATS = 3


def exchange_seconds(ranks, exchanges, repeats=REPEATS):
    """The median seconds of one round of `exchanges` ((collective, shape, dtype) with collective
    "all_gather" or "all_to_all" in equal splits, as alac.nn.ranked.step_exchanges gives them) after a
    warm-up round: the slowest rank's, so that every rank gets the same number. Every rank must call
    it with the same exchanges. The probe's bytes are not counted in ranks.traffic."""
    if ranks.world == 1 or not exchanges:
        return 0.0
    tensors = [(kind, torch.zeros(shape, dtype=dtype, device=ranks.device)) for kind, shape, dtype in exchanges]
    counted = ranks.traffic

    def one_round():
        for kind, tensor in tensors:
            if kind == "all_gather":
                ranks.all_gather(tensor)
            else:
                part = [tensor.shape[0] // ranks.world] * ranks.world
                ranks.all_to_all(tensor, part, part)
        _synchronize(ranks.device)

    try:
        ranks.traffic = Traffic()
        one_round()
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            one_round()
            times.append(time.perf_counter() - start)
        slowest = ranks.all_reduce(torch.tensor([statistics.median(times)], dtype=torch.float64,
                                                device=ranks.device), op="max")
    finally:
        ranks.traffic = counted
    return float(slowest)
