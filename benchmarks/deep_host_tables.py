"""DeepFM whose tables exceed the GPU's budget for them: every row in host memory, the most-read rows
cached on the GPU (alac.nn.host_cached), and whose training rows stream from host memory
(alac.train.deep_steps), against the same fit with everything on the GPU and against the PyTorch
user's way of a table beyond the GPU (an nn.Embedding in host memory with sparse gradients and
torch.optim.Adagrad on the CPU, the MLP on the GPU); one process:
`PYTHONPATH=. python benchmarks/deep_host_tables.py [--scale 2]`.

The set: the Criteo Kaggle set's 26 categorical fields (alac.data.synthetic.kaggle_like: Zipf ids, its
cardinalities times `--scale`, labels from a planted FM), `--rows` training rows, `--valid-rows`
validation and test rows. Arms, `--epochs` epochs at `--batch-size` rows a step:
- alac_gpu: DeepTrainer with every row on the GPU;
- alac_host_<share>: DeepTrainer with the GPU budget (DeepSettings.gpu_memory) at each `--budgets` share
  of the tables' bytes: the rows in host memory, as many of the most read cached as the budget holds;
- alac_streamed, alac_host_<last share>_streamed: the training rows in host memory (stream_data), the
  tables on the GPU, or in host memory at the last budget;
- torch_host_table: the PyTorch DeepFM of benchmarks/deep_ranks.py, its table in host memory, on
  `--baseline-rows` rows (it is slower).
Per arm: `samples_per_s` (training rows over the median epoch's seconds), `epoch_seconds`,
`valid_auc` per epoch, `test_auc`, and for the host arms `budget_bytes`, `cached_rows`,
`cached_entry_share` (the training entries the cache served) and `staged_rows_per_step` (rows gathered
from host memory a step). Writes results/deep_host_tables.json and .md.
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
from alac.data.synthetic import kaggle_like
from alac.train.deep import DeepSettings, DeepTrainer
from alac.train.deep_ranks import table_row_bytes
from benchmarks.deep_ranks import HIDDEN, TABLE_LR, K, TorchDeepFM, _wait
from benchmarks.distributed import recorded_command
from benchmarks.report import environment, write


def alac_arm(name, train, valid, test, args, device, budget=None, stream=None):
    """DeepTrainer at the GPU budget `budget` (None: every row on the GPU), its training rows streamed
    from host memory where `stream` (train then on the CPU)."""
    settings = DeepSettings(model="deepfm", k=K, hidden=HIDDEN, lr=TABLE_LR, epochs=args.epochs,
                            batch_size=args.batch_size, patience=args.epochs, seed=args.seed, gpu_memory=budget,
                            stream_data=stream)
    trainer = DeepTrainer(settings, device)
    trainer.say = print
    started = time.perf_counter()
    trainer.fit(train, valid)
    _wait(device)
    wall = time.perf_counter() - started
    probability = trainer.predict(test)
    seconds = [record["seconds"] for record in trainer.history]
    arm = {"name": name, "rows": train.n_rows, "epoch_seconds": seconds, "streamed": bool(stream),
           "samples_per_s": train.n_rows / statistics.median(seconds), "fit_seconds": wall,
           "valid_auc": [record["valid_auc"] for record in trainer.history],
           "test_auc": float(metrics.auc(probability, test.labels.cpu() > 0.5)), "budget_bytes": budget}
    tables = trainer.network.tables
    if budget is not None:
        # the fit's counters: its training steps, its validations and the test's prediction
        steps = len(trainer.history) * -(-train.n_rows // args.batch_size)
        arm.update(cached_rows=tables.capacity,
                   cached_entry_share=tables.cached_entries / max(1, tables.cached_entries + tables.staged_entries),
                   staged_rows_per_step=tables.staged_rows / max(1, steps))
    return arm


def torch_arm(name, train, valid, test, args, device):
    """The PyTorch DeepFM, its table (and Adagrad) in host memory, the MLP on the GPU."""
    torch.manual_seed(args.seed)
    fields = train.indices.numel() // train.n_rows
    model = TorchDeepFM(train.n_features, fields)
    table = model.table
    model.table = torch.nn.Identity()
    model.to(device)
    sparse = torch.optim.Adagrad(table.parameters(), lr=TABLE_LR)
    dense = torch.optim.Adam(model.parameters(), lr=1e-3)
    ids = {s: d.indices.view(d.n_rows, fields).long().cpu() for s, d in (("train", train), ("valid", valid),
                                                                         ("test", test))}
    labels = {s: d.labels.float().to(device) for s, d in (("train", train), ("valid", valid), ("test", test))}

    def logits(part):
        return model(table(part).to(device, non_blocking=True))

    @torch.no_grad()
    def predicted(split_name):
        return torch.cat([torch.sigmoid(logits(part)) for part in ids[split_name].split(1 << 16)])

    generator = torch.Generator().manual_seed(args.seed)
    seconds, aucs = [], []
    for _ in range(args.epochs):
        order = torch.randperm(train.n_rows, generator=generator)
        _wait(device)
        started = time.perf_counter()
        for first in range(0, train.n_rows, args.batch_size):
            batch = order[first:first + args.batch_size]
            loss = torch.nn.functional.binary_cross_entropy_with_logits(logits(ids["train"][batch]),
                                                                        labels["train"][batch.to(device)])
            sparse.zero_grad()
            dense.zero_grad()
            loss.backward()
            sparse.step()
            dense.step()
        _wait(device)
        seconds.append(time.perf_counter() - started)
        aucs.append(float(metrics.auc(predicted("valid").cpu(), labels["valid"].cpu() > 0.5)))
    return {"name": name, "rows": train.n_rows, "epoch_seconds": seconds,
            "samples_per_s": train.n_rows / statistics.median(seconds), "valid_auc": aucs,
            "test_auc": float(metrics.auc(predicted("test").cpu(), labels["test"].cpu() > 0.5))}


def report(payload):
    env = payload["environment"]
    return (f"DeepFM k = {K} with its tables in host memory ({env['device']}, {env['date']}: "
            f"`PYTHONPATH=. python benchmarks/deep_host_tables.py {payload['command']}`; tables of "
            f"{payload['table_bytes'] / 1e9:.2f} GB, {payload['features']:,} rows)\n\n" + arms_table(payload))


def arms_table(payload):
    lines = ["| arm | training rows from | GPU budget for the tables | rows cached | entries the cache served | rows "
             "from host memory a step | training rows | samples/s | vs all on the GPU | valid AUC | test AUC |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    gpu = next(arm["samples_per_s"] for arm in payload["arms"] if arm["name"] == "alac_gpu")
    for arm in payload["arms"]:
        cache = ["", "", "", ""]
        if arm.get("cached_rows") is not None:
            cache = [f"{arm['budget_bytes'] / 1e9:.2f} GB", f"{arm['cached_rows']:,}",
                     f"{arm['cached_entry_share']:.1%}", f"{arm['staged_rows_per_step']:,.0f}"]
        source = "host memory" if arm.get("streamed") else "GPU" if arm["name"].startswith("alac") else ""
        lines.append(f"| {arm['name']} | {source} | {' | '.join(cache)} | {arm['rows']:,} | "
                     f"{arm['samples_per_s'] / 1e6:.3f}M | {arm['samples_per_s'] / gpu:.2f}x | "
                     f"{arm['valid_auc'][-1]:.4f} | {arm['test_auc']:.4f} |")
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=4_000_000)
    parser.add_argument("--valid-rows", type=int, default=500_000)
    parser.add_argument("--baseline-rows", type=int, default=200_000)
    parser.add_argument("--scale", type=int, default=1)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=4096)
    parser.add_argument("--budgets", default="0.5,0.2,0.05")
    parser.add_argument("--no-baseline", action="store_true")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("benchmarks/deep_host_tables.py runs on a GPU")
    device = torch.device("cuda")
    data = kaggle_like(args.rows + 2 * args.valid_rows, zipf=1.1, seed=args.seed, model="fm", k=K, device=device,
                       scale=args.scale)
    share = args.rows / data.n_rows
    train, valid, test = split(data, (share, (1 - share) / 2, (1 - share) / 2), seed=args.seed)
    del data
    fields = train.indices.numel() // train.n_rows
    table_bytes = train.n_features * table_row_bytes(DeepSettings(model="deepfm", k=K), fields)
    arms = []

    def told(arm):
        print(f"{arm['name']}: {arm['samples_per_s'] / 1e6:.3f}M samples/s, epochs {arm['epoch_seconds']}, "
              f"test AUC {arm['test_auc']:.4f}", flush=True)
        arms.append(arm)

    told(alac_arm("alac_gpu", train, valid, test, args, device))
    shares = [float(b) for b in args.budgets.split(",")]
    for budget_share in shares:
        told(alac_arm(f"alac_host_{budget_share:g}", train, valid, test, args, device, int(budget_share * table_bytes)))
    host_train = train.to("cpu")
    told(alac_arm("alac_streamed", host_train, valid, test, args, device, stream=True))
    told(alac_arm(f"alac_host_{shares[-1]:g}_streamed", host_train, valid, test, args, device,
                  int(shares[-1] * table_bytes), stream=True))
    if not args.no_baseline:
        few = train.take(torch.arange(args.baseline_rows, device=train.indptr.device))
        told(torch_arm("torch_host_table", few, valid, test, args, device))
    payload = {"environment": environment(), "command": recorded_command(sys.argv[1:]), "arms": arms,
               "table_bytes": table_bytes, "features": train.n_features, "arguments": vars(args)}
    write("deep_host_tables", payload, report(payload), args.out)
    print(report(payload), flush=True)


if __name__ == "__main__":
    main()
