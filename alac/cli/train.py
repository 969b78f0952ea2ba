"""Training from the command line: `alac train --model lr --train FILE --test FILE --out DIR`.

Without --train the model trains on the built-in synthetic Criteo-shaped data (4M rows on a GPU, 200k on a
CPU), split 80/10/10 into train / validation / test. Without --valid, a share of the training rows (--valid-
split, 10 % by default, drawn with --seed) is held out as validation data for early stopping. Prints one
line per epoch (with a progress bar on a terminal) and ends with one JSON line of final metrics, each named
by its split (valid_auc, test_logloss; train_... without either). With --out DIR it also writes
DIR/metrics.json, DIR/history.csv, the checkpoint DIR/model.alac and, with --plot, DIR/loss.png; the folder
is checked before training."""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import sys
from pathlib import Path

from alac import defaults
from alac.cli.data import load_data
from alac.cli.options import (
    CHECKPOINT_NAME,
    add_data_options,
    add_rank_options,
    checkpoint_spec,
    memory_size,
    plan_of,
    positive_float,
    positive_int,
    split_fraction,
)
from alac.cli.parser import train_groups
from alac.cli.progress import Progress
from alac.cli.run_record import run_record
from alac.errors import AlacError
from alac.models import build_model, default_l2
from alac.optional import need
from alac.outputs import RunOutputs, check_output_folder, final_line, split_metrics, write_metrics_and_history
from alac.train.race import ADAPTIVE, AUTO, race
from alac.train.race import arms as race_arms


