"""Tables of categorical columns (CSV, Parquet, a pandas DataFrame) as one-hot rows with field ids.

Rating and click logs often come as tables: a label column and categorical columns (user id, movie
id, ad id, ...). Every chosen column becomes a field with ids of its own, field after field:
- a categorical value gets the id of its first appearance in the encoding's first table (1..n of its
  field); id 0 of the field is "missing or never seen", so every row has one entry per field;
- with `hash_bits`, a value is hashed (pandas' stable 64-bit hash of its text) into ids
  1..2**bits - 1 of its field instead, and nothing is kept per value;
- `numeric` columns are numbers: `numeric_mode="bucketize"` maps v > 2 to floor(log(v)**2) (the rule
  of Criteo's integer columns) and then indexes the bucket like a categorical value;
  `numeric_mode="value"` makes the column one feature whose value is the number (left out where
  missing), scaled by `numeric_scale`: "standard" (default: centred and divided by the standard
  deviation of the encoding's first table, so that a timestamp or a price does not swamp every other
  feature), "log" (sign(v) log(1 + |v|), the heavy-tailed counts' transform) or "none".
Numbers must be finite as float32 (inf, nan or 1e308 are refused with their file, line and column).
Files are read by pandas (Parquet through pyarrow), never by a parser of alac's own.
"""

from __future__ import annotations

import io
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from alac.data import files
from alac.data.dataset import DataSource, SparseDataset
from alac.errors import DataError
from alac.optional import need

NUMERIC_MODES = ("bucketize", "value")
NUMERIC_SCALES = ("standard", "log", "none")
FLOAT32_MAX = float(np.finfo(np.float32).max)
MAX_FEATURES = 2**31 - 1
PARQUET_SUFFIXES = (".parquet", ".pq")


def _pandas():
    return need("pandas", "reading tables")


def read_table(source, separator=","):
    """(DataFrame of strings, name for messages, first data line) of a CSV/Parquet file or a DataFrame."""
    pd = _pandas()
    if isinstance(source, pd.DataFrame):
        return source.astype(str).where(source.notna(), ""), "the table", 1
    path = Path(source)
    if path.is_dir() and not files.is_stdin(source):
        raise DataError("is a folder, not a table file", path=path)
    files.file_size(source)     # a regular file (or standard input): never a device or a FIFO
    try:
        with files.open_data(source) as handle:
            if path.suffix.lower() in PARQUET_SUFFIXES or files.head(source, 4) == b"PAR1":
                # Parquet seeks: its bytes in memory (a compressed or piped one is not seekable)
                need("pyarrow", "reading Parquet tables")
                frame = pd.read_parquet(io.BytesIO(handle.read()))
                frame = frame.astype(str).where(frame.notna(), "")
            else:
                frame = pd.read_csv(handle, sep=separator, dtype=str, keep_default_na=False, na_filter=False,
                                    skipinitialspace=True)
    except pd.errors.EmptyDataError:
        raise DataError("empty file: no header line", path=path, line=1) from None
    except (pd.errors.ParserError, UnicodeDecodeError, ValueError, OSError, EOFError) as error:
        raise DataError(f"not a readable table ({_one_line(error)})", path=path) from None
    if frame.empty:
        raise DataError("no data rows after the header", path=path, line=2)
    # CSV: line 1 is the header; Parquet has no lines, so "line" counts rows from 2 as well
    return frame, str(path), 2


def _one_line(error):
    text = " ".join(str(error).split())
    return text if len(text) <= 200 else text[:200] + "..."


