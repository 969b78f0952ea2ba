"""Training a model from the command line: `python models/lr.py --train FILE --test FILE ...` and
`alac train --model lr --train FILE ... --out DIR` run the same code.

Without --train the model trains on the built-in synthetic Criteo-shaped data (4M rows on a GPU,
200k on a CPU), split 80/10/10 into train / validation / test. Prints one line per epoch (with a
progress bar on a terminal) and ends with one JSON line of final test metrics. With --out DIR it
also writes DIR/metrics.json, DIR/history.csv, the checkpoint DIR/model.alac and, with --plot,
DIR/loss.png.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import math
import os
import sys
from pathlib import Path

from alac.errors import AlacError

MODELS_DIR = Path(__file__).resolve().parent.parent / "models"


CHECKPOINT_NAME = "model.alac"


def parser_for(description, module=None, parser=None):
    """The training options; with a zoo module, also its model options (--l1, --l2, ARGUMENTS)."""
    parser = parser or argparse.ArgumentParser(description=description)
    parser.add_argument("--train", help="training file (LIBSVM, libffm or Criteo TSV)")
    parser.add_argument("--test", help="test file, in the training file's feature space")
    parser.add_argument("--valid", help="validation file, evaluated after every epoch")
    parser.add_argument("--format", default="auto", choices=["auto", "libsvm", "libffm", "criteo"])
    parser.add_argument("--n-features", type=int, default=None, help="declared feature count (LIBSVM)")
    parser.add_argument("--normalize", action="store_true",
                        help="scale every row to unit L2 norm (for long real-valued rows such as text counts)")
    parser.add_argument("--synthetic", type=int, default=None, metavar="ROWS",
                        help="rows of synthetic data when no --train is given (default: 4M on a GPU, 200k on a CPU)")
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--lr", type=float, default=None,
                        help="learning rate of the batch-mean gradient (default: the model's)")
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--chunk-size", type=int, default=None, help="samples per program (default: plan's)")
    parser.add_argument("--kernels", default="fused", choices=["fused", "stage"])
    parser.add_argument("--mode", default="sync", choices=["sync", "async"],
                        help="sync: exact mini-batch SGD; async: lock-free persistent programs (lr means the same)")
    parser.add_argument("--hot-size", type=int, default=None, metavar="H",
                        help="hot segment: the H most frequent features are summed inside a program before "
                             "they reach memory (default: the planner's H in async mode on a GPU, else 0)")
    parser.add_argument("--flush-every", type=int, default=8, metavar="K",
                        help="async hot segment: chunks between a program's flushes of its hot sums")
    parser.add_argument("--backend", default="triton", choices=["triton", "interpret", "reference"],
                        help="triton (GPU; falls back to reference without one), interpret (the generated "
                             "kernels in Triton's CPU interpreter, slow), reference (PyTorch)")
    parser.add_argument("--seed", type=int, default=0)
    from alac.optimizers import OPTIMIZERS
    from alac.runtime.schedule import SCHEDULES

    parser.add_argument("--optimizer", default="sgd", choices=sorted(OPTIMIZERS))
    for name in sorted({h for o in OPTIMIZERS.values() for h in o.hyper}):
        parser.add_argument(f"--{name.replace('_', '-')}", type=float, default=None,
                            help="optimizer hyper-parameter of " + ", ".join(
                                o.name for o in OPTIMIZERS.values() if name in o.hyper))
    parser.add_argument("--schedule", default="constant", choices=SCHEDULES, help="learning-rate schedule")
    parser.add_argument("--decay", type=float, default=0.0,
                        help="schedule decay: inverse lr / (1 + decay t)^power, epoch_decay lr * decay^epoch")
    parser.add_argument("--power", type=float, default=0.5, help="inverse schedule's power")
    parser.add_argument("--early-stopping", default=None, choices=["cuwide", "patience"],
                        help="cuwide: stop when the validation loss exceeds the mean of the last 10 epochs; "
                             "patience: after --patience epochs without a new best (the best model is restored)")
    parser.add_argument("--patience", type=int, default=5)
    parser.add_argument("--unseen", default="ignore", choices=["ignore", "error"],
                        help="validation/test features the training data never had: ignore them (counted) or fail")
    parser.add_argument("--out", metavar="DIR", help="write metrics.json, history.csv and the checkpoint here")
    parser.add_argument("--plot", action="store_true", help="with --out: also DIR/loss.png")
    if module is not None:
        parser.add_argument("--l2", type=float, default=0.0,
                            help="L2 coefficient (in the gradient, per occurrence; FTRL: in its closed form)")
        parser.add_argument("--l1", type=float, default=0.0, help="L1 coefficient (optimizers ftrl and sgd)")
        parser.add_argument("--exact-l2", action="store_true",
                            help="apply --l2 as a decay of every row after every batch (sync), not lazily")
        for flag, spec in getattr(module, "ARGUMENTS", ()):
            parser.add_argument(flag, **spec)
    return parser


def model_arguments(module, args):
    """The model's own options from parsed arguments (what a checkpoint needs to rebuild it)."""
    names = ["l1", "l2"] + [flag.lstrip("-").replace("-", "_") for flag, _ in getattr(module, "ARGUMENTS", ())]
    return {name: getattr(args, name) for name in names if hasattr(args, name)}