def parser_for(parser, module=None):
    """The training options in groups (data, model, optimizer, execution, several GPUs, output); with a
    model module its own options (--l1, --l2, ARGUMENTS), without one every zoo model's (for --help)."""
    from alac.runtime.solvers.cocoa import AGGREGATIONS

    data, model_group, training, execution, ranks, output = train_groups(
        parser, "execution (how the kernels run and where rows live)")
    data.add_argument("--train", help="training file (LIBSVM, libffm, Criteo TSV, or a table: CSV/Parquet; gzip, "
                      "bz2, xz or zstd compressed, or - for standard input), or a block store folder "
                      "(alac.runtime.movement.block_store), streamed from disk")
    data.add_argument("--out-of-core", action="store_true",
                        help="never load the training file whole: write it to a cached block store in two passes "
                             "and stream the blocks from disk (needs --valid or --test)")
    data.add_argument("--block-codec", choices=["none", "zstd"], default="none",
                      help="with --out-of-core: the block files compressed (zstd, in frames decompressed on several "
                           "threads: smaller; from a fast local disk about as fast as raw files) or as they are")
    data.add_argument("--test", help="test file, in the training file's feature space")
    data.add_argument("--valid", help="validation file, evaluated after every epoch (early stopping)")
    data.add_argument("--valid-split", type=split_fraction, default=defaults.VALID_SPLIT, metavar="FRACTION",
                        help="without --valid: hold out this share of the training rows (random, --seed) as "
                             f"validation data for early stopping (default {defaults.VALID_SPLIT}; 0: none)")
    add_data_options(data)
    data.add_argument("--normalize", action="store_true",
                        help="scale every row to unit L2 norm (for long real-valued rows such as text counts)")
    data.add_argument("--synthetic", type=positive_int, default=None, metavar="ROWS",
                        help="rows of synthetic data when no --train is given (default: 4M on a GPU, 200k on a CPU)")
    training.add_argument("--epochs", type=positive_int, default=defaults.EPOCHS,
                        help=f"most epochs (default {defaults.EPOCHS}; early stopping usually ends sooner)")
    training.add_argument("--lr", type=positive_float, default=None,
                        help="learning rate of the batch-mean gradient (default: the optimizer's)")
    training.add_argument("--batch-size", type=positive_int, default=defaults.BATCH_SIZE,
                          help="samples per batch (sync: one optimizer step; async: lr means the same step)")
    execution.add_argument("--chunk-size", type=positive_int, default=None,
                        help="samples per program, a power of two dividing the batch (default: the plan's)")
    execution.add_argument("--kernels", default="fused", choices=["fused", "stage"],
                           help="fused: one kernel per step; stage: a kernel per stage of the model (inspect them)")
    execution.add_argument("--deterministic", action="store_true",
                           help="sync: sum each batch's gradients in a fixed order, so that runs repeat bit for bit")
    execution.add_argument("--replicas", type=positive_int, default=1,
                           help="sync: copies of the hot accumulator that programs spread their atomic additions over")
    execution.add_argument("--programs", type=positive_int, default=None,
                           help="persistent programs of an epoch (default: as many as the GPU holds at once)")
    execution.add_argument("--mode", default="sync", choices=["sync", "async"],
                        help="sync: exact mini-batch SGD; async: lock-free persistent programs (lr means the same)")
    execution.add_argument("--hot-size", type=int, default=None, metavar="H",
                        help="hot segment: the H most frequent features are summed inside a program before "
                             "they reach memory (default: the planner's on a GPU, else 0)")
    execution.add_argument("--host-params", default="", metavar="NAMES",
                        help="params (comma-separated, e.g. w,v) whose rows and optimizer state live in pinned host "
                             "memory, read and updated by the kernels through mapped memory (sync mode)")
    execution.add_argument("--gpu-memory", type=memory_size, default=None, metavar="SIZE",
                        help="GPU memory the training data may take (e.g. 8GB); a larger layout is streamed from "
                             "pinned host memory in blocks (default: a share of the GPU's free memory)")
    execution.add_argument("--host-memory", type=memory_size, default=None, metavar="SIZE",
                        help="host memory the model's rows may take; rows over both budgets live in memory-mapped "
                             "files on disk behind a HybridHash cache (default: the host's available memory)")
    execution.add_argument("--rows-dir", default=None, metavar="DIR",
                        help="where rows on disk go (default: the system's temporary folder)")
    execution.add_argument("--param-mode", default="auto", choices=["auto", "hybrid_hash", "fae"],
                        help="rows over the GPU budget for them: auto (the planner's cheaper), a HybridHash cache "
                             "(hybrid_hash) or FAE's hot table (fae)")
    execution.add_argument("--flush-every", type=positive_int, default=8, metavar="K",
                        help="async hot segment: chunks between a program's flushes of its hot sums")
    execution.add_argument("--backend", default="triton", choices=["triton", "interpret", "reference"],
                        help="triton (GPU; falls back to reference without one), interpret (the generated "
                             "kernels in Triton's CPU interpreter, slow), reference (PyTorch)")
    training.add_argument("--seed", type=int, default=0,
                          help="initial values, the epochs' order and the validation split")
    model_group.add_argument("--solver", default="sgd", choices=["sgd", "scd", "als", "mcmc"],
                        help="sgd: the generated kernels' epochs; scd: stochastic coordinate descent to a duality "
                             "gap (lr, lsvm, lsr; --l2 is lambda of mean loss + lambda/2 ||w||^2, default 1/N); "
                             "als, mcmc: libFM's solvers for fm, --epochs sweeps (als: --loss squared, --l2 on the "
                             "sum of squared errors, default 20; mcmc: its priors drawn, probit for --loss logistic)")
    model_group.add_argument("--burn-in", type=int, default=None, metavar="SWEEPS",
                             help="--solver mcmc: sweeps left out of the average (default a fifth of --epochs)")
    model_group.add_argument("--tol", type=float, default=1e-6, help="--solver scd: the duality gap to reach")
    model_group.add_argument("--scd-workers", type=positive_int, default=1, metavar="K",
                             help="--solver scd in one process: CoCoA's K virtual workers, each stepping its share "
                                  "of the coordinates (under torchrun the ranks are the workers)")
    model_group.add_argument("--scd-aggregation", default=None, choices=AGGREGATIONS,
                             help="--solver scd over workers or ranks: how their changes combine (default: the "
                                  "plane search for the squared loss without l1, else averaging)")
    ranks.add_argument("--sync-every", type=positive_int, default=None, metavar="BATCHES",
                        help="under torchrun (several ranks, each training its share of the rows): batches between "
                             "synchronisations of the parameters (default: once an epoch)")
    ranks.add_argument("--sync", default="sequential", choices=["sequential", "rows", "adding", "averaging"],
                        help="under torchrun: how the ranks' parameter changes combine (sequential: each feature "
                             "row's sum scaled to what sequential SGD would change; rows: each row's mean over the "
                             "ranks that changed it; adding: their sum; averaging: their mean)")
    add_rank_options(ranks, "under torchrun: every rank holds every parameter row (replicated), its share of them "
                            "(sharded: each segment's rows gathered from their owners), or the hot segment and its "
                            "share of the cold rows (hybrid); auto: replicated where the rows fit the GPU budget "
                            "(--gpu-memory), else hybrid with segments whose rows fit what is left")
    from alac.optimizers import OPTIMIZERS
    from alac.runtime.execution.schedule import SCHEDULES

    training.add_argument("--optimizer", default=defaults.OPTIMIZER, choices=[AUTO, *sorted(OPTIMIZERS)],
                        help=f"default {defaults.OPTIMIZER}: AdaGrad and SGD raced on the validation data, the "
                             "better kept (two trainings; with --lr, AdaGrad only)")
    for name in sorted({h for o in OPTIMIZERS.values() for h in o.hyper}):
        training.add_argument(f"--{name.replace('_', '-')}", type=float, default=None,
                              help="optimizer hyper-parameter of " + ", ".join(
                                  o.name for o in OPTIMIZERS.values() if name in o.hyper)
                              + " (default: the optimizer's)")
    training.add_argument("--schedule", default="constant", choices=SCHEDULES, help="learning-rate schedule")
    training.add_argument("--decay", type=float, default=0.0,
                        help="schedule decay: inverse lr / (1 + decay t)^power, epoch_decay lr * decay^epoch")
    training.add_argument("--power", type=float, default=0.5, help="inverse schedule's power")
    training.add_argument("--early-stopping", default=defaults.EARLY_STOPPING, choices=["cuwide", "patience", "none"],
                        help="with validation data: patience (default): stop after --patience epochs without "
                             "a new best and keep the best; cuwide: stop when the validation loss exceeds the "
                             "mean of the last 10 epochs; none")
    training.add_argument("--patience", type=positive_int, default=defaults.PATIENCE,
                          help="early stopping: epochs without a new best validation loss before training stops")
    data.add_argument("--unseen", default="ignore", choices=["ignore", "error"],
                        help="validation/test features the training data never had: ignore them (counted) or fail")
    output.add_argument("--out", metavar="DIR", help="write metrics.json, history.csv and the checkpoint here")
    output.add_argument("--plot", action="store_true", help="with --out: also DIR/loss.png")
    l2_default = "the model's" if module is None else f"{default_l2(module):g}"
    model_group.add_argument("--l2", type=float, default=None,
                             help="L2 coefficient (in the gradient, per occurrence; FTRL: in its closed form; "
                                  f"default {l2_default} times the training values' mean |x|, none for SGD in the "
                                  "auto race)")
    model_group.add_argument("--l1", type=float, default=0.0, help="L1 coefficient (optimizers ftrl and sgd)")
    model_group.add_argument("--exact-l2", action="store_true",
                             help="apply --l2 as a decay of every row after every batch (sync), not lazily")
    for flag, spec in _model_arguments(module):
        model_group.add_argument(flag, **spec)
    return parser


