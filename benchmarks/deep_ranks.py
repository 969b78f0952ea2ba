"""DeepFM over several GPUs (alac.train.deep under ranks, alac.nn.ranked) against one GPU and against
PyTorch DDP with a replicated embedding table; run under torchrun:
`PYTHONPATH=. torchrun --nproc-per-node 2 benchmarks/deep_ranks.py [--rows 4000000]`.

The set: the synthetic Criteo-shaped rows (alac.data.synthetic.criteo_like: 39 one-hot fields,
labels from a planted FM), `--rows` training, `--valid-rows` validation and test rows. Arms, each
`--epochs` epochs at `--batch-size` rows a step on each rank (DDP's convention: W ranks step on W times
the rows of one GPU), its validation after every epoch:
- alac_1gpu: DeepTrainer on the first rank alone (the others wait), its steps replayed from CUDA
  graphs; alac_1gpu_eager: launched one by one, as the ranks' steps are;
- alac_<mode>: DeepTrainer over every rank, its tables replicated, sharded or hybrid (`--modes`);
- torch_ddp_1gpu / torch_ddp: the PyTorch user's DeepFM: one nn.Embedding of a weight and k factors per
  feature with sparse gradients and torch.optim.Adagrad (element-wise), the MLP with Adam under
  DistributedDataParallel, every rank a copy of the table whose sparse gradients are all-gathered
  and summed (NCCL has no sparse all-reduce, so DDP cannot take them), on `--baseline-rows` rows
  (it is slower).
Per arm: `samples_per_s` (training rows over the median epoch's seconds, validation not counted),
`epoch_seconds`, `validation_seconds` (the median epoch's validation), `fit_seconds` (the whole fit,
set-up and the first validation included), `valid_auc` per epoch, `test_auc`, `bytes_per_rank` (per
epoch: what the rank sends the others, alac arms: the tables' exchanges,
RankedAggregate.bytes_per_step, and the dense gradients' ring all-reduce), `step_ms` (the median
epoch's seconds a step) and `exchange_ms_per_step` (a step's collectives alone at the fit's sizes,
timed by CUDA events: exchange_ms). Rank 0 writes results/deep_ranks.json and .md
(deep_ranks_<W>gpu.* for W ranks other than 2).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from alac import metrics
from alac.data.split import split
from alac.data.synthetic import criteo_like
from alac.runtime.ranks.distributed import first_ranks, init_ranks
from alac.train.deep import DeepSettings, DeepTrainer
from benchmarks.distributed import recorded_command
from benchmarks.report import environment, write

K, HIDDEN = 16, (256, 128)
# the tables' AdaGrad step of both arms (the field models' default on 39 fields before it scaled with them)
TABLE_LR = 0.02


def _wait(device):
    """The device's queued work done (nothing to wait for on a CPU, where tests run the arms)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def alac_arm(name, ranks, train, valid, test, args, mode, cuda_graphs=True):
    """DeepTrainer over `ranks` (None: this rank sits the arm out)."""
    if ranks is None:
        return None
    settings = DeepSettings(model="deepfm", k=K, hidden=HIDDEN, lr=TABLE_LR, epochs=args.epochs,
                            batch_size=args.batch_size, patience=args.epochs, rank_tables=mode, seed=args.seed,
                            cuda_graphs=cuda_graphs)
    trainer = DeepTrainer(settings, ranks.device, ranks=ranks)
    started = time.perf_counter()
    trainer.fit(train, valid)
    _wait(ranks.device)
    wall = time.perf_counter() - started
    probability = trainer.predict(test)
    seconds = [record["seconds"] for record in trainer.history]
    steps = -(-train.n_rows // (args.batch_size * ranks.world))
    dense = sum(p.numel() * 4 for p in trainer.network.parameters())
    sent = 0 if ranks.world == 1 else steps * (trainer.network.tables.bytes_per_step()
                                               + 2 * (ranks.world - 1) * dense // ranks.world)
    exchanges = exchange_ms(trainer, ranks) if ranks.world > 1 and ranks.device.type == "cuda" else None
    return {"name": name, "ranks": ranks.world, "mode": mode if ranks.world > 1 else "one GPU",
            "tables": None if trainer.rank_tables is None else trainer.rank_tables.describe(),
            "epoch_seconds": seconds, "samples_per_s": train.n_rows / statistics.median(seconds),
            "validation_seconds": statistics.median(record["valid_seconds"] for record in trainer.history),
            "fit_seconds": wall,
            "valid_auc": [record["valid_auc"] for record in trainer.history],
            "test_auc": float(metrics.auc(probability, test.labels.cpu() > 0.5)),
            "bytes_per_rank": sent, "step_ms": 1e3 * statistics.median(seconds) / steps,
            "exchange_ms_per_step": exchanges}


class TorchDeepFM(torch.nn.Module):
    """DeepFM as a PyTorch user writes it for one-hot fields: one embedding of 1 + k per feature."""

    def __init__(self, n_features, n_fields):
        super().__init__()
        self.table = torch.nn.Embedding(n_features, 1 + K, sparse=True)
        with torch.no_grad():
            self.table.weight.normal_(0, 0.01)
            self.table.weight[:, 0] = 0
        sizes = [n_fields * K, *HIDDEN, 1]
        layers = []
        for inputs, outputs in zip(sizes, sizes[1:]):
            layers += [torch.nn.Linear(inputs, outputs), torch.nn.ReLU()]
        self.deep = torch.nn.Sequential(*layers[:-1])
        self.bias = torch.nn.Parameter(torch.zeros(1))

    def forward(self, ids):
        rows = self.table(ids)                     # [B, F, 1 + K]
        w, v = rows[..., 0], rows[..., 1:]
        interactions = 0.5 * (v.sum(1) ** 2 - (v**2).sum(1)).sum(1)
        return self.bias + w.sum(1) + interactions + self.deep(v.flatten(1)).squeeze(1)


def torch_arm(name, ranks, train, valid, test, args):
    """The PyTorch user's DeepFM under DDP over `ranks` (None: this rank sits the arm out)."""
    if ranks is None:
        return None
    from torch.nn.parallel import DistributedDataParallel

    torch.manual_seed(args.seed)
    fields = train.indices.numel() // train.n_rows
    model = TorchDeepFM(train.n_features, fields).to(ranks.device)
    if ranks.world > 1:
        DistributedDataParallel._set_params_and_buffers_to_ignore_for_model(model, ["table.weight"])
    forward = DistributedDataParallel(model, device_ids=[ranks.device], process_group=ranks.group) \
        if ranks.world > 1 else model
    sparse = torch.optim.Adagrad([model.table.weight], lr=TABLE_LR)
    dense = torch.optim.Adam([p for n, p in model.named_parameters() if n != "table.weight"], lr=1e-3)
    ids = {s: d.indices.view(d.n_rows, fields).long() for s, d in (("train", train), ("valid", valid),
                                                                  ("test", test))}
    labels = {s: d.labels.float() for s, d in (("train", train), ("valid", valid), ("test", test))}
    generator = torch.Generator().manual_seed(args.seed)

    @torch.no_grad()
    def predicted(split_name):
        return torch.cat([torch.sigmoid(model(part)) for part in ids[split_name].split(1 << 16)])

    seconds, aucs, validation = [], [], []
    for _ in range(args.epochs):
        order = torch.randperm(train.n_rows, generator=generator).to(ranks.device)
        _wait(ranks.device)
        started = time.perf_counter()
        for first in range(0, train.n_rows, args.batch_size * ranks.world):
            batch = order[first:first + args.batch_size * ranks.world]
            lo = batch.numel() * ranks.rank // ranks.world
            hi = batch.numel() * (ranks.rank + 1) // ranks.world
            mine = batch[lo:hi]
            loss = torch.nn.functional.binary_cross_entropy_with_logits(forward(ids["train"][mine]),
                                                                        labels["train"][mine])
            sparse.zero_grad()
            dense.zero_grad()
            loss.backward()
            if ranks.world > 1:
                model.table.weight.grad = _averaged_sparse(model.table.weight.grad, ranks)
            sparse.step()
            dense.step()
        _wait(ranks.device)
        seconds.append(time.perf_counter() - started)
        started = time.perf_counter()
        aucs.append(float(metrics.auc(predicted("valid").cpu(), labels["valid"].cpu() > 0.5)))
        validation.append(time.perf_counter() - started)
    return {"name": name, "ranks": ranks.world, "mode": "DDP, the table replicated", "epoch_seconds": seconds,
            "samples_per_s": train.n_rows / statistics.median(seconds),
            "validation_seconds": statistics.median(validation), "valid_auc": aucs,
            "test_auc": float(metrics.auc(predicted("test").cpu(), labels["test"].cpu() > 0.5))}


def exchange_ms(trainer, ranks, repeats=50):
    """Milliseconds a training step's collectives take alone at the fit's sizes (the tables'
    RankedAggregate.step_exchanges, the dense gradients' all-reduce), timed by CUDA events over
    `repeats` rounds: what a step over ranks pays beyond one GPU's kernels."""
    split = [trainer.network.tables.entry_capacity] * ranks.world
    slots = [(kind, torch.zeros(shape, dtype=dtype, device=ranks.device))
             for kind, shape, dtype in trainer.network.tables.step_exchanges()]
    dense = torch.zeros(sum(p.numel() for p in trainer.network.parameters()), device=ranks.device)

    def step():
        for kind, tensor in slots:
            ranks.all_gather(tensor) if kind == "all_gather" else ranks.all_to_all(tensor, split, split)
        ranks.all_reduce(dense, in_place=True)

    for _ in range(5):
        step()
    began, ended = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    began.record()
    for _ in range(repeats):
        step()
    ended.record()
    ended.synchronize()
    return began.elapsed_time(ended) / repeats


def _averaged_sparse(grad, ranks):
    """A sparse gradient's mean over the ranks (as DDP averages the dense ones): every rank's rows
    all-gathered and summed."""
    grad = grad.coalesce()
    rows, values = grad.indices()[0], grad.values()
    counts = ranks.all_gather(torch.tensor([rows.numel()], device=rows.device)).flatten().tolist()
    rows, values = ranks.all_gather_rows(rows, counts), ranks.all_gather_rows(values, counts)
    return torch.sparse_coo_tensor(rows[None], values / ranks.world, grad.shape).coalesce()


def report(payload):
    env = payload["environment"]
    return (f"DeepFM k = {K} over ranks ({env['device']} x {payload['ranks']}, {env['date']}: "
            f"`PYTHONPATH=. torchrun --nproc-per-node {payload['ranks']} benchmarks/deep_ranks.py "
            f"{payload['command']}`)\n\n" + arms_table(payload))


def arms_table(payload):
    lines = ["| arm | ranks | training rows | samples/s | vs one GPU | validation s / epoch s | valid AUC | test AUC "
             "| MB sent per rank and epoch | ms a step (its collectives alone) |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    one = {arm["name"].split("_")[0]: arm["samples_per_s"] for arm in payload["arms"][::-1] if arm["ranks"] == 1}
    for arm in payload["arms"]:
        epoch = statistics.median(arm["epoch_seconds"])
        sent = arm.get("bytes_per_rank")
        lines.append(f"| {arm['name']} | {arm['ranks']} | {arm['rows']:,} | {arm['samples_per_s'] / 1e6:.2f}M | "
                     f"{arm['samples_per_s'] / one[arm['name'].split('_')[0]]:.2f}x | "
                     f"{arm['validation_seconds']:.2f} / {epoch:.2f} | {arm['valid_auc'][-1]:.4f} | "
                     f"{arm['test_auc']:.4f} | {'' if sent is None else f'{sent / 1e6:,.0f}'} | "
                     f"{_step_cell(arm)} |")
    return "\n".join(lines)


def _step_cell(arm):
    if arm.get("step_ms") is None:
        return ""
    alone = arm.get("exchange_ms_per_step")
    return f"{arm['step_ms']:.3f}" + ("" if alone is None else f" ({alone:.3f})")


def _told(arm, rank):
    """The arm, its line printed by the first rank as it ends (a run cut short still says how far it got)."""
    if arm is not None and rank == 0:
        print(f"{arm['name']}: {arm['samples_per_s'] / 1e6:.2f}M samples/s, epochs {arm['epoch_seconds']}, "
              f"validation {arm['validation_seconds']:.3f} s, test AUC {arm['test_auc']:.4f}", flush=True)
    return arm


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=4_000_000)
    parser.add_argument("--valid-rows", type=int, default=500_000)
    parser.add_argument("--baseline-rows", type=int, default=1_000_000)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=4096)
    parser.add_argument("--modes", default="replicated,sharded,hybrid")
    parser.add_argument("--no-baseline", action="store_true")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    ranks = init_ranks()
    if not torch.cuda.is_available() or ranks.backend not in (None, "nccl"):
        raise SystemExit("benchmarks/deep_ranks.py runs on GPUs: launch it with torchrun on a machine with CUDA")
    data = criteo_like(args.rows + 2 * args.valid_rows, model="fm", seed=args.seed, device=ranks.device)
    share = args.rows / data.n_rows
    train, valid, test = split(data, (share, (1 - share) / 2, (1 - share) / 2), seed=args.seed)
    del data
    one = first_ranks(ranks, 1)
    def told(arm):
        return _told(arm, ranks.rank)

    arms = [told(alac_arm("alac_1gpu", one, train, valid, test, args, "auto")),
            told(alac_arm("alac_1gpu_eager", one, train, valid, test, args, "auto", cuda_graphs=False))]
    # one rank (torchrun --nproc-per-node 1) runs the one-GPU arms alone
    several = ranks.world > 1
    for mode in args.modes.split(",") if several else ():
        arms.append(told(alac_arm(f"alac_{mode}", ranks, train, valid, test, args, mode)))
    if not args.no_baseline:
        few = train.take(torch.arange(args.baseline_rows, device=train.indptr.device))
        arms.append(told(torch_arm("torch_ddp_1gpu", one, few, valid, test, args)))
        if several:
            arms.append(told(torch_arm("torch_ddp", ranks, few, valid, test, args)))
    if ranks.world > 1:
        torch.distributed.barrier()
    if ranks.rank == 0:
        for arm in arms:
            arm["rows"] = args.baseline_rows if arm["name"].startswith("torch") else train.n_rows
        command = recorded_command(sys.argv[1:])
        payload = {"environment": environment(), "ranks": ranks.world, "command": command, "arms": arms,
                   "arguments": vars(args)}
        name = "deep_ranks" if ranks.world == 2 else f"deep_ranks_{ranks.world}gpu"
        write(name, payload, report(payload), args.out)
        print(report(payload), flush=True)


if __name__ == "__main__":
    main()
