"""Many feature fields: one nn.EmbeddingBag per field (eager and torch.compile) against alac's packed
tables (alac.nn.PackedEmbeddingBags), the same deep part on top, side by side in one process.

The set: `--fields` one-hot fields, field f of cardinality drawn in [10^3, 10^5) and a dim drawn from
{4, 8, 16, 32}, Zipf(1.1) ids, labels from a planted logistic model over hashed per-id weights (every
number counter-based: alac.counter_random). The model: every field's embedding, concatenated, into an
MLP (256, 128). Every arm trains `--steps` batches of `--batch-size` with AdaGrad on the tables (torch's
sparse-gradient Adagrad for the PyTorch arms, the tables' own step inside backward for alac) and Adam
on the MLP, then is scored on held-out rows. kernels_per_step: the GPU kernels one training step
launches (torch.profiler), None on a CPU.

FFM (benchmarks/ffm_arms.py): k = 4 against a plain PyTorch FFM in ms per epoch, and against FM on
iPinYou and criteo-tiny.

The alac arms' tables run their reference programs (torch); the *_kernels arms the same tables on
their generated kernels (alac.codegen.bag_kernels; *_async: each entry stepped at once), and
alac_packed_graphed the packed step on the kernels replayed from a CUDA graph (alac.nn's default on
a GPU, as alac train runs it).

The interleaving ablation (alac.nn.interleave): the packed arm's step in `--micro-batches` micro-batches
(D), with its lookups on a side stream (K), and both.

DeepFM (k = 16, the same MLP) in plain PyTorch (nn.Embedding with sparse gradients, row-wise AdaGrad)
against alac.nn.deep_models.DeepFM, `--deepfm-epochs` over the Criteo-shaped synthetic set (39 one-hot
fields, labels from a planted FM; `--deepfm-rows`) and over iPinYou's 16 fields when the shared data
are present (ALAC_SHARED_DATA or ../shared/data), scored on its held-out rows and test set.
alac's DeepFM and FFM steps are replayed from CUDA graphs (alac.nn.GraphedStep), as alac train runs
them; the plain PyTorch ones cannot be captured (their sparse gradients are coalesced to sizes read
from the data).

    PYTHONPATH=. python benchmarks/fields.py --out $OUT            # GPU, 200 fields
    PYTHONPATH=. python benchmarks/fields.py --parts synthetic --out A; ... --parts deepfm,ffm --out B
    PYTHONPATH=. python benchmarks/fields.py --merge A/fields.json B/fields.json  # into results/
    PYTHONPATH=. python benchmarks/fields.py --device cpu --fields 12 --steps 4 --batch-size 256   # smoke
"""

from __future__ import annotations

import argparse
import math
import os
import time
from pathlib import Path

import torch

from alac import metrics
from alac.counter_random import normal, uniform
from alac.data import load_libsvm
from alac.data.synthetic import criteo_like
from alac.nn import GraphedStep, KeyedBags, PackedEmbeddingBags, Table, whole_step
from alac.nn.deep_models import DeepFM, mlp
from alac.nn.interleave import Interleaving, interleaved_step, split_rows
from benchmarks.render import fields_table
from benchmarks.report import environment, merge, write

DIMS = (4, 8, 16, 32)
SEED = 7
# counter-based streams of the set: cardinalities, dims, ids, planted weights (two), labels
_CARDINALITY, _DIM, _ID, _W1, _W2, _LABEL = range(6)
HIDDEN = (256, 128)
DEEPFM_K = 16
# the groups of arms, each runnable in its own process (--parts) and merged after (--merge)
PARTS = ("synthetic", "deepfm", "ffm")
SHARED_DATA = Path(os.environ.get("ALAC_SHARED_DATA", Path(__file__).resolve().parents[2] / "shared" / "data"))
TABLE_LR, MLP_LR = 0.05, 1e-3