def _model_arguments(module):
    """A model's own options; without one (help before --model) every zoo model's, each help saying
    which models take it."""
    if module is not None:
        return list(getattr(module, "ARGUMENTS", ()))
    from alac.models import names, zoo_module

    takers = {}
    for name in names():
        for flag, spec in getattr(zoo_module(name), "ARGUMENTS", ()):
            takers.setdefault(flag, (spec, []))[1].append(name)
    return [(flag, {**spec, "help": f"({', '.join(models)}) {spec.get('help', '')}".rstrip()})
            for flag, (spec, models) in takers.items()]


def default_lr(module, args, optimizer_name=None):
    from alac.optimizers import OPTIMIZERS

    optimizer = OPTIMIZERS[optimizer_name or args.optimizer]
    if optimizer.default_lr is not None:
        return optimizer.default_lr
    default = module.DEFAULT_LR
    return (default(args) if callable(default) else default) * optimizer.lr_factor


def complete_arguments(module, args):
    """Fill in the defaults that depend on the model and the optimizer: the learning rate and L2, and
    for --optimizer auto the race's arms (args.race; None when an optimizer is named or --lr given)."""
    l2_given = args.l2_given = args.l2 is not None
    if not l2_given:
        args.l2 = default_l2(module)      # in the data's units once it is read (scale_default_l2)
    args.race = None
    if args.optimizer == AUTO:
        if args.lr is None:
            args.race = race_arms(default_lr(module, args, ADAPTIVE), default_lr(module, args, "sgd"), args.l2,
                                  l2_given)
        args.optimizer = ADAPTIVE
    if args.lr is None:
        args.lr = default_lr(module, args)
    return args


