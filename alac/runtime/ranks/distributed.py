"""The ranks a run trains on and the collectives between them, through torch.distributed (NCCL
between GPUs, gloo on CPUs; launched by torchrun, which sets RANK, WORLD_SIZE and LOCAL_RANK).
One rank needs no process group: its collectives return their input, so that a one-rank run is the
single-device run exactly. Every collective counts its bytes and the seconds it waited, for the
compute / communication split that benchmarks/distributed.py reports."""

from __future__ import annotations

import dataclasses
import datetime
import os
import signal
import time
import zlib

import torch
import torch.distributed as dist

from alac.errors import OptionError
from alac.runtime.ranks.rank_watch import RankWatch

# whether init_ranks made the process group (close_ranks ends only that one), and its RankWatch
_MADE_HERE = []
_WATCH = []
# seconds a rank may be silent (stopped, hung, gone) before the others stop: alac train --rank-timeout
RANK_TIMEOUT = 60.0
# a collective waits this many rank timeouts for a slow but live rank (one loading a larger file)
COLLECTIVE_TIMEOUTS = 10


@dataclasses.dataclass
class Traffic:
    """What a rank's collectives moved: bytes a ring all-reduce sends from each rank (2 (W - 1) / W of
    the payload), the collectives' count and (where Ranks.timed) the seconds from their launch to
    their end."""

    bytes: int = 0
    collectives: int = 0
    seconds: float = 0.0
    waiting_seconds: float = 0.0    # of seconds, at a barrier for the slowest rank (where Ranks.wait_apart)