def field_shapes(n_fields):
    """(cardinality, dim) of every field."""
    counters = torch.arange(n_fields, dtype=torch.int64)
    cardinality = (10 ** (3 + 2 * uniform(SEED, _CARDINALITY, counters))).long()
    dims = torch.tensor(DIMS)[(uniform(SEED, _DIM, counters) * len(DIMS)).long()]
    return list(zip(cardinality.tolist(), dims.tolist()))


def rows(shapes, first, count, device):
    """Ids [count, F] (field-local), labels [count] of rows first .. first + count - 1."""
    n_fields = len(shapes)
    cardinality = torch.tensor([c for c, _ in shapes], dtype=torch.float64, device=device)
    counters = torch.arange(first * n_fields, (first + count) * n_fields, dtype=torch.int64, device=device)
    u = uniform(SEED, _ID, counters).view(count, n_fields)
    power = 1 - 1.1          # Zipf(1.1) by the continuous inverse CDF, as alac.data.synthetic.kaggle_like
    ids = torch.floor((((cardinality + 1) ** power - 1) * u + 1) ** (1 / power)) - 1
    ids = torch.minimum(ids.long(), cardinality.long() - 1)
    offsets = torch.cumsum(torch.cat([torch.zeros(1, device=device), cardinality[:-1]]), 0).long()
    weights = normal(SEED, (_W1, _W2), ids + offsets) * (2.0 / math.sqrt(n_fields))
    probability = torch.sigmoid(weights.sum(1) - 1.0)
    labels = (uniform(SEED, _LABEL, torch.arange(first, first + count, device=device)) < probability).float()
    return ids, labels


class PerField(torch.nn.Module):
    """One nn.EmbeddingBag per field (sparse gradients), concatenated into the MLP."""

    def __init__(self, shapes):
        super().__init__()
        self.bags = torch.nn.ModuleList(torch.nn.EmbeddingBag(c, d, mode="sum", sparse=True) for c, d in shapes)
        for bag in self.bags:
            torch.nn.init.normal_(bag.weight, std=0.01)
        self.deep = mlp([sum(d for _, d in shapes), *HIDDEN, 1])

    def forward(self, ids):
        offsets = torch.arange(ids.shape[0], device=ids.device)
        pooled = [bag(ids[:, f], offsets) for f, bag in enumerate(self.bags)]
        return self.deep(torch.cat(pooled, 1)).squeeze(1)

    def optimizers(self):
        return [torch.optim.Adagrad(list(self.bags.parameters()), lr=TABLE_LR),
                torch.optim.Adam(self.deep.parameters(), lr=MLP_LR)]


class GraphedSteps:
    """A model whose train_step replays a CUDA graph of the whole step on a GPU (alac.nn.GraphedStep),
    as alac.train.deep trains: Adam steps on the GPU inside the graph (capturable)."""

    _graphed = None

    def dense_optimizer(self, parameters):
        parameters = list(parameters)
        return torch.optim.Adam(parameters, lr=MLP_LR, capturable=parameters[0].is_cuda)

    def graphed_step(self, optimizers, ids, labels):
        if self._graphed is None:
            self._graphed = GraphedStep(whole_step(
                lambda ids, labels: torch.nn.functional.binary_cross_entropy_with_logits(self(ids), labels),
                optimizers))
        self._graphed(ids, labels)


