"""LIBSVM and libffm text files: loading (whole or in blocks), writing, and their error messages.

Semantics, chosen to match scikit-learn's `load_svmlight_file` where it has one:
- labels are kept as written (±1, 0/1 or real);
- `zero_based="auto"` treats ids as 0-based if any id in the loaded files is 0, else 1-based;
- explicit zero values (`7:0`) are kept as entries, duplicate ids in a row are kept as written;
- `qid:N` right after the label is accepted and ignored; `#` starts a comment; CRLF is accepted;
- empty and comment-only lines are skipped, but line numbers in errors count every physical line;
- numbers are parsed exactly as Python's `float()` and then rounded to float32; NaN and infinite
  values (spelled out, or overflowing float32) are errors.
The exact grammar is in `alac.data.text_scan`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from alac.data import files, text_scan
from alac.data.dataset import DataSource, SparseDataset
from alac.data.tokens import feature_token, token_text
from alac.errors import DataError, OptionError

# Numbers longer than this are converted one by one with float(): no real data set has them, and
# the vectorized conversion pads every slow token to the longest one.
_LONGEST_VECTORIZED_NUMBER = 64

_MESSAGES = {
    text_scan.ERR_LABEL: "label is not a number",
    text_scan.ERR_LABEL_NONFINITE: "label is NaN or infinite (or overflows float32)",
    text_scan.ERR_VALUE_NONFINITE: "value is NaN or infinite (or overflows float32)",
    text_scan.ERR_ID_TOO_LARGE: f"feature id is larger than {text_scan.MAX_ID}",
    text_scan.ERR_FIELD_TOO_LARGE: f"field id is larger than {text_scan.MAX_ID}",
    text_scan.ERR_VALUE: "value is not a number",
    text_scan.ERR_ID: "id is not a non-negative integer",
}
_SEPARATORS = frozenset(b" \t\r\n#")
_FORMAT_NAMES = {1: "libsvm", 2: "libffm"}
_FEATURE_FORMS = {1: "'id:value'", 2: "'field:id:value'"}


@dataclass
class _ScannedBlock:
    """One buffer's rows with raw (not yet base-shifted) ids."""

    labels: np.ndarray
    indptr: np.ndarray
    ids: np.ndarray
    fields: np.ndarray | None
    values: np.ndarray
    row_lines: np.ndarray


def _scan(buf, n_parts, where, first_line):
    """Scan one buffer; raise DataError naming `where`, the line and the token on bad input."""
    colon_count = int(np.count_nonzero(buf == 58))
    row_capacity = int(np.count_nonzero(buf == 10)) + 1
    entry_capacity = colon_count // n_parts
    labels = np.empty(row_capacity, dtype=np.float32)
    indptr = np.empty(row_capacity + 1, dtype=np.int64)
    row_lines = np.empty(row_capacity, dtype=np.int64)
    ids = np.empty(entry_capacity, dtype=np.int32)
    fields = np.empty(entry_capacity if n_parts == 2 else 0, dtype=np.int32)
    values = np.empty(entry_capacity, dtype=np.float32)
    slow_capacity = 64 + entry_capacity // 16
    while True:
        slow_start = np.empty(slow_capacity, dtype=np.int64)
        slow_end = np.empty(slow_capacity, dtype=np.int64)
        slow_target = np.empty(slow_capacity, dtype=np.int64)
        error, error_start, error_end, n_rows, nnz, n_slow, _ = text_scan.scan_sparse_lines(
            buf, n_parts, labels, indptr, row_lines, ids, fields, values, slow_start, slow_end,
            slow_target)
        if error != text_scan.ERR_SLOW_FULL:
            break
        slow_capacity = max(2 * slow_capacity, entry_capacity + row_capacity)
    if error != text_scan.OK:
        line = first_line + int(np.count_nonzero(buf[:error_start] == 10))
        token = token_text(buf[error_start:error_end])
        if error == text_scan.ERR_MALFORMED:
            message = f"malformed feature, expected {_FEATURE_FORMS[n_parts]}"
        else:
            message = _MESSAGES[error]
        raise DataError(message, path=where, line=line, token=token)
    labels, indptr, row_lines = labels[:n_rows], indptr[:n_rows + 1], row_lines[:n_rows] + first_line
    values, ids = values[:nnz], ids[:nnz]
    _convert_slow_numbers(buf, slow_start[:n_slow], slow_end[:n_slow], slow_target[:n_slow],
                          labels, values, where, first_line)
    return _ScannedBlock(labels=labels, indptr=indptr, ids=ids,
                         fields=fields[:nnz] if n_parts == 2 else None, values=values,
                         row_lines=row_lines)


