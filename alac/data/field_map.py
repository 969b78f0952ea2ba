"""Field ids of one-hot features from a feature index file, for field-aware models on LIBSVM data.

The FNN paper's data sets (the shared iPinYou sample among them) ship `featindex.txt`: one
`field:value<TAB>index` line per feature, the field the text before the first colon (the whole key
when it has none, as iPinYou's `truncate`). `load_featindex`
reads it into a FieldMap (field ids numbered in order of first appearance); `FieldMap.apply` gives a
dataset the field of every entry, as a libffm file would. Where the index file does not match the data
(the shared iPinYou sample's `featindex.txt` puts 12 of a row's 16 features in one field), `from_positions`
takes the fields of one-hot rows from the place of each feature in its row.
"""

from __future__ import annotations

import dataclasses
import re
import warnings
from dataclasses import dataclass

import torch

from alac.errors import DataError

# the index column: its leading digits; the shared iPinYou sample has one line with text after them
_INDEX = re.compile(r"(\d+)(.*)", re.DOTALL)


@dataclass(frozen=True)
class FieldMap:
    """field_of: int32 [n_features], the field id of every feature index (-1: not listed);
    names: the fields' names by id; path: the file it was read from; feature_ids: where the map was
    made of a renumbered data set (alac.data.compact), the files' id of each index of field_of."""

    field_of: torch.Tensor
    names: tuple
    path: str | None = None
    feature_ids: torch.Tensor | None = None

    @property
    def n_fields(self):
        return len(self.names)

    def apply(self, dataset, unlisted_ok=False):
        """The dataset with the field of every entry from this map (its own fields replaced). DataError
        naming the data's file, line and token when an entry's feature is not listed here, unless
        unlisted_ok (its field is then -1: data to predict, whose features a model may not know)."""
        field_of = self.field_of.to(dataset.indices.device)
        ids = dataset.original_ids()
        if self.feature_ids is not None:
            ids = dataset.in_space_of(self.feature_ids).indices.long()
        inside = ids < field_of.numel()
        fields = torch.where(inside, field_of[ids.clamp(max=max(field_of.numel() - 1, 0))], -1)
        unlisted = torch.nonzero(fields < 0)
        if unlisted.numel() and not unlisted_ok:
            entry = int(unlisted[0, 0])
            row = int(torch.searchsorted(dataset.indptr.cpu(), torch.tensor(entry), right=True)) - 1
            feature = int(dataset.original_ids()[entry])
            raise DataError(f"feature {feature} has no field in {self.path or 'the field map'} "
                            f"({unlisted.numel():,} entries like it)", path=dataset.source.path,
                            line=dataset.source.line_of_row(row), token=dataset.entry_token(entry))
        return dataclasses.replace(dataset, fields=fields.int(), n_fields=self.n_fields)


def load_featindex(path):
    """FieldMap of a `field:value<TAB>index` file. DataError naming the line and its text for a line
    without a tab or a key, an index that is not a number, or an index listed twice."""
    names, field_ids, indices, fields, line_numbers, trailing = [], {}, [], [], [], []
    with open(path, encoding="utf-8", errors="replace") as lines:
        for number, line in enumerate(lines, start=1):
            text = line.rstrip("\n")
            if not text.strip():
                continue
            key, tab, index = text.rpartition("\t")
            if not tab or not key:
                raise DataError("a feature index line is `field:value<TAB>index`", path=path, line=number,
                                token=text)
            match = _INDEX.fullmatch(index.strip())
            if match is None:
                raise DataError("the feature index is not a number", path=path, line=number, token=index)
            if match.group(2):
                trailing.append((number, index))
            name = key.split(":", 1)[0]
            if name not in field_ids:
                field_ids[name] = len(names)
                names.append(name)
            indices.append(int(match.group(1)))
            fields.append(field_ids[name])
            line_numbers.append(number)
    if trailing:
        number, index = trailing[0]
        warnings.warn(f"{path}: line {number}: text after the feature index {index!r} ignored "
                      f"({len(trailing)} such lines)", stacklevel=2)
    if not indices:
        raise DataError("no feature index lines", path=path)
    index_of = torch.tensor(indices, dtype=torch.int64)
    counts = torch.bincount(index_of)
    if bool((counts > 1).any()):
        twice = int(torch.nonzero(counts > 1)[0, 0])
        first, second = [line_numbers[k] for k, index in enumerate(indices) if index == twice][:2]
        raise DataError(f"feature index {twice} is listed twice (first on line {first})", path=path, line=second,
                        token=str(twice))
    field_of = torch.full((counts.numel(),), -1, dtype=torch.int32)
    field_of[index_of] = torch.tensor(fields, dtype=torch.int32)
    return FieldMap(field_of, tuple(names), str(path))


def from_positions(dataset):
    """FieldMap of a one-hot set whose rows hold one feature per field, fields in the same order in every
    row (the iPinYou sample: 16 per row, each field a range of ids): field f is the f-th entry of a row.
    DataError naming the line when rows differ in length or a feature sits at two places."""
    lengths = dataset.indptr.diff()
    width = int(lengths[0]) if lengths.numel() else 0
    uneven = torch.nonzero(lengths != width)
    if width == 0 or uneven.numel():
        row = int(uneven[0, 0]) if uneven.numel() else 0
        raise DataError(f"fields by position need rows of one feature per field, all of the same length: this row "
                        f"has {int(lengths[row]) if lengths.numel() else 0} entries, the first {width}",
                        path=dataset.source.path, line=dataset.source.line_of_row(row))
    ids = dataset.indices.long()        # the data set's own numbering (feature_ids below maps it to the files')
    position = torch.arange(ids.numel(), device=ids.device) % width
    field_of = torch.full((dataset.n_features,), -1, dtype=torch.int64, device=ids.device)
    field_of.scatter_reduce_(0, ids, position, reduce="amax")
    moved = torch.nonzero(field_of[ids] != position)
    if moved.numel():
        entry = int(moved[0, 0])
        raise DataError(f"feature {int(dataset.original_ids()[entry])} sits at places {int(position[entry])} and "
                        f"{int(field_of[ids[entry]])} of rows: fields by position need each feature at one place",
                        path=dataset.source.path, line=dataset.source.line_of_row(entry // width),
                        token=dataset.entry_token(entry))
    return FieldMap(field_of.int().cpu(), tuple(str(f) for f in range(width)), dataset.source.path,
                    dataset.feature_ids)