class Packed(GraphedSteps, torch.nn.Module):
    """alac's packed tables (one SparseAggregate per dim), concatenated into the same MLP; a step
    interleaved as `interleaving` says (alac.nn.interleave: D micro-batches, K a side stream), or
    replayed from a CUDA graph (graphed)."""

    def __init__(self, shapes, device, interleaving=None, backend="reference", graphed=False, interleave_packs=True):
        super().__init__()
        self.interleaving, self.graphed = interleaving, graphed
        self.names = [f"f{f}" for f in range(len(shapes))]
        self.tables = PackedEmbeddingBags([Table(name, c, d, lr=TABLE_LR) for name, (c, d) in zip(self.names, shapes)],
                                          seed=SEED, device=device, backend=backend,
                                          interleave_packs=interleave_packs)
        self.deep = mlp([sum(d for _, d in shapes), *HIDDEN, 1]).to(device)
        self.columns = torch.tensor([self.names.index(key) for key in self.tables.keys], device=device)
        self.tables.check_batches = False      # valid ids by construction (as the DeepFM arms)

    def forward(self, ids):
        return self._dense(self._sparse(ids))

    def _sparse(self, ids):
        # every field's ids in one KeyedBags, its keys in the packs' order (no reordering inside)
        return self.tables(KeyedBags.one_hot(self.tables.keys, ids[:, self.columns]))

    def _dense(self, pooled):
        return self.deep(torch.cat([pooled[name] for name in self.names], 1)).squeeze(1)

    @property
    def own_step(self):
        """Its step is train_step's: replayed or interleaved."""
        return self.graphed or self.interleaving is not None

    def optimizers(self):
        if self.graphed:
            return [self.dense_optimizer(self.deep.parameters())]
        return [torch.optim.Adam(self.deep.parameters(), lr=MLP_LR)]

    def train_step(self, optimizers, ids, labels):
        """One step replayed from a graph, or in the interleaved schedule (the same result as _step's,
        tests/nn/test_interleave.py)."""
        if self.graphed:
            self.graphed_step(optimizers, ids, labels)
            return
        rows = ids.shape[0]

        def dense(pooled, part):
            first, end = part
            loss = torch.nn.functional.binary_cross_entropy_with_logits(self._dense(pooled), labels[first:end])
            return (end - first) / rows * loss

        for optimizer in optimizers:
            optimizer.zero_grad()
        interleaved_step(self.tables, split_rows(rows, self.interleaving.micro_batches),
                         lambda part: self._sparse(ids[part[0]:part[1]]), dense, self.interleaving)
        for optimizer in optimizers:
            optimizer.step()


def _synchronize(device):
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


def _step(model, optimizers, ids, labels):
    if getattr(model, "own_step", False):
        model.train_step(optimizers, ids, labels)
        return
    loss = torch.nn.functional.binary_cross_entropy_with_logits(model(ids), labels)
    for optimizer in optimizers:
        optimizer.zero_grad()
    loss.backward()
    for optimizer in optimizers:
        optimizer.step()


def _kernels_per_step(model, optimizers, ids, labels, device):
    if torch.device(device).type != "cuda":
        return None
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        _step(model, optimizers, ids, labels)
        torch.cuda.synchronize()
    return sum(1 for event in prof.events() if event.device_type == torch.autograd.DeviceType.CUDA)


def arm(name, model, call, batch_of, valid, args, data="synthetic", steps=None, batch_size=None):
    """An arm's figures after `steps` timed batches (args.steps) of batch_size rows (the argument's):
    batch_of(first, count) gives the (ids, labels) of training rows, valid the held-out (ids, labels)."""
    device = args.device
    steps = args.steps if steps is None else steps
    batch_size = args.batch_size if batch_size is None else batch_size
    optimizers = model.optimizers()
    step = 0

    def batch(first):
        return batch_of(first, batch_size)

    for _ in range(args.warmup):           # compiles and warms the caches off the clock
        _step(call, optimizers, *batch(step * batch_size))
        step += 1
    kernels = _kernels_per_step(call, optimizers, *batch(step * batch_size), device)
    step += 1
    batches = [batch((step + i) * batch_size) for i in range(steps)]
    _synchronize(device)
    started = time.perf_counter()
    for ids, labels in batches:
        _step(call, optimizers, ids, labels)
    _synchronize(device)
    seconds = time.perf_counter() - started
    ids, labels = valid
    with torch.no_grad():
        probability = torch.cat([torch.sigmoid(call(ids[s:s + batch_size]))
                                 for s in range(0, ids.shape[0], batch_size)])
    positive = labels > 0.5
    result = {"name": name, "data": data, "fields": ids.shape[1], "kernels_per_step": kernels,
              "samples_per_s": steps * batch_size / seconds, "seconds": seconds, "steps": steps,
              "auc": float(metrics.auc(probability, positive)),
              "logloss": float(metrics.logloss(probability, positive)),
              # whether its steps were replayed from a CUDA graph (captured, not only asked for)
              "cuda_graphs": bool(getattr(model, "_graphed", None) and model._graphed.graphs)}
    print(result, flush=True)
    return result