def _convert_slow_numbers(buf, starts, ends, targets, labels, values, where, first_line):
    """Convert the numbers the scanner left to NumPy's correctly rounded parser, in one call."""
    if starts.size == 0:
        return
    lengths = ends - starts
    parsed = np.empty(starts.size, dtype=np.float64)
    short = lengths <= _LONGEST_VECTORIZED_NUMBER
    if short.any():
        width = int(lengths[short].max())
        offsets = np.arange(width)
        positions = starts[short, None] + offsets
        inside = offsets < lengths[short, None]
        text = np.where(inside, buf[np.minimum(positions, buf.size - 1)], 0).astype(np.uint8)
        with np.errstate(over="ignore"):  # overflow to inf is reported below, with its line
            parsed[short] = np.ascontiguousarray(text).view(f"S{width}").ravel().astype(np.float64)
    for i in np.flatnonzero(~short):
        parsed[i] = float(bytes(buf[starts[i]:ends[i]]))
    with np.errstate(over="ignore"):
        as_float32 = parsed.astype(np.float32)
    bad = np.flatnonzero(~np.isfinite(as_float32))
    if bad.size:
        i = bad[0]
        line = first_line + int(np.count_nonzero(buf[:starts[i]] == 10))
        what = "label" if targets[i] < 0 else "value"
        token_start = int(starts[i])
        while token_start > 0 and buf[token_start - 1] not in _SEPARATORS:
            token_start -= 1
        raise DataError(f"{what} is NaN or infinite (or overflows float32)", path=where, line=line,
                        token=token_text(buf[token_start:ends[i]]))
    is_value = targets >= 0
    values[targets[is_value]] = as_float32[is_value]
    labels[-targets[~is_value] - 1] = as_float32[~is_value]


def _scan_buffer(buf, n_parts, where):
    return files.map_line_pieces(buf, lambda piece, first_line: _scan(piece, n_parts, where, first_line))


def _concatenate(blocks):
    if len(blocks) == 1:
        return blocks[0]
    shifts = np.cumsum([0] + [b.ids.size for b in blocks[:-1]])
    indptr = np.concatenate([blocks[0].indptr[:1]] + [b.indptr[1:] + s for b, s in zip(blocks, shifts)])
    fields = None if blocks[0].fields is None else np.concatenate([b.fields for b in blocks])
    return _ScannedBlock(labels=np.concatenate([b.labels for b in blocks]), indptr=indptr,
                         ids=np.concatenate([b.ids for b in blocks]), fields=fields,
                         values=np.concatenate([b.values for b in blocks]),
                         row_lines=np.concatenate([b.row_lines for b in blocks]))


class _Lines:
    """Finds a line's text in a file or an in-memory buffer, for error messages."""

    def __init__(self, path=None, buf=None):
        self.path, self.buf = path, buf

    def __call__(self, line):
        if self.path is not None:
            return files.line_text(self.path, line)
        return bytes(self.buf).split(b"\n")[line - 1].rstrip(b"\r")


def _entry_error(block, entry, message, where, lines, n_parts):
    row = int(np.searchsorted(block.indptr, entry, side="right")) - 1
    line = int(block.row_lines[row])
    token = feature_token(lines(line), entry - int(block.indptr[row]), n_parts)
    return DataError(message, path=where, line=line, token=token)


def _resolve_base(zero_based, blocks):
    if zero_based == "auto":
        return 0 if any(bool((b.ids == 0).any()) for b in blocks) else 1
    if zero_based not in (True, False):
        raise OptionError(f"zero_based must be True, False or 'auto', got {zero_based!r}")
    return 0 if zero_based else 1


def _to_dataset(block, base, n_features, n_fields, where, lines, n_parts, options):
    """Shift ids to base 0, check them against the declared spaces and build the SparseDataset."""
    ids = block.ids
    if base == 1:
        below = np.flatnonzero(ids == 0)
        if below.size:
            raise _entry_error(block, int(below[0]), "feature id 0 is below the base: ids are 1-based "
                               "here (pass zero_based=True for 0-based ids)", where, lines, n_parts)
        ids -= np.int32(1)  # in place: the scanned block is not used again
    if n_features is not None:
        beyond = np.flatnonzero(ids >= n_features)
        if beyond.size:
            raise _entry_error(block, int(beyond[0]), f"feature id is beyond the declared "
                               f"n_features={n_features} (ids are {base}-based)", where, lines, n_parts)
    fields = block.fields
    if fields is not None and n_fields is not None:
        beyond = np.flatnonzero(fields >= n_fields)
        if beyond.size:
            raise _entry_error(block, int(beyond[0]), f"field id is beyond the declared "
                               f"n_fields={n_fields}", where, lines, n_parts)
    binary = bool((block.values == 1).all())
    source = DataSource(path=where, format=_FORMAT_NAMES[n_parts],
                        options=tuple(sorted(dict(options, base=base).items())),
                        row_lines=torch.from_numpy(block.row_lines))
    return SparseDataset(
        indptr=torch.from_numpy(block.indptr), indices=torch.from_numpy(np.ascontiguousarray(ids)),
        values=None if binary else torch.from_numpy(block.values),
        labels=torch.from_numpy(block.labels), n_features=n_features,
        fields=None if fields is None else torch.from_numpy(fields), n_fields=n_fields or 0,
        source=source)


def _max_plus_one(arrays):
    return max((int(a.max()) + 1 for a in arrays if a is not None and a.size), default=0)