@dataclass
class TableEncoding:
    """How table columns become features; fitted on the first table, then applied to the others."""

    label: str
    fields: tuple
    numeric: tuple = ()
    numeric_mode: str = "bucketize"
    hash_bits: int | None = None
    vocabularies: dict = field(default_factory=dict)  # field -> list of value texts (id = position + 1)
    numeric_scale: str = "standard"
    scales: dict = field(default_factory=dict)        # value field -> [centre, divisor] (standard)

    def __post_init__(self):
        if self.numeric_mode not in NUMERIC_MODES:
            raise DataError(f"numeric_mode must be one of {NUMERIC_MODES}, got {self.numeric_mode!r}")
        if self.numeric_scale not in NUMERIC_SCALES:
            raise DataError(f"numeric_scale must be one of {NUMERIC_SCALES}, got {self.numeric_scale!r}")
        if self.hash_bits is not None and not 1 <= self.hash_bits <= 30:
            raise DataError(f"hash_bits must be in 1..30 (2**bits ids per field), got {self.hash_bits}")
        unknown = set(self.numeric) - set(self.fields)
        if unknown:
            raise DataError(f"numeric columns {sorted(unknown)} are not among the fields {list(self.fields)}")
        if self.label in self.fields:
            raise DataError(f"the label column {self.label!r} cannot also be a field")

    def _is_value(self, name):
        return name in self.numeric and self.numeric_mode == "value"

    def field_width(self, name):
        if self._is_value(name):
            return 1
        if self.hash_bits is not None:
            return 1 << self.hash_bits
        return len(self.vocabularies[name]) + 1

    @property
    def n_features(self):
        return sum(self.field_width(name) for name in self.fields)

    def to_dict(self):
        """Plain data (for checkpoints): names, numbers and lists of strings only."""
        return {"label": self.label, "fields": list(self.fields), "numeric": list(self.numeric),
                "numeric_mode": self.numeric_mode, "hash_bits": self.hash_bits,
                "vocabularies": {k: list(v) for k, v in self.vocabularies.items()},
                "numeric_scale": self.numeric_scale, "scales": {k: list(v) for k, v in self.scales.items()}}

    @classmethod
    def from_dict(cls, saved, where="the checkpoint"):
        """The encoding to_dict wrote; a DataError naming `where` for anything else."""
        try:
            encoding = cls(str(saved["label"]), tuple(map(str, saved["fields"])), tuple(map(str, saved["numeric"])),
                           saved["numeric_mode"], saved["hash_bits"],
                           {str(k): [str(t) for t in v] for k, v in saved["vocabularies"].items()},
                           saved.get("numeric_scale", "none"),
                           {str(k): [float(c), float(d)] for k, (c, d) in saved.get("scales", {}).items()})
            if encoding.hash_bits is not None and not isinstance(encoding.hash_bits, int):
                raise TypeError("hash_bits")
            if encoding.hash_bits is None and any(name not in encoding.vocabularies for name in encoding.fields
                                                  if not encoding._is_value(name)):
                raise KeyError("a field's vocabulary")
        except (KeyError, TypeError, ValueError, AttributeError) as error:
            raise DataError(f"a damaged table encoding ({type(error).__name__}: {error})", path=where) from None
        return encoding

    def describe_scaling(self):
        """What the value columns' numbers become, for the run's first lines (None without any)."""
        names = [name for name in self.fields if self._is_value(name)]
        if not names:
            return None
        if self.numeric_scale == "standard":
            return "numeric value columns standardized (by the training table's mean and deviation): " + ", ".join(
                f"{name} (mean {centre:.6g}, deviation {divisor:.6g})" for name in names
                for centre, divisor in [self.scales[name]])
        if self.numeric_scale == "log":
            return f"numeric value columns as sign(v) log(1 + |v|): {', '.join(names)}"
        return f"numeric value columns as they are (no scaling): {', '.join(names)}"

    def _scaled(self, name, numbers):
        if self.numeric_scale == "log":
            return np.sign(numbers) * np.log1p(np.abs(numbers))
        if self.numeric_scale == "standard":
            centre, divisor = self.scales[name]
            return (numbers - centre) / divisor
        return numbers

    def _check_columns(self, frame, where):
        missing = [c for c in (self.label, *self.fields) if c not in frame.columns]
        if missing:
            raise DataError(f"no column {missing[0]!r}; the table's columns are {', '.join(map(str, frame.columns))}",
                            path=where, line=1)

    def _labels(self, frame, where, first_line):
        pd = _pandas()
        text = frame[self.label].str.strip()
        labels = pd.to_numeric(text, errors="coerce").to_numpy(dtype=np.float64)
        with np.errstate(invalid="ignore"):
            bad = np.flatnonzero(~(np.abs(labels) <= FLOAT32_MAX))
        if bad.size:
            row = int(bad[0])
            raise DataError(f"label column {self.label!r} is not a number", path=where, line=first_line + row,
                            token=text.iloc[row])
        return labels.astype(np.float32)

    def _numbers(self, column, name, where, first_line):
        pd = _pandas()
        text = column.str.strip()
        numbers = pd.to_numeric(text, errors="coerce").to_numpy(dtype=np.float64)
        bad = np.flatnonzero(np.isnan(numbers) & (text != "").to_numpy())
        if bad.size:
            row = int(bad[0])
            raise DataError(f"numeric column {name!r} is not a number", path=where, line=first_line + row,
                            token=text.iloc[row])
        with np.errstate(invalid="ignore"):
            bad = np.flatnonzero(np.abs(numbers) > FLOAT32_MAX)
        if bad.size:
            row = int(bad[0])
            raise DataError(f"numeric column {name!r} holds a number that is not finite as float32",
                            path=where, line=first_line + row, token=text.iloc[row])
        return numbers

    def _tokens(self, frame, name, where, first_line):
        """The column's values as texts ('' where missing); numeric columns bucketized first."""
        column = frame[name].astype(str).str.strip()
        if name not in self.numeric:
            return column.to_numpy(dtype=object)
        numbers = self._numbers(column, name, where, first_line)
        present = ~np.isnan(numbers)
        with np.errstate(divide="ignore", invalid="ignore"):
            squashed = np.floor(np.log(np.maximum(numbers, 1.0)) ** 2)
        buckets = np.where(numbers > 2, squashed, numbers)
        return np.where(present, np.char.mod("%g", np.nan_to_num(buckets)), "").astype(object)

    def fit(self, frame, where="the table", first_line=2):
        """Index every categorical field's values in order of first appearance (nothing to fit when
        values are hashed); returns self."""
        pd = _pandas()
        self._check_columns(frame, where)
        if self.hash_bits is None:
            for name in self.fields:
                if not self._is_value(name):
                    tokens = self._tokens(frame, name, where, first_line)
                    self.vocabularies[name] = [str(u) for u in pd.unique(tokens[tokens != ""])]
        if self.numeric_scale == "standard":
            for name in self.fields:
                if self._is_value(name):
                    numbers = self._numbers(frame[name].astype(str), name, where, first_line)
                    present = numbers[~np.isnan(numbers)]
                    centre = float(present.mean()) if present.size else 0.0
                    divisor = float(present.std()) if present.size else 0.0
                    # a constant column keeps its values' size rather than dividing by zero
                    self.scales[name] = [centre, divisor if divisor > 0 else max(abs(centre), 1.0)]
        return self

    def _ids(self, name, tokens):
        """Ids within the field: 0 for missing or unseen values."""
        pd = _pandas()
        if self.hash_bits is not None:
            hashed = pd.util.hash_array(tokens.astype(str).astype(object))
            ids = (hashed % np.uint64((1 << self.hash_bits) - 1)).astype(np.int64) + 1
        else:
            ids = pd.Index(self.vocabularies[name]).get_indexer(tokens.astype(str)).astype(np.int64) + 1
        return np.where(tokens == "", 0, ids)  # get_indexer's -1 (unseen) became 0 above

    def encode(self, frame, where="the table", first_line=2):
        """A SparseDataset of the table in this (fitted) encoding's feature space."""
        self._check_columns(frame, where)
        labels = self._labels(frame, where, first_line)
        n = len(frame)
        columns, values, present = [], [], []
        offset = 0
        for name in self.fields:
            if self._is_value(name):
                numbers = self._scaled(name, self._numbers(frame[name].astype(str), name, where, first_line))
                columns.append(np.full(n, offset, np.int64))
                values.append(np.nan_to_num(numbers).astype(np.float32))
                present.append(~np.isnan(numbers))
            else:
                columns.append(offset + self._ids(name, self._tokens(frame, name, where, first_line)))
                values.append(np.ones(n, np.float32))
                present.append(np.ones(n, bool))
            offset += self.field_width(name)
        if offset > MAX_FEATURES:
            raise DataError(f"the fields take {offset:,} feature ids, more than the {MAX_FEATURES:,} a 32-bit id "
                            f"holds: lower hash_bits", path=where)
        ids = np.stack(columns, axis=1)
        kept = np.stack(present, axis=1)
        value_table = np.stack(values, axis=1)
        field_ids = np.broadcast_to(np.arange(len(self.fields), dtype=np.int32), ids.shape)
        indptr = np.zeros(n + 1, np.int64)
        np.cumsum(kept.sum(axis=1), out=indptr[1:])
        has_values = any(self._is_value(name) for name in self.fields)
        options = (("fields", tuple(self.fields)), ("hash_bits", self.hash_bits), ("numeric", tuple(self.numeric)),
                   ("numeric_mode", self.numeric_mode), ("numeric_scale", self.numeric_scale))
        source = DataSource(path=None if where == "the table" else where, format="table", options=options,
                            row_lines=torch.arange(first_line, first_line + n, dtype=torch.int64))
        return SparseDataset(
            indptr=torch.from_numpy(indptr), indices=torch.from_numpy(ids[kept].astype(np.int32)),
            values=torch.from_numpy(np.ascontiguousarray(value_table[kept])) if has_values else None,
            labels=torch.from_numpy(labels), n_features=self.n_features,
            fields=torch.from_numpy(np.ascontiguousarray(field_ids[kept])), n_fields=len(self.fields), source=source)