@dataclasses.dataclass
class Ranks:
    rank: int = 0
    world: int = 1
    device: torch.device = dataclasses.field(default_factory=lambda: torch.device("cpu"))
    backend: str | None = None
    traffic: Traffic = dataclasses.field(default_factory=Traffic)
    group: object = None            # a torch.distributed process group (None: the default one)
    # timed: each collective waits for the device before and after it, so that its seconds are its own
    # (the host otherwise queues it on the stream and goes on); wait_apart: a barrier before it too, so
    # that its time splits into waiting for the slowest rank and moving the data (both for benchmarks)
    timed: bool = False
    wait_apart: bool = False

    def describe(self):
        """The run's first line's account of its ranks."""
        if self.world == 1:
            return "1 rank"
        return f"{self.world} ranks ({self.backend}, this one rank {self.rank} on {self.device})"

    def all_reduce(self, tensor, op="sum", in_place=False):
        """The elementwise sum (or max) of `tensor` over the ranks, on the tensor's device (moved to the
        ranks' device for the collective where they differ: gloo reduces CPU tensors, NCCL CUDA ones);
        in_place: `tensor` itself becomes the result where it is on the ranks' device."""
        if self.world == 1:
            return tensor
        moved = tensor.to(self.device).contiguous()
        if moved is tensor and not in_place:
            moved = tensor.clone()
        if self.timed or self.wait_apart:
            _synchronize(self.device)
        start = time.perf_counter()
        if self.wait_apart:
            dist.barrier(group=self.group)
            _synchronize(self.device)
            self.traffic.waiting_seconds += time.perf_counter() - start
        dist.all_reduce(moved, op=dist.ReduceOp.SUM if op == "sum" else dist.ReduceOp.MAX, group=self.group)
        if self.timed or self.wait_apart:
            _synchronize(self.device)
            self.traffic.seconds += time.perf_counter() - start
        self.traffic.bytes += 2 * (self.world - 1) * moved.numel() * moved.element_size() // self.world
        self.traffic.collectives += 1
        if moved is tensor:
            return tensor
        return moved.to(tensor.device)

    def extremes(self, value):
        """(smallest, largest) of an integer over the ranks: one all-reduce."""
        if self.world == 1:
            return value, value
        both = self.all_reduce(torch.tensor([value, -value], dtype=torch.int64, device=self.device), op="max")
        return -int(both[1]), int(both[0])

    def check_one_feature_space(self, n_features):
        """Ranks given their own rows must index one feature space (their counts are all-reduced, their
        rows laid out alike): an OptionError on every rank otherwise, before any training."""
        fewest, most = self.extremes(n_features)
        if fewest != most:
            raise OptionError(f"the ranks' own rows declare between {fewest:,} and {most:,} features (this rank's: "
                              f"{n_features:,}): every rank's rows must index one feature space")

    def agreed_plan(self, plan):
        """The plan every rank trains: its hot segment the ranks' smallest (a hot size each rank chose
        from its own rows, as planner.hot_size_for_data does, differs by a few rows, and hybrid tables
        all-reduce the hot rows as one tensor: unequal ones hung NCCL), any other difference an
        OptionError on every rank, before any training."""
        if self.world == 1:
            return plan
        plan = dataclasses.replace(plan, hot_size=self.extremes(plan.hot_size)[0])
        fewest, most = self.extremes(zlib.crc32(repr(plan).encode()))
        if fewest != most:
            raise OptionError(f"the ranks were given different plans (this rank's: {plan.describe()}): every "
                              "rank must train the same plan (only their hot sizes may differ; the smallest is taken)")
        return plan

    def all_gather(self, tensor):
        """[world, *shape]: every rank's tensor (of one shape on every rank) in rank order, on the
        tensor's device."""
        if self.world == 1:
            return tensor[None]
        moved = tensor.to(self.device).contiguous()
        gathered = [torch.empty_like(moved) for _ in range(self.world)]
        dist.all_gather(gathered, moved, group=self.group)
        self.traffic.bytes += (self.world - 1) * moved.numel() * moved.element_size()
        self.traffic.collectives += 1
        return torch.stack(gathered).to(tensor.device)

    def broadcast(self, tensor, source=0):
        """`tensor` overwritten in place with rank `source`'s (on the ranks' device)."""
        if self.world == 1:
            return tensor
        moved = tensor.to(self.device).contiguous()
        dist.broadcast(moved, source, group=self.group)
        self.traffic.bytes += moved.numel() * moved.element_size()
        self.traffic.collectives += 1
        if moved is not tensor:
            tensor.copy_(moved)
        return tensor

    def all_gather_rows(self, tensor, counts):
        """Every rank's rows of `tensor` (dim 0; counts[r] of them on rank r, known to every rank) end
        to end in rank order: one all-gather of the rows padded to the largest count."""
        if self.world == 1:
            return tensor
        padded = tensor.new_zeros((max(counts), *tensor.shape[1:]))
        padded[:tensor.shape[0]] = tensor
        gathered = self.all_gather(padded)
        return torch.cat([gathered[r, :count] for r, count in enumerate(counts)])

    def all_to_all(self, tensor, send_counts, receive_counts):
        """Rows of `tensor` (dim 0) sent to the ranks, send_counts[r] of them to rank r in rank order;
        returns the rows received, receive_counts[r] of them from rank r, on the tensor's device."""
        if self.world == 1:
            return tensor
        moved = tensor.to(self.device).contiguous()
        out = moved.new_empty((sum(receive_counts), *moved.shape[1:]))
        dist.all_to_all_single(out, moved, list(receive_counts), list(send_counts), group=self.group)
        row_bytes = moved[:1].numel() * moved.element_size()
        self.traffic.bytes += (sum(send_counts) - send_counts[self.rank]) * row_bytes
        self.traffic.collectives += 1
        return out.to(tensor.device)


# where a rank's training rows come from: every rank given the whole set (and taking its share), or
# each given its own rows, as DistributedSampler hands DDP ranks theirs
ROWS = ("whole", "own")


def check_rows(rows):
    if rows not in ROWS:
        raise OptionError(f"rows are \"whole\" (every rank gets the whole set) or \"own\" (each its own), got "
                          f"{rows!r}")