class RowwiseAdagrad(torch.optim.Optimizer):
    """Row-wise AdaGrad on sparse embedding gradients, in torch: one accumulator per row fed the row's
    mean squared gradient (FBGEMM's EXACT_ROWWISE_ADAGRAD, TorchRec's usual table optimizer, and
    alac's AdaGrad), eps = 4 / B as alac's default for unit values."""

    def __init__(self, params, lr, batch_size):
        super().__init__(params, {"lr": lr, "eps": 4.0 / batch_size})

    @torch.no_grad()
    def step(self):
        for group in self.param_groups:
            for param in group["params"]:
                if param.grad is None:
                    continue
                grad = param.grad.coalesce()
                rows, values = grad.indices()[0], grad.values()
                state = self.state[param]
                if "sum" not in state:
                    state["sum"] = torch.zeros(param.shape[0], device=param.device)
                state["sum"].index_add_(0, rows, (values * values).mean(1))
                scale = state["sum"][rows].sqrt() + group["eps"]
                param.index_add_(0, rows, -group["lr"] * values / scale[:, None])


class PlainDeepFM(torch.nn.Module):
    """DeepFM in plain PyTorch on one-hot ids [B, F]: nn.Embedding tables with sparse gradients and
    row-wise AdaGrad, the FM's interactions and the MLP on the concatenated field embeddings (Adam)."""

    def __init__(self, n_features, n_fields, k, batch_size):
        super().__init__()
        self.batch_size = batch_size
        self.w = torch.nn.Embedding(n_features, 1, sparse=True)
        self.v = torch.nn.Embedding(n_features, k, sparse=True)
        torch.nn.init.zeros_(self.w.weight)
        torch.nn.init.normal_(self.v.weight, std=0.01)
        self.deep = mlp([n_fields * k, *HIDDEN, 1])
        self.bias = torch.nn.Parameter(torch.zeros(1))

    def forward(self, ids):
        v = self.v(ids)
        interactions = 0.5 * (v.sum(1) ** 2 - (v**2).sum(1)).sum(1)
        return self.bias + self.w(ids).sum((1, 2)) + interactions + self.deep(v.flatten(1)).squeeze(1)

    def optimizers(self):
        return [RowwiseAdagrad([self.w.weight, self.v.weight], TABLE_LR, self.batch_size),
                torch.optim.Adam([*self.deep.parameters(), self.bias], lr=MLP_LR)]


class OneHotFields(GraphedSteps, torch.nn.Module):
    """An alac field model (self.model) on one-hot ids [B, F], given to it as CSR with the field of
    every entry, trained as alac.train.deep trains it: each step replayed from a CUDA graph on a GPU
    (alac.nn.GraphedStep). The benchmark's ids are valid by construction: its tables skip the
    per-batch host check (nn.Embedding's own index check is a device-side assert, no round trip)."""

    def __init__(self, model):
        super().__init__()
        self.model = model
        self.model.tables.check_batches = False

    own_step = True        # replayed from a graph, as alac.train.deep trains

    def train_step(self, optimizers, ids, labels):
        self.graphed_step(optimizers, ids, labels)

    def forward(self, ids):
        rows, n_fields = ids.shape
        offsets = torch.arange(0, rows * n_fields + 1, n_fields, device=ids.device)
        fields = torch.arange(n_fields, device=ids.device).repeat(rows)
        return self.model(ids.reshape(-1), offsets, fields)


