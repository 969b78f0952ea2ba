"""How a model's training files were read, as its checkpoint records it (so that `alac predict`
reads new files alike): checked whole when a checkpoint is read, so that a damaged or hand-edited
record is one clear error, never a KeyError in a loader later."""

from __future__ import annotations

import torch

from alac.errors import DataError

FORMATS = ("libsvm", "libffm", "criteo", "table", "synthetic")
# key: (what it holds, its check)
_ENTRIES = {
    "format": ("one of " + ", ".join(FORMATS), lambda v: v in FORMATS),
    "normalize": ("true or false", lambda v: isinstance(v, bool)),
    "zero_based": ("true, false or null", lambda v: v is None or isinstance(v, bool)),
    "n_features": ("a positive integer or null", lambda v: v is None or _positive(v)),
    "hash_bits": ("a positive integer or null", lambda v: v is None or _positive(v)),
    "table": ("a table encoding", lambda v: isinstance(v, dict)),
}


def _positive(value):
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def check_feature_ids(feature_ids, n_features, where):
    """feature_ids (the files' ids of a renumbered space, alac.data.compact) if they are None or one
    int64 id per feature; else a DataError naming `where`."""
    if feature_ids is not None and not (isinstance(feature_ids, torch.Tensor) and feature_ids.dtype == torch.int64
                                        and tuple(feature_ids.shape) == (n_features,)):
        raise DataError("its feature ids are not one int64 id per feature", path=where)
    return feature_ids


def check_read_options(options, where):
    """options if every entry is one alac writes, with a value of its kind; else a DataError naming
    `where` (the checkpoint) and the entry."""
    if not isinstance(options, dict):
        raise DataError(f"its record of how the training data was read is a {type(options).__name__}, not a "
                        "dict", path=where)
    for key, value in options.items():
        if key not in _ENTRIES:
            raise DataError(f"its record of how the training data was read has an unknown entry {key!r}", path=where)
        kind, check = _ENTRIES[key]
        if not check(value):
            raise DataError(f"its record of how the training data was read has {key} = {value!r}, not {kind}",
                            path=where)
    if "table" in options:
        from alac.data.table import TableEncoding

        TableEncoding.from_dict(options["table"], where)
    elif options.get("format") == "table":
        raise DataError("its record says the training data was a table, but not how it was encoded", path=where)
    return options