def _encoding(frame, where, label, fields, numeric, numeric_mode, hash_bits, numeric_scale):
    if label is None:
        raise DataError("a table needs its label column named (label=..., --label)", path=where)
    if fields is None:
        fields = [c for c in frame.columns if c != label]
    elif isinstance(fields, str):
        fields = [f.strip() for f in fields.split(",") if f.strip()]
    if not fields:
        raise DataError("no feature columns: name them (fields=..., --fields)", path=where)
    if isinstance(numeric, str):
        numeric = [f.strip() for f in numeric.split(",") if f.strip()]
    return TableEncoding(label, tuple(fields), tuple(numeric or ()), numeric_mode, hash_bits,
                         numeric_scale=numeric_scale)


def load_table_files(sources, label=None, fields=None, numeric=(), numeric_mode="bucketize", hash_bits=None,
                     separator=",", encoding=None, numeric_scale="standard"):
    """(SparseDatasets of several tables in one feature space, their TableEncoding): the first
    table fits the encoding unless a fitted one is given; every table is read and its columns
    checked before any is encoded."""
    frames = [read_table(source, separator) for source in sources]
    if encoding is None:
        frame, where, first = frames[0]
        encoding = _encoding(frame, where, label, fields, numeric, numeric_mode, hash_bits, numeric_scale).fit(
            frame, where, first)
    for frame, where, _ in frames:
        encoding._check_columns(frame, where)
    return [encoding.encode(frame, where, first) for frame, where, first in frames], encoding


def load_table(source, label=None, fields=None, numeric=(), numeric_mode="bucketize", hash_bits=None,
               separator=",", numeric_scale="standard"):
    """One table (a CSV or Parquet file, or a pandas DataFrame) as a SparseDataset: label column
    `label`, one field per column of `fields` (default: every other column). See the module doc."""
    return load_table_files([source], label, fields, numeric, numeric_mode, hash_bits, separator,
                            numeric_scale=numeric_scale)[0][0]