def _load_data(args, model):
    import torch

    from alac.data import formats
    from alac.data.split import split
    from alac.data.synthetic import criteo_like

    if args.train is None:
        rows = args.synthetic or (4_000_000 if torch.cuda.is_available() else 200_000)
        data = criteo_like(rows, seed=args.seed)
        train, valid, test = split(data, (0.8, 0.1, 0.1), seed=args.seed)
        return train, valid, test, f"synthetic Criteo-shaped, {rows:,} rows (80/10/10 split)"
    format = formats.resolve_format(args.train, args.format)
    paths = [p for p in (args.train, args.valid, args.test) if p is not None]
    options = {}
    if format in ("libsvm", "libffm") and args.n_features is not None:
        options["n_features"] = args.n_features
    if format == "libsvm":
        from alac.data import load_libsvm_files

        loaded = load_libsvm_files(paths, **options)
    elif format == "libffm":
        from alac.data import load_libffm_files

        loaded = load_libffm_files(paths, **options)
    else:
        loaded = [formats.load(p, format) for p in paths]
    if args.normalize:
        loaded = [dataset.normalize_rows() for dataset in loaded]
    train = loaded.pop(0)
    valid = loaded.pop(0) if args.valid else None
    test = loaded.pop(0) if args.test else None
    return train, valid, test, f"{args.train} ({format}{', rows L2-normalized' if args.normalize else ''})"


def _format_record(record):
    parts = [f"epoch {record['epoch']:>3}", f"train loss {record['train_loss']:.5f}"]
    parts += [f"{k.replace('_', ' ', 1)} {v:.5f}" for k, v in record.items() if k.startswith(("valid_", "test_"))]
    parts.append(f"{1000 * record['seconds']:.1f} ms ({record['rows_per_s']:,.0f} rows/s)")
    return "  ".join(parts)


def build_model(module, args=None):
    """The model of a zoo module (its MODEL class), with its ARGUMENTS, --l2 and --l1 from args or defaults."""
    options = {"l2": getattr(args, "l2", 0.0), "l1": getattr(args, "l1", 0.0)}
    for flag, spec in getattr(module, "ARGUMENTS", ()):
        name = flag.lstrip("-").replace("-", "_")
        options[name] = getattr(args, name, spec.get("default"))
    return module.MODEL(**options)


def main(module_name):
    """The entry point of a zoo file: `if __name__ == "__main__": main(__name__)`."""
    sys.exit(run_module(sys.modules[module_name]))


def run_module(module, argv=None, model_reference=None):
    """Parse the command line, train the module's model, print epochs and the final JSON line.

    A zoo module defines MODEL (a Model class taking l1=, l2= and its ARGUMENTS as keywords),
    DEFAULT_LR (a number, or a function of the parsed arguments) and optionally ARGUMENTS
    [(flag, argparse keywords)].
    """
    args = parser_for(module.__doc__, module).parse_args(argv)
    return run_parsed(module, args, model_reference or getattr(module, "__file__", None))