def parse_arguments(module, argv):
    """`alac train`'s options for module's model (no --model), with its defaults filled in."""
    return complete_arguments(module, parser_for(argparse.ArgumentParser(prog="alac train"), module).parse_args(argv))


def run_parsed(module, args, model_reference, restored=None):
    """Train module's model as args say; returns the exit status (0, 2 bad input, 3 diverged). Under
    torchrun every rank ends its process group with the others before it returns. restored: a
    resumed run's (alac.cli.resume)."""
    from alac.runtime.ranks.distributed import close_ranks, fault, is_collective_error

    try:
        status = _run_parsed(module, args, model_reference, restored)
        close_ranks()
    except Exception as error:
        if not is_collective_error(error):
            raise
        fault(error)      # another rank failed: named in one line, exit status 4
    return status


def _run_parsed(module, args, model_reference, restored=None):
    from alac.runtime.ranks.distributed import init_ranks

    given_l2 = args.l2       # SCD's lambda defaults to 1/N, not to the SGD model's l2
    complete_arguments(module, args)
    if args.backend == "interpret":
        # Triton picks the interpreter when it is first imported, which has not happened yet.
        os.environ["TRITON_INTERPRET"] = "1"
    try:
        # under torchrun: the ranks' group (and the watch that ends the run when one fails) before any work
        init_ranks(timeout=args.rank_timeout)
        if args.solver in ("als", "mcmc"):
            from alac.cli import fm_coordinate

            fm_coordinate.check_options(module, args, given_l2)
            if args.out is not None:
                check_output_folder(args.out)
            return fm_coordinate.train_coordinate(args, module, load_data(args, plan_of(args)), model_reference)
        if args.solver == "scd":
            from alac.cli import scd as scd_train

            args.l2 = given_l2
            scd_train.check_options(module, args)
            if args.out is not None:
                check_output_folder(args.out)
            return scd_train.train_scd(args, module, load_data(args, plan_of(args)), model_reference, restored)
        if args.out is not None:
            check_output_folder(args.out)
        if args.plot:
            need("matplotlib", "--plot")
        return _run(args, module, model_reference, restored)
    except AlacError as error:
        print(f"alac: error: {error}", file=sys.stderr)
        return 2


def _run(args, module, model_reference, restored=None):
    """restored(data, log): the trainer of a checkpoint, continuing its run (alac.cli.resume)."""
    from alac.runtime.ranks.distributed import doing, init_ranks

    doing("loading the data")
    data = load_data(args, plan_of(args))
    # under torchrun every rank trains; the first speaks and writes the outputs
    first = init_ranks().rank == 0
    log = Progress(args.epochs) if first else None
    trainer, final, diverged = train_model(args, module, data, log, None if restored is None else restored(data, log))
    # tables sharded over the ranks are assembled by all of them for the first one's outputs
    with trainer.executor.assembled():
        if first:
            roofline = _roofline_line(trainer)
            if roofline is not None:
                print(roofline)
            print(final_line(final))
            if args.out is not None:
                doing("writing the outputs")
                _write_outputs(args, module, model_reference, trainer, final, data.options)
    return 3 if diverged else 0


def _roofline_line(trainer):
    """On a GPU, the epoch's accesses, their floor and the run's median epoch against it
    (alac.runtime.planning.roofline.epoch_line); None for rows streamed through the GPU, and for the
    reference backend, whose epochs are not the kernels the floor bounds (and which needs no Triton)."""
    from alac.runtime.movement.layout import BigraphLayout

    layout = trainer.train_layout
    if (trainer.backend != "triton" or not isinstance(layout, BigraphLayout) or layout.device.type != "cuda"
            or not trainer.history):
        return None
    from alac.runtime.planning.roofline import epoch_line

    epoch_ms = 1000 * statistics.median(record["seconds"] for record in trainer.history)
    return epoch_line(trainer.executor.ir, trainer.plan, layout, epoch_ms)


