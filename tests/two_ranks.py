"""Two (or more) gloo ranks on the CPU for the distributed tests: each process runs a function of its
rank and saves what it found, which the test process reads back."""

import contextlib

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


@contextlib.contextmanager
def gloo_group(rank, world, store):
    """The process group of `world` gloo ranks met through the file `store`, ended on the way out."""
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    try:
        yield
    finally:
        dist.destroy_process_group()


def spawned(run_rank, out, world=2):
    """run_rank(rank, world, store, out) in `world` processes, each saving out/<rank>.pt: their contents."""
    mp.spawn(run_rank, args=(world, str(out / "store"), str(out)), nprocs=world)
    return [torch.load(out / f"{rank}.pt", weights_only=False) for rank in range(world)]
