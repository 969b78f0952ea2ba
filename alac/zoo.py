"""Running a zoo model file as a script: `python models/lr.py --train FILE --test FILE ...`.

Without --train the model trains on the built-in synthetic Criteo-shaped data (4M rows on a GPU,
200k on a CPU), split 80/10/10 into train / validation / test. Prints one line per epoch and ends
with one JSON line of final test metrics.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
from pathlib import Path

from alac.errors import AlacError

MODELS_DIR = Path(__file__).resolve().parent.parent / "models"


def parser_for(description):
    parser = argparse.ArgumentParser(description=description)
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
    return parser


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
    parts += [f"{k[6:]} {v:.5f}" for k, v in record.items() if k.startswith("valid_")]
    parts.append(f"{1000 * record['seconds']:.1f} ms")
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


def run_module(module, argv=None):
    """Parse the command line, train the module's model, print epochs and the final JSON line.

    A zoo module defines MODEL (a Model class taking l2=... and its ARGUMENTS as keywords),
    DEFAULT_LR (a number, or a function of the parsed arguments) and optionally ARGUMENTS
    [(flag, argparse keywords)].
    """
    parser = parser_for(module.__doc__)
    parser.add_argument("--l2", type=float, default=0.0,
                        help="L2 coefficient (in the gradient, per occurrence; FTRL: in its closed form)")
    parser.add_argument("--l1", type=float, default=0.0, help="L1 coefficient (optimizers ftrl and sgd)")
    parser.add_argument("--exact-l2", action="store_true",
                        help="apply --l2 as a decay of every row after every batch (sync), not lazily")
    for flag, spec in getattr(module, "ARGUMENTS", ()):
        parser.add_argument(flag, **spec)
    args = parser.parse_args(argv)
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
        return _run(args, lambda parsed: build_model(module, parsed))
    except AlacError as error:
        print(f"alac: error: {error}", file=sys.stderr)
        return 2


def _run(args, build_model):
    from alac.optimizers import get_optimizer
    from alac.plan import Plan
    from alac.runtime.schedule import LearningRateSchedule
    from alac.train import Trainer

    model = build_model(args)
    optimizer_class = get_optimizer(args.optimizer).__class__
    optimizer = optimizer_class(**{h: getattr(args, h) for h in optimizer_class.hyper if getattr(args, h) is not None})
    plan_options = {"batch_size": args.batch_size, "kernels": args.kernels, "semantics": args.mode}
    if args.chunk_size:
        plan_options["chunk_size"] = args.chunk_size
    elif args.backend == "interpret":
        # The interpreter runs programs one after another: one program per batch is fastest.
        plan_options["chunk_size"] = args.batch_size
    plan = Plan(**plan_options)
    train, valid, test, described = _load_data(args, model)
    trainer = Trainer(model, lr=args.lr, epochs=args.epochs, plan=plan, backend=args.backend, seed=args.seed,
                      log=lambda record: print(_format_record(record), flush=True), optimizer=optimizer,
                      schedule=LearningRateSchedule(args.schedule, args.decay, args.power), exact_l2=args.exact_l2)
    print(f"model {model.model_name()} on {described}: {train.n_rows:,} training rows, "
          f"{train.n_features:,} features; backend {trainer.backend} on {trainer.device}; {plan.describe()}; "
          f"lr {args.lr}, {optimizer.describe()}, schedule {trainer.executor.schedule.describe()}", flush=True)
    trainer.fit(train, valid if valid is not None else test)
    final = trainer.evaluate(test if test is not None else (valid if valid is not None else train))
    if args.l1:
        zeros = trainer.zero_share()
        print(f"exactly-zero weights: {100 * zeros:.2f}% of {trainer.train_layout.n_features:,} features' parameters")
        final["zero_share"] = zeros
    print(json.dumps({k: round(v, 6) for k, v in final.items()}))
    return 0


def load_model_file(name_or_path):
    """The module of a zoo model: a name in models/ (lr, fm, ...) or a path to a .py file."""
    path = Path(name_or_path)
    if not path.suffix:
        path = MODELS_DIR / f"{name_or_path}.py"
    if not path.is_file():
        known = ", ".join(sorted(p.stem for p in MODELS_DIR.glob("*.py") if not p.stem.startswith("_")))
        raise AlacError(f"unknown model {name_or_path!r}: give a file path or one of {known}")
    spec = importlib.util.spec_from_file_location(f"alac_zoo_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