def run_parsed(module, args, model_reference):
    if args.lr is None:
        from alac.optimizers import OPTIMIZERS

        optimizer = OPTIMIZERS[args.optimizer]
        default = module.DEFAULT_LR
        default = default(args) if callable(default) else default
        args.lr = optimizer.default_lr if optimizer.default_lr is not None else default * optimizer.lr_factor
    if args.backend == "interpret":
        # Triton picks the interpreter when it is first imported, which has not happened yet.
        os.environ["TRITON_INTERPRET"] = "1"
    try:
        return _run(args, module, model_reference)
    except AlacError as error:
        print(f"alac: error: {error}", file=sys.stderr)
        return 2


class _Progress:
    """One line per epoch on stdout (the epoch table); on a terminal also a bar on stderr."""

    def __init__(self, epochs):
        self.epochs = epochs
        self.live = sys.stderr.isatty()

    def __call__(self, record):
        if self.live:
            done = int(30 * record["epoch"] / max(self.epochs, 1))
            print(f"\r[{'#' * done}{'.' * (30 - done)}] epoch {record['epoch']}/{self.epochs}  "
                  f"{record['rows_per_s']:,.0f} rows/s  loss {record['train_loss']:.5f}", end="", file=sys.stderr)
            if record["epoch"] >= self.epochs:
                print(file=sys.stderr)
        print(_format_record(record), flush=True)


def _run(args, module, model_reference):
    from alac.ir.trace import trace
    from alac.optimizers import get_optimizer
    from alac.plan import Plan
    from alac.runtime.executor import resolve_backend
    from alac.runtime.planner import hot_segment_for_data
    from alac.runtime.schedule import LearningRateSchedule
    from alac.train import Trainer, TrainingDiverged

    model = build_model(module, args)
    optimizer_class = get_optimizer(args.optimizer).__class__
    optimizer = optimizer_class(**{h: getattr(args, h) for h in optimizer_class.hyper if getattr(args, h) is not None})
    plan_options = {"batch_size": args.batch_size, "kernels": args.kernels, "semantics": args.mode,
                    "flush_every": args.flush_every}
    if args.hot_size is not None:
        plan_options["hot_size"] = args.hot_size
    if args.chunk_size:
        plan_options["chunk_size"] = args.chunk_size
    elif args.mode == "async" and args.backend == "triton":
        # async with the hot segment: C = 32 was the fastest at the best validation logloss in the
        # plan sweep on H100 (benchmarks/results/flow_sweep.md: LR 7.8 ms at C = 32, 10.7 at 16)
        # (the largest power of two up to 32 that divides the batch, as a plan needs)
        plan_options["chunk_size"] = math.gcd(32, args.batch_size)
    elif args.backend == "interpret":
        # The interpreter runs programs one after another: one program per batch is fastest.
        plan_options["chunk_size"] = args.batch_size
    plan = Plan(**plan_options)
    train, valid, test, described = _load_data(args, model)
    if args.hot_size is None:
        backend, device = resolve_backend(args.backend)
        if backend == "triton":
            # the traced model has k; its derivation (the Trainer's lowering) is not needed for it
            plan = hot_segment_for_data(train, plan, device, trace(model).factor_size)
    trainer = Trainer(model, lr=args.lr, epochs=args.epochs, plan=plan, backend=args.backend, seed=args.seed,
                      log=_Progress(args.epochs), optimizer=optimizer,
                      schedule=LearningRateSchedule(args.schedule, args.decay, args.power), exact_l2=args.exact_l2,
                      early_stopping=args.early_stopping, patience=args.patience, unseen=args.unseen)
    print(f"model {model.model_name()} on {described}: {train.n_rows:,} training rows, "
          f"{train.n_features:,} features; backend {trainer.backend} on {trainer.device}; {plan.describe()}; "
          f"lr {args.lr}, {optimizer.describe()}, schedule {trainer.executor.schedule.describe()}", flush=True)
    diverged = None
    try:
        trainer.fit(train, valid, report=test)
    except TrainingDiverged as error:
        diverged = error
        print(f"alac: {error}", file=sys.stderr)
    if trainer.stopped_because and not diverged:
        print(f"stopped after epoch {trainer.epoch}: {trainer.stopped_because}; the best epoch's model is kept")
    final = trainer.evaluate(test if test is not None else (valid if valid is not None else train))
    if args.l1:
        zeros = trainer.zero_share()
        print(f"exactly-zero weights: {100 * zeros:.2f}% of {trainer.n_features:,} features' parameters")
        final["zero_share"] = zeros
    if trainer.unseen_entries:
        final["unseen_entries"] = trainer.unseen_entries
    print(json.dumps({k: round(v, 6) for k, v in final.items()}))
    if args.out:
        _write_outputs(args, module, model_reference, trainer, final, train)
    return 3 if diverged else 0


