"""The command line's shared pieces: argument types, the data-reading options, and how a wide run's
plan and checkpoint come from its parsed options."""

from __future__ import annotations

import argparse
import re

from alac.models import is_model_file

CHECKPOINT_NAME = "model.alac"
FORMATS = ("auto", "libsvm", "libffm", "criteo", "table")


def positive_int(text):
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def micro_batches(text):
    """--micro-batches: a count >= 1, or auto (None: the trainer's Eq. 2)."""
    return None if text == "auto" else positive_int(text)


def positive_float(text):
    """A finite number above 0 (a learning rate: 0 learns nothing, a negative one climbs the loss)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a finite number above 0, got {text}")
    return value


MEMORY_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12, "kib": 2**10, "mib": 2**20,
                "gib": 2**30, "tib": 2**40, "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40}


def memory_size(text):
    """Bytes of a size such as 8GB (10^9), 8GiB or 8G (2^30), 512MB or 1000000."""
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*", text)
    unit = match and MEMORY_UNITS.get(match.group(2).lower())
    if not unit:
        raise argparse.ArgumentTypeError(f"not a memory size (such as 8GB, 512MiB): {text!r}")
    value = int(float(match.group(1)) * unit)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1 byte, got {text!r}")
    return value


def sampled_share(text):
    """A share of the accesses in (0, 1]: FAE's sampling estimator counts that share of them."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"must be in (0, 1], got {text}")
    return value


RANK_TABLES = ("auto", "replicated", "sharded", "hybrid")


def add_rank_options(group, tables_help):
    """The options of a run under torchrun that every family takes: --rank-timeout and --rank-tables
    (tables_help: what its tables' modes mean for the family)."""
    group.add_argument("--rank-timeout", type=positive_float, default=60.0, metavar="SECONDS",
                       help="under torchrun: a rank silent this long (stopped, hung or gone) ends the run on every "
                            "other rank, which exits with status 4 naming it; a collective waits at most ten times "
                            "this for a slow rank (default 60)")
    group.add_argument("--rank-tables", default="auto", choices=RANK_TABLES, help=tables_help)


def split_fraction(text):
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(f"must be in [0, 1), got {value}")
    return value


def add_data_options(parser):
    """Options that say how to read a data file (train, predict and inspect share them)."""
    parser.add_argument("--format", default="auto", choices=FORMATS,
                        help="file format (default: detected from the name, .csv/.parquet/.svm/.ffm, or the "
                             "content, a CSV header making a table; said in the first line)")
    parser.add_argument("--n-features", type=positive_int, default=None,
                        help="declared feature count (LIBSVM, libffm); ids beyond it are errors")
    parser.add_argument("--hash-bits", type=positive_int, default=None,
                        help="Criteo and tables: hash values into 2**bits ids per field")
    parser.add_argument("--label", help="table: the label column")
    parser.add_argument("--fields", help="table: the feature columns, comma-separated (default: all others)")
    parser.add_argument("--numeric", default="", help="table: feature columns that hold numbers")
    parser.add_argument("--numeric-mode", default="bucketize", choices=["bucketize", "value"],
                        help="table: numbers as log-squared buckets (default) or as one valued feature")
    parser.add_argument("--numeric-scale", default="standard", choices=["standard", "log", "none"],
                        help="table, --numeric-mode value: numbers centred and divided by their deviation in the "
                             "training table (default), as sign(v) log(1 + |v|), or as they are")
    parser.add_argument("--separator", default=",", help="table: the CSV column separator")


def model_arguments(module, args):
    """The model's own options from parsed arguments (what a checkpoint needs to rebuild it)."""
    names = ["l1", "l2"] + [flag.lstrip("-").replace("-", "_") for flag, _ in getattr(module, "ARGUMENTS", ())]
    return {name: getattr(args, name) for name in names if hasattr(args, name)}


def plan_of(args):
    from alac.plan import Plan
    from alac.runtime.planning.planner import default_chunk_size

    options = {"batch_size": args.batch_size, "kernels": args.kernels, "semantics": args.mode,
               "flush_every": args.flush_every, "param_mode": args.param_mode,
               "deterministic": getattr(args, "deterministic", False), "replicas": getattr(args, "replicas", 1),
               "programs": getattr(args, "programs", None)}
    if args.hot_size is not None:
        options["hot_size"] = args.hot_size
    if args.gpu_memory is not None:
        options["memory_budget"] = args.gpu_memory
    if getattr(args, "host_memory", None) is not None:
        options["host_memory_budget"] = args.host_memory
    if getattr(args, "rows_dir", None):
        options["rows_folder"] = args.rows_dir
    if args.host_params:
        options["placement"] = tuple((name.strip(), "host") for name in args.host_params.split(",") if name.strip())
    options["chunk_size"] = args.chunk_size or default_chunk_size(args.mode, args.batch_size, args.backend)
    return Plan(**options)


def checkpoint_spec(module, args, model_reference):
    """How a checkpoint names its model: a zoo name, or the user's model file (never run from a
    checkpoint: predict and export need it on their command line again)."""
    spec = {"arguments": model_arguments(module, args)}
    if is_model_file(model_reference):
        spec["model_file"] = str(model_reference)
    else:
        spec["model"] = str(model_reference)
    return spec
