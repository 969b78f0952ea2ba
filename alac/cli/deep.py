"""`alac train --model deepfm|wide_deep|dlrm|ffm`: the field models (alac.train.deep) from the command
line.

The data are read as for the wide models (LIBSVM, libffm, Criteo TSV, tables; the synthetic Criteo-shaped
set without --train); every entry needs a field: libffm and Criteo files carry them, --featindex FILE maps
LIBSVM ids to fields (`field:value<TAB>index`), --fields-by-position takes field f as the f-th entry of
every row (one-hot data such as iPinYou). Prints one line per epoch and the JSON line of every family
(alac.outputs.final_line: each metric named by its split); with --out DIR writes metrics.json, history.csv
and model.pt (tensors and plain settings, read back with torch.load(weights_only=True): loading it runs no
code; DeepTrainer.load), which `alac predict --model-dir DIR` reads (predict here)."""

from __future__ import annotations

import sys
from pathlib import Path

import torch

from alac import defaults, metrics
from alac.cli.data import load_data, read_like_training
from alac.cli.options import (
    add_data_options,
    add_rank_options,
    memory_size,
    micro_batches,
    positive_float,
    positive_int,
    split_fraction,
)
from alac.cli.parser import Parser, train_groups
from alac.cli.progress import Progress
from alac.errors import AlacError, OptionError
from alac.outputs import RunOutputs, check_output_folder, final_line, split_metrics, write_metrics_and_history
from alac.runtime.ranks.distributed import init_ranks
from alac.train.deep import DEEP_MODELS, DeepSettings, DeepTrainer
from alac.train.trainer import TrainingDiverged

CHECKPOINT_NAME = "model.pt"


def parser():
    p = Parser(prog="alac train", description="Train a field model (Wide & Deep, DeepFM, DLRM, FFM).")
    data, model, training, execution, ranks, output = train_groups(p)
    model.add_argument("--model", required=True, choices=sorted(DEEP_MODELS), help="the field model to train")
    data.add_argument("--train", help="training file (default: the synthetic Criteo-shaped set)")
    data.add_argument("--valid", help="validation file (early stopping)")
    data.add_argument("--test", help="test file")
    data.add_argument("--valid-split", type=split_fraction, default=defaults.VALID_SPLIT, metavar="FRACTION",
                      help="without --valid: this share of the training rows held out for early stopping")
    add_data_options(data)
    fields = data.add_mutually_exclusive_group()
    fields.add_argument("--featindex", help="a `field:value<TAB>index` file: the field of every LIBSVM id")
    fields.add_argument("--fields-by-position", action="store_true",
                        help="field f is the f-th entry of every row (one-hot rows of one feature per field)")
    data.add_argument("--synthetic", type=positive_int, default=None, metavar="ROWS",
                      help="rows of synthetic data when no --train is given (default: 4M on a GPU, 200k on a CPU)")
    data.add_argument("--dense-fields", default="", metavar="IDS",
                      help="field ids (comma-separated; a table's fields are its feature columns in order) whose "
                           "entries' values are dense features (DLRM needs some; e.g. a table's --numeric columns "
                           "with --numeric-mode value)")
    model.add_argument("--k", type=positive_int, default=None,
                       help="field embedding size (default 16; FFM: per field, 4 as libffm)")
    model.add_argument("--hidden", default="256,128", help="the MLP's layer sizes, comma-separated (DLRM: its top MLP)")
    model.add_argument("--bottom", default="64", help="DLRM's bottom MLP sizes, comma-separated")
    training.add_argument("--epochs", type=positive_int, default=10, help="most epochs (early stopping may end sooner)")
    training.add_argument("--batch-size", type=positive_int, default=4096,
                          help="samples per optimizer step on each rank (under torchrun a step takes ranks x this)")
    training.add_argument("--lr", type=positive_float, default=None,
                          help="the tables' step (default: AdaGrad's 1 / the sparse fields, at most 0.5; the "
                               "other optimizers' own)")
    training.add_argument("--dense-lr", type=positive_float, default=1e-3, help="Adam's step on the MLP")
    training.add_argument("--optimizer", default="adagrad", help="the tables' optimizer (adagrad, sgd, ...)")
    training.add_argument("--patience", type=positive_int, default=2,
                          help="epochs without a new best validation loss before training stops")
    training.add_argument("--seed", type=int, default=0, help="initial values, the batches' order and the split")
    execution.add_argument("--tables", default="kernels", choices=["kernels", "reference"],
                           help="the tables' sums and updates: their generated kernels (on a GPU; the torch "
                                "programs elsewhere), or their torch programs")
    execution.add_argument("--no-cuda-graphs", action="store_true",
                           help="launch every step's kernels one by one instead of replaying a CUDA graph of it")
    execution.add_argument("--device", default=None, help="cuda or cpu (default: the GPU when there is one)")
    execution.add_argument("--gpu-memory", type=memory_size, default=None, metavar="SIZE",
                           help="GPU memory the tables may take (e.g. 8GB): larger tables live in host memory, their "
                                "most-read rows cached on the GPU; under torchrun each rank's budget for its share "
                                "(default: a quarter of the GPU's free memory)")
    execution.add_argument("--stream-data", action="store_true",
                           help="keep the training rows in host memory, the GPU gathering an epoch's part at a time "
                                "(default: where they take more than half the GPU's free memory)")
    execution.add_argument("--micro-batches", type=micro_batches, default=None, metavar="N|auto",
                           help="PICASSO's D-interleaving: a step's batch in N micro-batches backpropagated in turn, "
                                "the tables stepped once (default auto: by its Eq. 2, only where a step's measured "
                                "activations exceed half the GPU's free memory)")
    execution.add_argument("--side-stream", action="store_true",
                           help="PICASSO's K-interleaving: the next micro-batch's table lookups on a side stream "
                                "beside this one's MLP (a GPU)")
    add_rank_options(ranks, "under torchrun: every rank holds every table row (replicated), its share of them "
                            "(sharded, fetched by the others), or the rows read about once a batch and its share of "
                            "the rest (hybrid); auto: the first of replicated, sharded that fits a quarter of a rank's "
                            "free memory, another only where a step's exchanges, timed over the ranks, take under "
                            "half as long (the run's second line says which and why)")
    output.add_argument("--out", help="folder for metrics.json, history.csv and model.pt")
    return p