def kernels_backend(args):
    """The tables' generated kernels: compiled on a GPU, Triton's interpreter on a CPU (smoke runs)."""
    return "triton" if torch.device(args.device).type == "cuda" else "interpret"


class AlacDeepFM(OneHotFields):
    """alac.nn.deep_models.DeepFM: the same architecture, its tables stepped by AdaGrad inside backward."""

    def __init__(self, n_features, n_fields, k, device, backend="reference"):
        super().__init__(DeepFM(n_features, n_fields, k=k, hidden=HIDDEN, optimizer="adagrad", lr=TABLE_LR,
                                seed=SEED, device=device, backend=backend))

    def optimizers(self):
        return [self.dense_optimizer([*self.model.deep.parameters(), self.model.bias])]


def deepfm_sets(args):
    """{name: (train ids [N, F], train labels, valid ids, valid labels, n_features)}: the Criteo-shaped
    synthetic set (39 one-hot fields, labels from a planted FM) and iPinYou (16 fields by position)
    when the shared data are present."""
    rows = args.deepfm_rows + args.valid_rows
    data = criteo_like(rows, n_fields=39, seed=SEED, model="fm", device=args.device)
    ids, labels = data.indices.long().view(rows, 39), data.labels.float()
    cut = args.deepfm_rows
    sets = {"criteo_like": (ids[:cut], labels[:cut], ids[cut:], labels[cut:], data.n_features, args.batch_size,
                            args.deepfm_epochs)}
    folder = SHARED_DATA / "ipinyou"
    if folder.exists():
        train, test = (load_libsvm(folder / name) for name in ("train.fm.txt", "test.fm.txt"))
        n_features = max(train.n_features, test.n_features)
        sets["ipinyou"] = tuple(t.to(args.device) for t in (train.indices.long().view(-1, 16), train.labels.float(),
                                                            test.indices.long().view(-1, 16), test.labels.float())) \
            + (n_features, args.ipinyou_batch_size, args.ipinyou_epochs)
    return sets


def deepfm_arms(args):
    """Plain PyTorch and alac DeepFM on each set, args.deepfm_epochs epochs of its rows (in order,
    batches wrapping round) after the warm-up batches."""
    arms = []
    for name, (ids, labels, valid_ids, valid_labels, n_features, batch_size, epochs) in deepfm_sets(args).items():
        def batch_of(first, count, ids=ids, labels=labels):
            rows = (first + torch.arange(count, device=ids.device)) % ids.shape[0]
            return ids[rows], labels[rows]

        steps = math.ceil(epochs * ids.shape[0] / batch_size)

        torch.manual_seed(SEED)
        plain = PlainDeepFM(n_features, ids.shape[1], DEEPFM_K, batch_size).to(args.device)
        arms.append(arm("pytorch_deepfm", plain, plain, batch_of, (valid_ids, valid_labels), args, name, steps,
                        batch_size))
        torch.manual_seed(SEED)
        for arm_name, backend in (("alac_deepfm", "reference"), ("alac_deepfm_kernels", kernels_backend(args))):
            torch.manual_seed(SEED)
            ours = AlacDeepFM(n_features, ids.shape[1], DEEPFM_K, args.device, backend)
            arms.append(arm(arm_name, ours, ours, batch_of, (valid_ids, valid_labels), args, name, steps,
                            batch_size))
    return arms


def command(arguments):
    """The command line of a run with these arguments (those that differ from the defaults)."""
    options = (f" --parts {','.join(arguments['parts'])}" if arguments.get("parts", PARTS) != list(PARTS) else "") + \
        (" --no-compile" if arguments.get("no_compile") else "") + \
        (f" --steps {arguments['steps']}" if arguments.get("steps", 200) != 200 else "")
    return f"PYTHONPATH=. python benchmarks/fields.py{options}"