def scale_default_l2(args, module, train):
    """Where no --l2 was given, the model's default L2 in units of the training rows' mean |value|
    (alac.models.default_l2), in args.l2 and the race's arms that carry it."""
    if getattr(args, "l2_given", True):
        return
    scale = train.value_scale
    scale = scale() if callable(scale) else float(scale)    # a dataset's, or a block store's manifest's
    args.l2 = default_l2(module, scale)
    if args.race:
        args.race = tuple(dataclasses.replace(arm, l2=arm.l2 * scale) for arm in args.race)
    args.l2_given = True


def train_model(args, module, data, log=None, trainer=None):
    """Train module's model on data as args say (what `alac train` does between reading the files
    and writing the outputs); returns (trainer, final metrics, the divergence error or None). With
    args.race (--optimizer auto) and validation data, each arm trains and the better is returned,
    its optimizer, lr and l2 written back to args (the checkpoint's and the outputs' record). A
    trainer given (a resumed run's) trains on to args.epochs epochs."""
    say = print if log is not None else (lambda *a, **k: None)
    if trainer is not None:
        return _train_one(args, module, data, log, trainer)
    scale_default_l2(args, module, data.train)
    contestants = getattr(args, "race", None)
    if contestants and data.valid is None:
        say("optimizer auto: no validation data to race on; AdaGrad trains alone")
    elif contestants:
        runs = []

        def train_arm(arm):
            arm_args = argparse.Namespace(**{**vars(args), "optimizer": arm.optimizer, "lr": arm.lr, "l2": arm.l2})
            runs.append(_train_one(arm_args, module, data, log))
            return runs[-1][0], runs[-1][2]

        winner = race(contestants, train_arm, lambda line: say(line, flush=True))
        arm = contestants[winner]
        args.optimizer, args.lr, args.l2 = arm.optimizer, arm.lr, arm.l2
        return runs[winner]
    return _train_one(args, module, data, log)


def _new_trainer(args, module, data, log, rows, features):
    """The Trainer (a DataParallelTrainer under torchrun) of a new run, and its first line once planned
    (plan: the run's)."""
    from alac.optimizers import get_optimizer
    from alac.runtime.execution.schedule import LearningRateSchedule
    from alac.runtime.ranks.distributed import init_ranks
    from alac.train.data_parallel import DataParallelTrainer
    from alac.train.trainer import Trainer

    model = build_model(module, args)
    optimizer_class = get_optimizer(args.optimizer).__class__
    optimizer = optimizer_class(**{h: getattr(args, h) for h in optimizer_class.hyper if getattr(args, h) is not None})
    plan = plan_of(args)
    early_stopping = None if args.early_stopping == "none" or data.valid is None else args.early_stopping
    options = dict(lr=args.lr, epochs=args.epochs, plan=plan, backend=args.backend, seed=args.seed, log=log,
                   optimizer=optimizer, schedule=LearningRateSchedule(args.schedule, args.decay, args.power),
                   exact_l2=args.exact_l2, early_stopping=early_stopping, patience=args.patience, unseen=args.unseen,
                   choose_hot_segment=args.hot_size is None)
    say = print if log is not None else (lambda *a, **k: None)
    ranks = init_ranks()
    if ranks.world > 1:
        trainer = DataParallelTrainer(model, ranks=ranks, sync_every=args.sync_every, aggregation=args.sync,
                                      tables=args.rank_tables, **options)
        say(trainer.describe(), flush=True)
    else:
        trainer = Trainer(model, **options)
    schedule = trainer.executor.schedule.describe()
    return trainer, lambda plan: (
        f"model {model.model_name()} on {data.described}: {rows:,} training rows, "
        f"{features:,} features; backend {trainer.backend} on {trainer.device}; {plan.describe()}; "
        f"lr {args.lr:g}, {optimizer.describe()}, schedule {schedule}"
        + (f"; early stopping ({early_stopping}) on the validation loss" if early_stopping else ""))


