"""What a checkpoint records of how `alac train` ran it, so that `alac train --resume DIR` continues
the same run: the model family, the parsed options (plain values; data paths made absolute) and a
content hash of every data file, which a resume checks so that it never continues on other data."""

from __future__ import annotations

import argparse
from pathlib import Path

from alac.errors import DataError, OptionError

FAMILIES = ("flow", "scd", "deep", "als", "mcmc")
DATA_OPTIONS = ("train", "valid", "test", "featindex")
_PLAIN = (str, int, float, bool, type(None))


def _plain(value):
    if isinstance(value, (list, tuple)):
        return all(_plain(item) for item in value)
    return isinstance(value, _PLAIN)


def data_hash(path):
    """The content hash of a data file, or of a block store folder's manifest (which checksums the rest)."""
    from alac.data import files

    if files.is_stdin(path):
        return files.content_hash(path)
    path = Path(path)
    return files.content_hash(path / "meta.json" if path.is_dir() else path)


def run_record(args, family):
    """The record of a run (args: its parsed options, the race's winner written back)."""
    options = {key: (list(value) if isinstance(value, tuple) else value) for key, value in vars(args).items()
               if _plain(value) and key not in ("race",)}
    data = {}
    for key in DATA_OPTIONS:
        if options.get(key) is not None:
            # standard input ("-") stays itself: a resume reads it again
            options[key] = options[key] if options[key] == "-" else str(Path(options[key]).resolve())
            data[key] = data_hash(options[key])
    return {"family": family, "args": options, "data": data}


def check_same_data(record, where):
    """A DataError unless every data file of the record still holds what it held (its hash)."""
    for key, expected in record["data"].items():
        path = record["args"][key]
        try:
            found = data_hash(path)
        except DataError:
            raise DataError(f"the run trained on {path} (--{key}), which is gone: a resume continues on the same "
                            "data", path=where) from None
        if found != expected:
            raise DataError(f"the run trained on {path} (--{key}), whose content has changed since: a resume "
                            "continues on the same data", path=where)


def record_of(saved_run, path):
    """The run record of a checkpoint, its data checked to be the same (an AlacError otherwise)."""
    from alac.train.checkpoint import CheckpointError

    if not isinstance(saved_run, dict) or saved_run.get("family") not in FAMILIES or \
            not isinstance(saved_run.get("args"), dict) or not isinstance(saved_run.get("data"), dict):
        raise CheckpointError(f"{path}: it holds no record of how alac train made its run (written by Python, or by "
                              "an older alac): continue it in Python (alac.train.checkpoint.load(...).fit)")
    check_same_data(saved_run, path)
    return saved_run


def run_arguments(record, options, last_epoch, stopped_because, path):
    """The run's options with a resume's given ones; an OptionError where there is nothing to continue."""
    args = argparse.Namespace(**record["args"])
    args.epochs = options.epochs or args.epochs
    args.out = options.out
    for name in ("backend", "device"):
        if getattr(options, name) is not None:
            setattr(args, name, getattr(options, name))
    if stopped_because and (stopped_because.startswith("early stopping") or stopped_because in ("tol", "diverged")):
        why = {"tol": "reaching its duality gap tolerance", "diverged": "diverging"}.get(stopped_because,
                                                                                        stopped_because)
        raise OptionError(f"{path}: the run stopped after epoch {last_epoch} by {why}: there is nothing to continue; "
                          "train a new run")
    if args.epochs <= last_epoch:
        raise OptionError(f"{path}: the run has trained {last_epoch} epochs, its --epochs {args.epochs}: nothing to "
                          f"resume; give --epochs above {last_epoch}")
    return args