def init_ranks(backend=None, timeout=None):
    """The ranks of this process: torchrun's (a process group made here unless one exists; NCCL when
    CUDA is there, else gloo; each rank on GPU LOCAL_RANK), or one rank. A group made here is watched
    (alac.runtime.ranks.rank_watch): a rank silent for `timeout` seconds (default RANK_TIMEOUT) ends the run
    on the others, and a collective waits at most COLLECTIVE_TIMEOUTS times that. One rank computes on
    the current GPU where CUDA is there (as torchrun's one process expects), else on the CPU."""
    if dist.is_available() and dist.is_initialized():
        backend = dist.get_backend()
    elif int(os.environ.get("WORLD_SIZE", "1")) > 1:
        backend = backend or ("nccl" if torch.cuda.is_available() else "gloo")
        if backend == "nccl":
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        timeout = RANK_TIMEOUT if timeout is None else timeout
        dist.init_process_group(backend, timeout=datetime.timedelta(seconds=COLLECTIVE_TIMEOUTS * timeout))
        _MADE_HERE.append(True)
        _watch(timeout)
    else:
        return Ranks(device=torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available()
                     else torch.device("cpu"))
    if backend not in ("nccl", "gloo"):
        raise OptionError(f"alac's collectives run on NCCL or gloo, got the process group's {backend!r}")
    device = torch.device("cuda", torch.cuda.current_device()) if backend == "nccl" else torch.device("cpu")
    return Ranks(dist.get_rank(), dist.get_world_size(), device, backend)


def _watch(timeout):
    """Start the RankWatch of this rank, over its own client of the store the ranks met at (torchrun's or
    rank 0's: MASTER_ADDR, MASTER_PORT), and stop with one line on SIGTERM (torchrun ends every rank when
    one fails)."""
    if "MASTER_ADDR" not in os.environ or "MASTER_PORT" not in os.environ:
        return
    store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), is_master=False,
                          timeout=datetime.timedelta(seconds=timeout))
    watch = RankWatch(store, dist.get_rank(), dist.get_world_size(), timeout)
    _WATCH.append(watch)
    signal.signal(signal.SIGTERM, lambda *_: watch.fault(RuntimeError("stopped by SIGTERM: torchrun stops every "
                                                                      "rank when one fails")))


def doing(text):
    """Tell the other ranks what this one does now (named if it fails); nothing without a watch."""
    for watch in _WATCH:
        watch.doing(text)


def is_collective_error(error):
    """Whether an exception is a collective's failure (another rank gone): torch.distributed's own
    errors, and the RuntimeErrors gloo and NCCL raise."""
    if isinstance(error, getattr(dist, "DistError", ())):
        return True
    text = str(error)
    return isinstance(error, RuntimeError) and any(mark in text for mark in ("gloo", "NCCL", "Connection closed",
                                                                             "Connection reset"))


def fault(error):
    """A collective failed in this rank: with a watch, name the failed rank and exit (RankWatch.fault);
    else raise the error on."""
    if _WATCH:
        _WATCH[-1].fault(error)
    raise error


def close_ranks():
    """End the process group init_ranks made, every rank together (the end of a run): a gloo rank that
    exits with its group alive while another still writes its outputs was seen to abort in the group's
    teardown (tests/cli/test_distributed.py, 1 run in 6 on two busy cores)."""
    if _MADE_HERE and dist.is_initialized():
        # the watch ends first: a rank (or the store's host) leaving after the barrier is no fault
        while _WATCH:
            _WATCH.pop().stop()
        dist.barrier()
        dist.destroy_process_group()
        _MADE_HERE.clear()


def first_ranks(ranks, world):
    """The first `world` of the ranks as ranks of their own, for runs over fewer ranks than were
    launched (scaling runs); None on the others. Every rank must call it: torch.distributed's
    new_group is made by all of them together."""
    if world < 1 or world > ranks.world:
        raise OptionError(f"the first {world} ranks of {ranks.world}: between 1 and {ranks.world}")
    if world == ranks.world:
        return ranks
    group = dist.new_group(list(range(world))) if world > 1 else None
    if ranks.rank >= world:
        return None
    if world == 1:
        return Ranks(device=ranks.device)
    return Ranks(ranks.rank, world, ranks.device, ranks.backend, group=group)


def gloo_ranks(ranks):
    """The same ranks over gloo, on the CPU (a group of their own beside an NCCL one): for solvers that
    step on the CPU, as the float64 sequential SCD solver does."""
    if ranks.world == 1 or ranks.backend == "gloo":
        return ranks
    return Ranks(ranks.rank, ranks.world, torch.device("cpu"), "gloo", group=dist.new_group(backend="gloo"))


def _synchronize(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)