def main(argv):
    """Exit status: 0, 2 for bad input, 3 when training diverged (one line on stderr)."""
    args = parser().parse_args(argv)
    lists = {}
    for option in ("hidden", "bottom", "dense_fields"):
        text = getattr(args, option)
        try:
            lists[option] = tuple(int(item) for item in text.split(",") if item.strip())
        except ValueError:
            print(f"alac: error: --{option.replace('_', '-')} takes integers such as 256,128, got {text!r}",
                  file=sys.stderr)
            return 2
    try:
        settings = DeepSettings(model=args.model, k=args.k, lr=args.lr, dense_lr=args.dense_lr, epochs=args.epochs,
                                batch_size=args.batch_size, optimizer=args.optimizer, patience=args.patience,
                                seed=args.seed, cuda_graphs=not args.no_cuda_graphs, tables=args.tables,
                                rank_tables=args.rank_tables, gpu_memory=args.gpu_memory,
                                stream_data=True if args.stream_data else None, micro_batches=args.micro_batches,
                                side_stream=args.side_stream, **lists)
        if args.out is not None:
            check_output_folder(args.out)
        if args.featindex and not Path(args.featindex).is_file():
            raise OptionError(f"{args.featindex}: no field index file there (--featindex)")
        if args.device is not None and torch.device(args.device).type == "cuda" and not torch.cuda.is_available():
            raise OptionError(f"--device {args.device}: this machine has no CUDA GPU")
        return _over_ranks(args, settings)
    except AlacError as error:
        print(f"alac: error: {error}", file=sys.stderr)
        return 2


def _over_ranks(args, settings, trainer=None):
    """_run under torchrun's ranks (or one): every rank trains, the first speaks and writes; the ranks
    end their group together, and a rank that fails is named by the others (exit status 4)."""
    from alac.runtime.ranks.distributed import close_ranks, fault, is_collective_error

    try:
        init_ranks(timeout=args.rank_timeout)
        status = _run(args, settings, trainer)
        close_ranks()
    except Exception as error:
        if not is_collective_error(error):
            raise
        fault(error)
    return status