def _data_options(args, train):
    base = dict(train.source.options).get("base")
    return {"format": train.source.format if train.source.format in ("libsvm", "libffm", "criteo") else args.format,
            "n_features": args.n_features, "normalize": args.normalize,
            "zero_based": None if base is None else base == 0}


def _write_outputs(args, module, model_reference, trainer, final, train):
    import csv

    from alac import checkpoint

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    spec = {"model": str(model_reference), "arguments": model_arguments(module, args)}
    checkpoint.save(trainer, out / CHECKPOINT_NAME, spec, _data_options(args, train))
    (out / "metrics.json").write_text(json.dumps(final, indent=2) + "\n")
    keys = sorted({k for record in trainer.history for k in record}, key=lambda k: (k != "epoch", k))
    with open(out / "history.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=keys)
        writer.writeheader()
        writer.writerows(trainer.history)
    if args.plot:
        plot_history(trainer.history, out / "loss.png", f"{trainer.executor.ir.name}: loss per split")
    print(f"wrote {out}/metrics.json, history.csv, {CHECKPOINT_NAME}" + (", loss.png" if args.plot else ""))


def plot_history(history, path, title):
    """Train and validation loss against epoch and against training wall time: one curve per split."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    epochs = [r["epoch"] for r in history]
    wall, total = [], 0.0
    for record in history:
        total += record["seconds"]
        wall.append(total)
    curves = [k for k in ("valid_logloss", "valid_rmse", "test_logloss", "test_rmse") if history and k in history[0]]
    figure, axes = plt.subplots(1, 2, figsize=(10, 4))
    for axis, x, label in ((axes[0], epochs, "epoch"), (axes[1], wall, "training wall time (s)")):
        axis.plot(x, [r["train_loss"] for r in history], marker="o", label="train loss (running, per epoch)")
        for key in curves:
            split, metric = key.split("_", 1)
            axis.plot(x, [r[key] for r in history], marker="s",
                      label=f"{'validation' if split == 'valid' else 'test'} {metric}")
        axis.set_xlabel(label)
        axis.set_ylabel("loss")
        axis.grid(alpha=0.3)
        axis.legend()
    figure.suptitle(title)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return figure


def load_model_file(name_or_path):
    """The module of a zoo model: a name in models/ (lr, fm, ...) or a path to a .py file."""
    path = Path(name_or_path)
    if not path.suffix:
        path = MODELS_DIR / f"{name_or_path}.py"
    if not path.is_file():
        known = ", ".join(sorted(p.stem for p in MODELS_DIR.glob("*.py") if not p.stem.startswith("_")))
        raise AlacError(f"unknown model {name_or_path!r}: give a file path or one of {known}")
    name = f"alac_zoo_{path.stem}"
    loaded = sys.modules.get(name)
    if loaded is not None and Path(getattr(loaded, "__file__", "")).resolve() == path.resolve():
        return loaded
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    # registered, so that its model classes pickle by reference (as a fitted estimator holding one does)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