def _train_one(args, module, data, log, trainer=None):
    from alac.runtime.movement import out_of_core
    from alac.runtime.planning.param_planner import predicted_line
    from alac.train.trainer import TrainingDiverged

    say = print if log is not None else (lambda *a, **k: None)
    rows, features = out_of_core.rows_and_features(data.train)
    if trainer is None:
        trainer, first_line = _new_trainer(args, module, data, log, rows, features)
    else:
        first_line = lambda plan: (
            f"resuming {trainer.executor.ir.name} after epoch {trainer.epochs_trained} on {data.described}: to epoch "
            f"{args.epochs}; backend {trainer.backend} on {trainer.device}; {plan.describe()}; lr "
            f"{trainer.lr:g}, {trainer.executor.optimizer.describe()}"
            + (f"; early stopping ({trainer.early_stopping}) on the validation loss" if trainer.early_stopping else ""))
    # the run's planning step (its hot segment, where its rows live) comes with its training layout
    streamed, _ = trainer.prepare(data.train)
    say(first_line(trainer.plan), flush=True)
    if trainer.placement is not None and trainer.placement.mode != "device":
        trainer.initialize_model(data.train)
        for line in trainer.placement.lines() + [predicted_line(trainer.placement, rows)]:
            if line:
                say(f"placement: {line}", flush=True)
    if hasattr(streamed, "blocks"):
        if log is not None:
            trainer.block_progress = log.blocks
        where = f"a block store on disk ({data.train.folder})" if hasattr(data.train, "folder") else \
            "pinned host memory"
        say(f"training data streamed from {where}: {len(streamed.blocks)} blocks, "
            f"{streamed.bytes_per_epoch / 2**30:.2f} GiB per epoch", flush=True)
    diverged = None
    if log is not None:
        log.start(rows, trainer.epochs_trained)
        trainer.row_progress = log.rows_done
    try:
        trainer.fit(data.train, data.valid, epochs=args.epochs - trainer.epochs_trained, report=data.test)
    except TrainingDiverged as error:
        diverged = error
    finally:
        if log is not None:
            log.close()      # the bar cleared before the lines that follow
    if diverged:
        print(f"alac: {diverged}", file=sys.stderr)
    if hasattr(streamed, "blocks") and trainer.device.type == "cuda":
        import torch

        say(f"peak GPU memory while training: {torch.cuda.max_memory_allocated(trainer.device) / 2**30:.2f} GiB")
    if trainer.stopped_because and not diverged:
        say(f"stopped after epoch {trainer.history[-1]['epoch']}: {trainer.stopped_because}; the best epoch's "
            f"({trainer.best_epoch}) model is kept")
    final = split_metrics(trainer.evaluate, data.valid, data.test, data.train)
    final.update(epochs=trainer.history[-1]["epoch"] if trainer.history else 0,
                 stopped_because=None if diverged else trainer.stopped_because)
    if args.l1:
        zeros = trainer.zero_share()
        say(f"exactly-zero weights: {100 * zeros:.2f}% of {trainer.n_features:,} features' parameters")
        final["zero_share"] = zeros
    if trainer.unseen_entries:
        final["unseen_entries"] = trainer.unseen_entries
    return trainer, final, diverged


def _write_outputs(args, module, model_reference, trainer, final, data_options):
    """The run's files, switched into args.out together (alac.outputs.RunOutputs)."""
    from alac.train import checkpoint

    out = Path(args.out)
    run = run_record(args, "flow")
    with RunOutputs(out) as outputs:
        outputs.write(CHECKPOINT_NAME, lambda handle: checkpoint.write(
            trainer, handle, checkpoint_spec(module, args, model_reference), data_options, run))
        write_metrics_and_history(outputs, final, trainer.history)
        statistics = trainer.executor.statistics
        if statistics is not None:
            # a cached model's hit ratio of every training batch, in the order trained
            outputs.write_text("hit_ratio.csv", "batch,hit_ratio\n" + "".join(
                f"{batch},{ratio:.6f}\n" for batch, ratio in enumerate(statistics.hit_ratio)))
        if args.plot:
            from alac.cli.plot import plot_history

            figure = plot_history(trainer.history, None, f"{trainer.executor.ir.name}: loss per split")
            outputs.write("loss.png", lambda handle: figure.savefig(handle, format="png", dpi=110))
    print(f"wrote {out}/{', '.join(outputs.written)}")