def _load_files(paths, n_parts, n_features, n_fields, zero_based, buffers=None):
    names = [str(p) for p in paths]
    if buffers is None:
        buffers = [files.read_bytes(p) for p in paths]
        line_sources = [_Lines(path=p) for p in paths]
    else:
        line_sources = [_Lines(buf=b) for b in buffers]
    blocks = [_concatenate(_scan_buffer(buf, n_parts, name)) for buf, name in zip(buffers, names)]
    for block, name in zip(blocks, names):
        if block.labels.size == 0:
            raise DataError("empty file: no data lines", path=name, line=1, token="")
    base = _resolve_base(zero_based, blocks)
    if n_features is None:
        n_features = max(_max_plus_one([b.ids for b in blocks]) - base, 0)
    if n_parts == 2 and n_fields is None:
        n_fields = _max_plus_one([b.fields for b in blocks])
    options = {"zero_based": zero_based}
    return [_to_dataset(block, base, n_features, n_fields, name, lines, n_parts, options)
            for block, name, lines in zip(blocks, names, line_sources)]


def load_libsvm(path, n_features=None, zero_based="auto"):
    """Load a LIBSVM/svmlight file as a SparseDataset (see the module docstring for semantics)."""
    return _load_files([path], 1, n_features, None, zero_based)[0]


def load_libsvm_files(paths, n_features=None, zero_based="auto"):
    """Load several LIBSVM files (train, test, ...) into one feature space and one id base."""
    return _load_files(paths, 1, n_features, None, zero_based)


def load_libffm(path, n_features=None, n_fields=None, zero_based=True):
    """Load a libffm file (`label field:feature:value ...`); libffm's ids are 0-based by convention."""
    return _load_files([path], 2, n_features, n_fields, zero_based)[0]


def load_libffm_files(paths, n_features=None, n_fields=None, zero_based=True):
    return _load_files(paths, 2, n_features, n_fields, zero_based)


def parse_bytes(data, format="libsvm", n_features=None, n_fields=None, zero_based="auto",
                name="<bytes>"):
    """Parse LIBSVM or libffm text held in memory; errors name `name` as the file."""
    n_parts = {"libsvm": 1, "libffm": 2}[format]
    buf = np.frombuffer(bytes(data), dtype=np.uint8)
    return _load_files([name], n_parts, n_features, n_fields, zero_based, buffers=[buf])[0]


def iter_blocks(path, format="libsvm", n_features=None, n_fields=None, zero_based="auto",
                block_bytes=files.DEFAULT_BLOCK_BYTES):
    """Yield SparseDataset blocks of a file too large for memory, in file order.

    With zero_based="auto" the base is decided by the first block (0-based if it has an id 0); a
    later id 0 in a file judged 1-based raises DataError naming its line. Pass n_features so that
    every block shares the feature space; without it each block's n_features is its own max + 1.
    """
    n_parts = {"libsvm": 1, "libffm": 2}[format]
    base = None
    lines = _Lines(path=path)
    any_rows = False
    for buf, first_line in files.iter_line_blocks(path, block_bytes):
        block = _scan(buf, n_parts, str(path), first_line)
        if block.labels.size == 0:
            continue
        any_rows = True
        if base is None:
            base = _resolve_base(zero_based, [block])
        block_features = n_features if n_features is not None else max(
            _max_plus_one([block.ids]) - base, 0)
        block_fields = n_fields if n_fields is not None or n_parts == 1 else _max_plus_one([block.fields])
        yield _to_dataset(block, base, block_features, block_fields, str(path), lines, n_parts,
                          {"zero_based": zero_based})
    if not any_rows:
        raise DataError("empty file: no data lines", path=path, line=1, token="")


def _format_numbers(array):
    """'%.9g' text of float32 numbers: 9 significant digits identify a float32 exactly."""
    return np.char.mod("%.9g", array.astype(np.float64))


def write_libsvm(dataset, path, zero_based=False):
    """Write a data set as LIBSVM text (1-based ids unless zero_based); loads back identically."""
    _write(dataset, path, zero_based, with_fields=False)


def write_libffm(dataset, path):
    """Write a data set as libffm text (0-based fields and ids); it needs per-entry fields."""
    if dataset.fields is None:
        raise DataError("libffm output needs field ids, and this data set has none",
                        path=dataset.source.path)
    _write(dataset, path, True, with_fields=True)


def _write(dataset, path, zero_based, with_fields):
    dataset = dataset.to("cpu")
    ids = dataset.indices.numpy().astype(np.int64) + (0 if zero_based else 1)
    tokens = np.char.add(np.char.add(ids.astype(str), ":"), _format_numbers(dataset.values_or_ones().numpy()))
    if with_fields:
        tokens = np.char.add(np.char.add(dataset.fields.numpy().astype(str), ":"), tokens)
    labels = _format_numbers(dataset.labels.numpy())
    indptr = dataset.indptr.numpy()
    with open(path, "w", encoding="ascii", newline="\n") as out:
        for row in range(dataset.n_rows):
            out.write(" ".join([labels[row], *tokens[indptr[row]:indptr[row + 1]]]) + "\n")

