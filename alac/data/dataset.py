"""`SparseDataset`: the one in-memory form every loader returns and every layout consumes."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np
import torch

from alac.data.tokens import source_token
from alac.errors import DataError


@dataclass(frozen=True)
class DataSource:
    """Where a data set came from, so that later errors can point at a file line."""

    path: str | None = None
    format: str = "memory"
    options: tuple = ()
    # 1-based line number of each row in `path`; None for in-memory data.
    row_lines: torch.Tensor | None = field(default=None, compare=False, repr=False)

    def describe_row(self, row):
        """'file: line N' for a row, or 'row N' when the data did not come from a file."""
        if self.row_lines is not None and self.path is not None:
            return f"{self.path}: line {int(self.row_lines[row])}"
        return f"row {row}"

    def line_of_row(self, row):
        return None if self.row_lines is None else int(self.row_lines[row])


def same_numbering(first, second):
    """Whether two feature_ids maps (None: the files' own ids) number features alike."""
    if first is None or second is None:
        return first is second
    return first is second or (first.numel() == second.numel() and torch.equal(first.cpu(), second.cpu()))


@dataclass(eq=False)
class SparseDataset:
    """Rows of sparse features with labels, in CSR form.

    indptr: int64 [n_rows + 1]; indices: int32 [nnz] feature ids in [0, n_features);
    values: float32 [nnz], or None when every value is 1 (one-hot data); labels: float32 [n_rows];
    fields: int32 [nnz] field id of every entry (libffm, Criteo), or None.
    feature_ids: int64 [n_features], ascending: the file's own id of every feature where the ids were
    renumbered densely over those the data uses (alac.data.compact), or None (ids are the file's).
    Tensors may live on any device; loaders return them on the CPU.
    """

    indptr: torch.Tensor
    indices: torch.Tensor
    values: torch.Tensor | None
    labels: torch.Tensor
    n_features: int
    fields: torch.Tensor | None = None
    n_fields: int = 0
    source: DataSource = field(default_factory=DataSource)
    feature_ids: torch.Tensor | None = None

    def __post_init__(self):
        expect = {"indptr": torch.int64, "indices": torch.int32, "labels": torch.float32}
        if self.values is not None:
            expect["values"] = torch.float32
        if self.fields is not None:
            expect["fields"] = torch.int32
        for name, dtype in expect.items():
            tensor = getattr(self, name)
            if not isinstance(tensor, torch.Tensor) or tensor.dtype != dtype or tensor.dim() != 1:
                raise TypeError(f"SparseDataset.{name} must be a 1-D {dtype} tensor, got "
                                f"{type(tensor).__name__} {getattr(tensor, 'dtype', '')}")
        if self.indptr.numel() != self.labels.numel() + 1:
            raise ValueError(f"indptr has {self.indptr.numel()} entries for {self.labels.numel()} rows")
        for name in ("values", "fields"):
            tensor = getattr(self, name)
            if tensor is not None and tensor.numel() != self.indices.numel():
                raise ValueError(f"{name} has {tensor.numel()} entries, indices {self.indices.numel()}")
        if self.feature_ids is not None and (self.feature_ids.dtype != torch.int64
                                             or self.feature_ids.shape != (self.n_features,)):
            raise TypeError(f"SparseDataset.feature_ids must be {self.n_features} int64 ids, got "
                            f"{self.feature_ids.dtype} {tuple(self.feature_ids.shape)}")

    def original_ids(self):
        """The file's own id of every entry (int64)."""
        ids = self.indices.long()
        return ids if self.feature_ids is None else self.feature_ids.to(ids.device)[ids]

    def in_space_of(self, feature_ids):
        """The data set with its features renumbered into another space: that of `feature_ids` (the
        file's ids of a compacted space, ascending), or of the file's own ids (None). Entries whose
        feature that space has not are given the id one past it (n_features grows by one), for the
        caller to refuse or leave out as unseen features."""
        original = self.original_ids()
        if feature_ids is None:
            n = int(original.max()) + 1 if self.nnz else 0
            return dataclasses.replace(self, indices=original.int(), n_features=max(n, self.n_features),
                                       feature_ids=None)
        feature_ids = feature_ids.to(original.device)
        n = feature_ids.numel()
        position = torch.searchsorted(feature_ids, original)
        found = feature_ids[position.clamp(max=max(n - 1, 0))] == original if n else torch.zeros_like(original, bool)
        found &= position < n
        unseen = not bool(found.all())
        return dataclasses.replace(self, indices=torch.where(found, position, n).int(), n_features=n + unseen,
                                   feature_ids=feature_ids if not unseen else None)

    @property
    def n_rows(self):
        return self.labels.numel()

    @property
    def nnz(self):
        return self.indices.numel()

    @property
    def is_binary(self):
        """True when every value is 1 and `values` is therefore not stored."""
        return self.values is None

    @property
    def device(self):
        return self.indices.device

    def row_lengths(self):
        return self.indptr[1:] - self.indptr[:-1]

    def entry_rows(self):
        """The row of every entry (its size known: no host round trip)."""
        return torch.repeat_interleave(torch.arange(self.n_rows, device=self.device), self.row_lengths(),
                                       output_size=self.nnz)

    def with_entries(self, keep, rows=None):
        """The data set of the entries where keep (a bool per entry) holds, every row kept (rows: the
        entries' rows, entry_rows(), where the caller has them)."""
        rows = self.entry_rows() if rows is None else rows
        indptr = torch.zeros_like(self.indptr)
        torch.cumsum(torch.bincount(rows[keep], minlength=self.n_rows), 0, out=indptr[1:])

        def kept(tensor):
            return None if tensor is None else tensor[keep]

        return dataclasses.replace(self, indptr=indptr, indices=self.indices[keep], values=kept(self.values),
                                   fields=kept(self.fields))

    def value_scale(self):
        """The mean magnitude of the known features' values (1 for one-hot data), as a layout's
        (alac.runtime.movement.layout) of the same rows."""
        if self.values is None:
            return 1.0
        known = self.indices >= 0
        return mean_scale(self.values[known].double().abs().sum(), int(known.sum()))

    def values_or_ones(self):
        if self.values is not None:
            return self.values
        return torch.ones(self.nnz, dtype=torch.float32, device=self.device)

    def to(self, device):
        def move(tensor):
            return None if tensor is None else tensor.to(device)

        # feature_ids stay where they are: a map for ids read and written on the host
        return dataclasses.replace(
            self, indptr=move(self.indptr), indices=move(self.indices), values=move(self.values),
            labels=move(self.labels), fields=move(self.fields))

    def take(self, rows):
        """The data set made of `rows` (a 1-D integer tensor of row indices), in that order."""
        rows = torch.as_tensor(rows, dtype=torch.int64, device=self.device)
        # only the taken rows' bounds read (the rows may be a part of a set in mapped host memory)
        lengths = self.indptr[rows + 1] - self.indptr[rows]
        indptr = torch.zeros(rows.numel() + 1, dtype=torch.int64, device=self.device)
        torch.cumsum(lengths, 0, out=indptr[1:])
        entry_row = torch.repeat_interleave(torch.arange(rows.numel(), device=self.device), lengths)
        entry = self.indptr[rows][entry_row] + (torch.arange(indptr[-1].item(), device=self.device)
                                                - indptr[:-1][entry_row])

        def gather(tensor):
            return None if tensor is None else tensor[entry]

        row_lines = self.source.row_lines
        source = dataclasses.replace(
            self.source, row_lines=None if row_lines is None else row_lines[rows.cpu()])
        return SparseDataset(indptr=indptr, indices=gather(self.indices), values=gather(self.values),
                             labels=self.labels[rows], n_features=self.n_features,
                             fields=gather(self.fields), n_fields=self.n_fields, source=source,
                             feature_ids=self.feature_ids)

    def normalize_rows(self):
        """The data set with every row scaled to unit L2 norm (empty rows stay empty)."""
        values = self.values_or_ones()
        row = self.entry_rows()
        norms = torch.zeros(self.n_rows, device=self.device).index_add_(0, row, values * values).sqrt()
        return dataclasses.replace(self, values=values / norms[row])

    def to_scipy(self):
        """The features as a scipy.sparse.csr_matrix (float32), duplicates kept as stored."""
        import scipy.sparse

        return scipy.sparse.csr_matrix(
            (self.values_or_ones().cpu().numpy(), self.indices.cpu().numpy(), self.indptr.cpu().numpy()),
            shape=(self.n_rows, self.n_features))

    def same_as(self, other):
        """True when both hold identical arrays (values compared after expanding the all-ones flag)."""
        if (self.n_features, self.n_fields, self.n_rows, self.nnz) != (
                other.n_features, other.n_fields, other.n_rows, other.nnz):
            return False
        if (self.fields is None) != (other.fields is None):
            return False
        pairs = [(self.indptr, other.indptr), (self.indices, other.indices),
                 (self.values_or_ones(), other.values_or_ones()), (self.labels, other.labels)]
        if self.fields is not None:
            pairs.append((self.fields, other.fields))
        return all(torch.equal(a.cpu(), b.cpu()) for a, b in pairs)

    def check_has_features(self, what="the training data"):
        """A DataError for a data set without a single feature entry (a file of labels only): nothing
        could be learnt from it but the base rate."""
        if self.nnz == 0:
            raise DataError(f"{what} has no features: every one of its {self.n_rows:,} rows is a label alone",
                            path=self.source.path)

    def check_feature_space(self, n_features, n_fields=None, reference_name="the training data"):
        """Raise DataError unless every feature (and field) id is below n_features (n_fields).

        Use it for a test set loaded on its own against the training set's space. The error names the
        first entry that falls outside, with its file, line and token when known.
        """
        checks = [("feature", self.indices, n_features)]
        if self.fields is not None and n_fields is not None:
            checks.append(("field", self.fields, n_fields))
        for what, ids, limit in checks:
            outside = torch.nonzero(ids >= limit)
            if outside.numel():
                entry = int(outside[0, 0])
                row = int(torch.searchsorted(self.indptr.cpu(), torch.tensor(entry), right=True)) - 1
                raise DataError(
                    f"{what} id {int(ids[entry])} (0-based) is outside the training feature space "
                    f"of {limit} {what}s (from {reference_name}); "
                    f"load both files together or pass n_features={limit}",
                    path=self.source.path, line=self.source.line_of_row(row),
                    token=self.entry_token(entry))

    def entry_token(self, entry):
        """The text of entry `entry` in its file (for error messages), or 'id:value' for arrays."""
        row = int(torch.searchsorted(self.indptr.cpu(), torch.tensor(entry), right=True)) - 1
        token = source_token(self.source, row, entry - int(self.indptr[row]),
                             None if self.fields is None else int(self.fields[entry]))
        if token is not None:
            return token
        return f"{int(self.indices[entry])}:{float(self.values_or_ones()[entry]):.9g}"

    def summary(self):
        return (f"SparseDataset({self.n_rows:,} rows, {self.nnz:,} nnz, {self.n_features:,} features"
                + (" (renumbered)" if self.feature_ids is not None else "")
                + (f", {self.n_fields} fields" if self.fields is not None else "")
                + (", binary" if self.is_binary else "") + f", from {self.source.path or self.source.format})")

    __repr__ = summary

    def to_numpy_dict(self):
        """Plain numpy arrays and JSON-able metadata, for on-disk caching."""
        arrays = {"indptr": self.indptr, "indices": self.indices, "labels": self.labels}
        if self.values is not None:
            arrays["values"] = self.values
        if self.fields is not None:
            arrays["fields"] = self.fields
        if self.source.row_lines is not None:
            arrays["row_lines"] = self.source.row_lines
        if self.feature_ids is not None:
            arrays["feature_ids"] = self.feature_ids
        meta = {"n_features": self.n_features, "n_fields": self.n_fields, "path": self.source.path,
                "format": self.source.format, "options": [list(o) for o in self.source.options]}
        return {k: v.cpu().numpy() for k, v in arrays.items()}, meta

    @classmethod
    def from_numpy_dict(cls, arrays, meta):
        def tensor(name):
            return torch.from_numpy(np.ascontiguousarray(arrays[name])) if name in arrays else None

        source = DataSource(path=meta["path"], format=meta["format"],
                            options=tuple(tuple(o) for o in meta["options"]),
                            row_lines=tensor("row_lines"))
        return cls(indptr=tensor("indptr"), indices=tensor("indices"), values=tensor("values"),
                   labels=tensor("labels"), n_features=meta["n_features"], fields=tensor("fields"),
                   n_fields=meta["n_fields"], source=source, feature_ids=tensor("feature_ids"))


def mean_scale(total, count):
    """A mean magnitude total / count (1 without values), rounded to float32: the same whether summed
    whole (a layout) or piece by piece (a block store), so the optimizer defaults it sets are too."""
    return float(torch.tensor(float(total) / count, dtype=torch.float32)) if count else 1.0
