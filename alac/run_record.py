"""What a checkpoint records of how `alac train` ran it, so that `alac train --resume DIR` continues
the same run: the model family, the parsed options (plain values; data paths made absolute) and a
content hash of every data file, which a resume checks so that it never continues on other data."""

from __future__ import annotations

from pathlib import Path

from alac.errors import DataError

FAMILIES = ("flow", "scd", "deep")
DATA_OPTIONS = ("train", "valid", "test", "featindex")
_PLAIN = (str, int, float, bool, type(None))


def _plain(value):
    if isinstance(value, (list, tuple)):
        return all(_plain(item) for item in value)
    return isinstance(value, _PLAIN)


def data_hash(path):
    """The content hash of a data file, or of a block store folder's manifest (which checksums the rest)."""
    from alac.data import files

    path = Path(path)
    return files.content_hash(path / "meta.json" if path.is_dir() else path)


def run_record(args, family):
    """The record of a run (args: its parsed options, the race's winner written back)."""
    options = {key: (list(value) if isinstance(value, tuple) else value) for key, value in vars(args).items()
               if _plain(value) and key not in ("race",)}
    data = {}
    for key in DATA_OPTIONS:
        if options.get(key) is not None:
            options[key] = str(Path(options[key]).resolve())
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