def _run(args, settings, trainer=None):
    """Train (or, given a loaded trainer, continue its run: resume), score and write the outputs."""
    from alac.cli.run_record import run_record
    from alac.data.field_map import FieldMap, from_positions, load_featindex

    # the wide models' reader: no block store, the validation split on unless a file is given
    args.out_of_core, args.normalize, args.early_stopping = False, False, "valid"
    data = load_data(args, None)
    sets = [data.train, data.valid, data.test]
    field_map = None
    if trainer is not None and trainer.extras.get("field_of") is not None:
        field_map = FieldMap(trainer.extras["field_of"], tuple(range(trainer.n_fields)),
                             feature_ids=trainer.extras.get("field_ids"))
    elif args.featindex or args.fields_by_position:
        field_map = load_featindex(args.featindex) if args.featindex else from_positions(data.train)
    if field_map is not None:
        # the validation and test rows may hold features the training rows never had (left out)
        sets = [None if s is None else field_map.apply(s, unlisted_ok=index > 0) for index, s in enumerate(sets)]
    train, valid, test = sets
    ranks = init_ranks()
    first = ranks.rank == 0
    say = print if first else (lambda *a, **k: None)
    batch = (settings if trainer is None else trainer.settings).batch_size
    say(f"{args.model}: {data.described}; {train.n_rows:,} training rows"
        + ("" if ranks.world == 1 else f"; {ranks.describe()}, {batch * ranks.world:,} rows a step ({batch:,} on each)")
        + ("" if trainer is None else f"; resumed after epoch {len(trainer.history)}, to epoch {args.epochs}"),
        flush=True)
    resumed = trainer is not None
    trainer = trainer or DeepTrainer(settings, args.device)
    trainer.say = say
    trainer.log = Progress(args.epochs) if first else None
    if first:
        trainer.log.start(None, len(trainer.history))
    diverged = None
    try:
        trainer.resume(train, valid, args.epochs) if resumed else trainer.fit(train, valid)
    except TrainingDiverged as error:
        # as the wide models: the restored weights are scored and written, and the exit status says so
        diverged = error
    finally:
        if first:
            trainer.log.close()      # the bar cleared before the lines that follow
    if diverged and first:
        print(f"alac: {diverged}", file=sys.stderr)
    if trainer.stopped_because and not diverged:
        best = (trainer.resume_point or {}).get("best_epoch")
        say(f"stopped after epoch {len(trainer.history)}: {trainer.stopped_because}"
            + ("" if best is None else f"; the best epoch's ({best}) model is kept"))

    def evaluate(dataset):
        probability = trainer.predict(dataset)
        positive = trainer.labels.positive_mask(dataset.labels.to(probability.device))
        return {"logloss": float(metrics.logloss(probability, positive)),
                "auc": float(metrics.auc(probability, positive))}

    final = split_metrics(evaluate, valid, test, train)
    final.update(epochs=len(trainer.history), stopped_because=None if diverged else trainer.stopped_because)
    say(final_line(final))
    if args.out is not None:
        # how `alac predict` reads new files as these were read (their format and the fields' map), and
        # how the run was made (a resume continues it)
        extras = {"data_options": data.options,
                  "field_of": None if field_map is None else field_map.field_of.cpu(),
                  "field_ids": None if field_map is None else field_map.feature_ids,
                  "run": run_record(args, "deep")}
        # every rank assembles the tables; the first writes them
        checkpoint = trainer.checkpoint(extras)
        if first:
            _write_outputs(Path(args.out), checkpoint, trainer.history, final)
    return 3 if diverged else 0


def resume(path, options):
    """`alac train --resume DIR` of a field model's run (alac.cli.resume)."""
    from alac.cli.run_record import record_of, run_arguments

    try:
        # the run's record alone (memory-mapped: the weights are read once, below)
        extras = torch.load(path, map_location="cpu", weights_only=True, mmap=True).get("extras")
    except Exception as error:
        raise OptionError(f"{path}: not a deep model checkpoint ({type(error).__name__})") from None
    record = record_of(extras.get("run") if isinstance(extras, dict) else None, path)
    # the run's own device unless another is given
    trainer = DeepTrainer.load(path, device=options.device or record["args"].get("device"))
    point = trainer.resume_point
    if point is None:
        raise OptionError(f"{path}: it holds no record of where its run ended: train a new run")
    return _over_ranks(run_arguments(record, options, point["epoch"], point.get("stopped_because"), path),
                       trainer.settings, trainer)


def predict(model_dir, data_path, format_option=None):
    """(probabilities, the trainer) of a data file by the model in a folder (or model.pt file) that
    alac train wrote, the file read as the training data was (its format, its fields' map)."""
    from alac.data.field_map import FieldMap

    path = Path(model_dir) / CHECKPOINT_NAME if Path(model_dir).is_dir() else Path(model_dir)
    trainer = DeepTrainer.load(path)
    dataset = read_like_training(data_path, {"data_options": trainer.extras.get("data_options", {}),
                                                   "path": str(path)}, format_option)
    field_of = trainer.extras.get("field_of")
    if field_of is not None:
        dataset = FieldMap(field_of, tuple(range(trainer.n_fields)),
                           feature_ids=trainer.extras.get("field_ids")).apply(dataset, unlisted_ok=True)
    return trainer.predict(dataset), trainer


def is_deep_checkpoint(model_dir):
    """Whether model_dir is (or holds) the model.pt of a field model rather than a wide model's folder."""
    path = Path(model_dir)
    return (path / CHECKPOINT_NAME).is_file() if path.is_dir() else path.suffix == ".pt"


def export(model_dir, readable, numpy_path):
    """`alac export` of a field model: every tensor of its network (embedding tables by field id
    row, the MLP's layers) into a .npz archive; no text form (a network is not a weight per feature)."""
    import numpy as np

    from alac.outputs import write_atomically

    path = Path(model_dir) / CHECKPOINT_NAME if Path(model_dir).is_dir() else Path(model_dir)
    if readable:
        raise OptionError(f"{path}: a field model ({DeepTrainer.load(path).settings.model}) has no text form of "
                          "one weight per feature: export its tensors with --numpy FILE.npz")
    trainer = DeepTrainer.load(path)
    tensors = {name.replace(".", "/"): value.detach().cpu().numpy() for name, value in
               trainer.network.state_dict().items()}
    write_atomically(numpy_path, lambda handle: np.savez(handle, **tensors))
    print(f"wrote {numpy_path}: the {len(tensors)} tensors of the {trainer.settings.model} network")
    return 0


def _write_outputs(out, checkpoint, history, final):
    with RunOutputs(out) as outputs:
        outputs.write(CHECKPOINT_NAME, lambda handle: torch.save(checkpoint, handle))
        write_metrics_and_history(outputs, final, history)
    print(f"wrote {out}/{', '.join(outputs.written)}")