def report(payload):
    env = payload["environment"]
    commands = "; ".join(f"`{command(run)}`" for run in payload.get("runs", [payload["arguments"]]))
    return f"Many fields ({env['device']}, {env['date']}; {commands})\n\n" + fields_table(payload)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fields", type=int, default=200)
    parser.add_argument("--batch-size", type=int, default=4096)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--valid-rows", type=int, default=50_000)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--no-compile", action="store_true", help="leave out the torch.compile arm")
    parser.add_argument("--deepfm-rows", type=int, default=2_000_000,
                        help="training rows of the Criteo-shaped DeepFM set (0: no DeepFM arms)")
    parser.add_argument("--deepfm-epochs", type=float, default=2.0)
    parser.add_argument("--ffm-rows", type=int, default=4_000_000,
                        help="rows of the FFM speed set (0: no FFM arms; benchmarks/ffm_arms.py)")
    parser.add_argument("--ffm-fields", type=int, default=39)
    parser.add_argument("--micro-batches", type=int, default=4, help="D-interleaving's micro-batches per step")
    # iPinYou's 26,773 rows: batches of 4096 would give 7 steps an epoch
    parser.add_argument("--ipinyou-batch-size", type=int, default=256)
    parser.add_argument("--ipinyou-epochs", type=float, default=5.0)
    parser.add_argument("--parts", type=lambda text: text.split(","), default=list(PARTS),
                        help=f"comma-separated, of {','.join(PARTS)}")
    parser.add_argument("--merge", nargs="+", metavar="JSON", help="write one result of these runs' fields.json")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    if args.merge:
        payload = merge(args.merge, "fields.py")
        write("fields", payload, report(payload), args.out)
        print(report(payload))
        return
    unknown = set(args.parts) - set(PARTS)
    if unknown:
        parser.error(f"--parts: unknown {', '.join(sorted(unknown))}; choose from {', '.join(PARTS)}")
    shapes = field_shapes(args.fields)
    torch.manual_seed(SEED)
    def batch_of(first, count):
        return rows(shapes, first, count, args.device)

    arms = synthetic_arms(shapes, batch_of, args) if "synthetic" in args.parts else []
    if args.deepfm_rows and "deepfm" in args.parts:
        arms += deepfm_arms(args)
    if args.ffm_rows and "ffm" in args.parts:
        from benchmarks.ffm_arms import quality_arms, speed_arms

        arms += speed_arms(args) + quality_arms(args)
    payload = {"environment": environment(), "arguments": vars(args), "arms": arms}
    write("fields", payload, report(payload), args.out)
    print(report(payload))


def synthetic_arms(shapes, batch_of, args):
    """Per-field PyTorch (eager, compiled) against the packed tables and their interleavings."""
    valid = rows(shapes, 10**9, args.valid_rows, args.device)
    per_field = PerField(shapes).to(args.device)
    arms = [arm("pytorch_per_field", per_field, per_field, batch_of, valid, args)]
    if not args.no_compile:
        torch.manual_seed(SEED)
        compiled = PerField(shapes).to(args.device)
        arms.append(arm("pytorch_per_field_compiled", compiled, torch.compile(compiled), batch_of, valid, args))
    # every alac arm from the same initial MLP (the tables are seeded by SEED)
    for name, backend, graphed in (("alac_packed", "reference", False),
                                   ("alac_packed_kernels", kernels_backend(args), False),
                                   ("alac_packed_graphed", kernels_backend(args), True)):
        torch.manual_seed(SEED)
        packed = Packed(shapes, args.device, backend=backend, graphed=graphed)
        arms.append(arm(name, packed, packed, batch_of, valid, args))
    # PICASSO's interleaving ablation: D micro-batches, K lookups on a side stream, both
    for name, interleaving in (("alac_packed_D", Interleaving(args.micro_batches)),
                               ("alac_packed_K", Interleaving(1, side_stream=True)),
                               ("alac_packed_KD", Interleaving(args.micro_batches, side_stream=True))):
        torch.manual_seed(SEED)
        model = Packed(shapes, args.device, interleaving)
        arms.append(arm(name, model, model, batch_of, valid, args))
    return arms


if __name__ == "__main__":
    main()
