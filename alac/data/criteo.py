"""Criteo Kaggle display-advertising TSV: label, 13 integer columns, 26 hexadecimal categoricals.

Reading keeps the raw columns (`CriteoColumns`); `featurize` turns them into sparse features:
- field f of the 39 (0..12 integer, 13..38 categorical) owns buckets [f * 2**hash_bits, (f+1) * 2**hash_bits);
- a categorical value is hashed (splitmix64 of value and field) into buckets 1..2**hash_bits - 1 of its
  field; bucket 0 of every field is "missing", so a missing value is a feature of its own;
- integer columns, `integer_mode="bucketize"` (default): v > 2 becomes floor(log(v)**2) (the rule of
  the competition's winning libffm solution), other values stay as they are, and the result is hashed
  like a categorical value; every row then has exactly 39 one-hot entries.
  `integer_mode="value"`: column j is the single feature j (ids 0..12) with the integer as its value
  (exact up to 2**24 in float32), and missing values are left out; categoricals follow at id 13.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from alac.data import files, text_scan
from alac.data.dataset import DataSource, SparseDataset
from alac.errors import DataError, OptionError

N_INTEGER = text_scan.CRITEO_INTEGER_COLUMNS
N_CATEGORICAL = text_scan.CRITEO_CATEGORICAL_COLUMNS
N_FIELDS = N_INTEGER + N_CATEGORICAL
INTEGER_MODES = ("bucketize", "value")

_MESSAGES = {
    text_scan.ERR_LABEL: "label must be 0 or 1",
    text_scan.ERR_TOO_MANY_COLUMNS: f"more than {text_scan.CRITEO_COLUMNS} tab-separated columns",
    text_scan.ERR_INTEGER: "integer column is not an integer",
    text_scan.ERR_CATEGORICAL: "categorical column is not 1-16 hexadecimal digits",
}


@dataclass(eq=False)
class CriteoColumns:
    """Raw Criteo columns; `*_present` is False where a column was empty."""

    labels: np.ndarray              # float32 [n]
    integers: np.ndarray            # int64 [n, 13]
    integer_present: np.ndarray     # bool [n, 13]
    categoricals: np.ndarray        # uint64 [n, 26]
    categorical_present: np.ndarray  # bool [n, 26]
    row_lines: np.ndarray           # int64 [n], 1-based
    path: str

    @property
    def n_rows(self):
        return self.labels.size

    def same_as(self, other):
        return all(np.array_equal(getattr(self, name), getattr(other, name)) for name in
                   ("labels", "integers", "integer_present", "categoricals", "categorical_present"))


def _scan(buf, where, first_line):
    capacity = int(np.count_nonzero(buf == 10)) + 1
    labels = np.empty(capacity, dtype=np.float32)
    integers = np.empty((capacity, N_INTEGER), dtype=np.int64)
    integer_present = np.empty((capacity, N_INTEGER), dtype=np.bool_)
    categoricals = np.empty((capacity, N_CATEGORICAL), dtype=np.uint64)
    categorical_present = np.empty((capacity, N_CATEGORICAL), dtype=np.bool_)
    row_lines = np.empty(capacity, dtype=np.int64)
    error, error_start, error_end, n_rows, _ = text_scan.scan_criteo_lines(
        buf, labels, integers, integer_present, categoricals, categorical_present, row_lines)
    if error != text_scan.OK:
        line = first_line + int(np.count_nonzero(buf[:error_start] == 10))
        line_ends = np.flatnonzero(buf[:error_start] == 10)
        line_start = int(line_ends[-1]) + 1 if line_ends.size else 0
        column = int(np.count_nonzero(buf[line_start:error_start] == 9))
        token = bytes(buf[error_start:error_end]).decode("utf-8", errors="backslashreplace")
        raise DataError(f"{_MESSAGES[error]} (column {column + 1})", path=where, line=line, token=token)
    return CriteoColumns(labels[:n_rows], integers[:n_rows], integer_present[:n_rows],
                         categoricals[:n_rows], categorical_present[:n_rows],
                         row_lines[:n_rows] + first_line, where)


def _concatenate(parts, where):
    if len(parts) == 1:
        return parts[0]
    names = ("labels", "integers", "integer_present", "categoricals", "categorical_present", "row_lines")
    return CriteoColumns(*[np.concatenate([getattr(p, n) for p in parts]) for n in names], where)


def _scan_buffer(buf, where):
    columns = _concatenate(files.map_line_pieces(buf, lambda piece, first: _scan(piece, where, first)),
                           where)
    if columns.n_rows == 0:
        raise DataError("empty file: no data lines", path=where, line=1, token="")
    return columns


def read_criteo_columns(path):
    return _scan_buffer(files.read_bytes(path), str(path))


def parse_criteo_bytes(data, name="<bytes>"):
    return _scan_buffer(np.frombuffer(bytes(data), dtype=np.uint8), name)


def _splitmix64(keys):
    z = keys + np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def _hashed_buckets(values, present, first_field, hash_bits):
    """Bucket ids (within the field) of a [n, columns] uint64 block: 0 if missing, else 1..2**bits-1."""
    with np.errstate(over="ignore"):
        salts = _splitmix64(np.arange(first_field, first_field + values.shape[1], dtype=np.uint64))
        hashed = _splitmix64(values ^ salts[None, :])
    buckets = (hashed % np.uint64((1 << hash_bits) - 1)).astype(np.int64) + 1
    return np.where(present, buckets, 0)


def bucketize_integers(integers):
    """The winning libffm Criteo rule: v > 2 becomes floor(log(v)**2); other values stay."""
    with np.errstate(divide="ignore", invalid="ignore"):
        squashed = np.floor(np.log(np.maximum(integers, 1).astype(np.float64)) ** 2).astype(np.int64)
    return np.where(integers > 2, squashed, integers)


# Feature ids are int32: every id must be below 2**31.
MAX_ID = 2**31 - 1


def feature_count(hash_bits, integer_mode="bucketize"):
    """The ids the features take: 39 fields of 2**bits buckets, or 13 valued columns and 26 fields."""
    if integer_mode == "bucketize":
        return N_FIELDS * (1 << hash_bits)
    return N_INTEGER + N_CATEGORICAL * (1 << hash_bits)


def max_hash_bits(integer_mode="bucketize"):
    """The most hash bits whose ids all fit an int32 (25 when bucketized, 26 with raw integers)."""
    bits = 1
    while feature_count(bits + 1, integer_mode) <= MAX_ID + 1:
        bits += 1
    return bits


def check_options(hash_bits, integer_mode):
    """OptionError unless every id of these options fits an int32 (checked before any reading)."""
    if integer_mode not in INTEGER_MODES:
        raise OptionError(f"integer_mode must be one of {INTEGER_MODES}, got {integer_mode!r}")
    limit = max_hash_bits(integer_mode)
    if not 1 <= hash_bits <= limit:
        raise OptionError(f"hash_bits must be in 1..{limit} for integer_mode={integer_mode!r}: "
                          f"{feature_count(limit + 1, integer_mode):,} ids at {limit + 1} bits exceed the "
                          f"{MAX_ID + 1:,} a 32-bit id holds; got {hash_bits}")


def featurize(columns, hash_bits=20, integer_mode="bucketize"):
    """Sparse features with per-entry field ids from raw Criteo columns (module docstring)."""
    check_options(hash_bits, integer_mode)
    n = columns.n_rows
    buckets_per_field = 1 << hash_bits
    categorical_buckets = _hashed_buckets(columns.categoricals, columns.categorical_present,
                                          N_INTEGER, hash_bits)
    categorical_fields = np.arange(N_INTEGER, N_FIELDS)
    if integer_mode == "bucketize":
        integer_buckets = _hashed_buckets(bucketize_integers(columns.integers).view(np.uint64),
                                          columns.integer_present, 0, hash_bits)
        buckets = np.concatenate([integer_buckets, categorical_buckets], axis=1)
        ids = buckets + np.arange(N_FIELDS)[None, :] * buckets_per_field
        indices = ids.astype(np.int32).ravel()
        fields = np.broadcast_to(np.arange(N_FIELDS, dtype=np.int32), (n, N_FIELDS)).ravel()
        indptr = np.arange(n + 1, dtype=np.int64) * N_FIELDS
        values = None
        n_features = feature_count(hash_bits, integer_mode)
    else:
        categorical_ids = N_INTEGER + (categorical_fields - N_INTEGER)[None, :] * buckets_per_field \
            + categorical_buckets
        ids = np.concatenate([np.broadcast_to(np.arange(N_INTEGER), (n, N_INTEGER)), categorical_ids], axis=1)
        present = np.concatenate([columns.integer_present, np.ones((n, N_CATEGORICAL), bool)], axis=1)
        raw_values = np.concatenate([columns.integers.astype(np.float32),
                                     np.ones((n, N_CATEGORICAL), np.float32)], axis=1)
        all_fields = np.broadcast_to(np.arange(N_FIELDS, dtype=np.int32), (n, N_FIELDS))
        indices = ids[present].astype(np.int32)
        fields = all_fields[present]
        values = torch.from_numpy(np.ascontiguousarray(raw_values[present]))
        indptr = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(present.sum(axis=1), out=indptr[1:])
        n_features = feature_count(hash_bits, integer_mode)
    source = DataSource(path=columns.path, format="criteo",
                        options=(("hash_bits", hash_bits), ("integer_mode", integer_mode)),
                        row_lines=torch.from_numpy(columns.row_lines))
    return SparseDataset(indptr=torch.from_numpy(indptr), indices=torch.from_numpy(np.ascontiguousarray(indices)),
                         values=values, labels=torch.from_numpy(columns.labels), n_features=n_features,
                         fields=torch.from_numpy(np.ascontiguousarray(fields)), n_fields=N_FIELDS,
                         source=source)


def load_criteo(path, hash_bits=20, integer_mode="bucketize"):
    """Load a Criteo Kaggle TSV file as one-hot (or valued, see integer_mode) features with fields."""
    check_options(hash_bits, integer_mode)
    return featurize(read_criteo_columns(path), hash_bits, integer_mode)


def iter_criteo_blocks(path, hash_bits=20, integer_mode="bucketize", block_bytes=files.DEFAULT_BLOCK_BYTES):
    """Featurized blocks of a Criteo file too large for memory, in file order."""
    check_options(hash_bits, integer_mode)
    any_rows = False
    for buf, first_line in files.iter_line_blocks(path, block_bytes):
        columns = _scan(buf, str(path), first_line)
        if columns.n_rows:
            any_rows = True
            yield featurize(columns, hash_bits, integer_mode)
    if not any_rows:
        raise DataError("empty file: no data lines", path=path, line=1, token="")


def write_criteo(columns, path):
    """Write raw columns back as Criteo TSV (missing values as empty columns, hex in lower case)."""
    integer_text = np.where(columns.integer_present, columns.integers.astype(str), "")
    categorical_text = np.where(columns.categorical_present,
                                np.char.zfill(np.char.lower(np.vectorize(lambda v: format(int(v), "x"),
                                                                         otypes=[str])(columns.categoricals)), 8)
                                if columns.n_rows else columns.categoricals.astype(str), "")
    labels = columns.labels.astype(np.int64).astype(str)
    with open(path, "w", encoding="ascii", newline="\n") as out:
        for row in range(columns.n_rows):
            out.write("\t".join([labels[row], *integer_text[row], *categorical_text[row]]) + "\n")
