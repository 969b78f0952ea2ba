"""One entry point for files of any supported format: detection, loading, block iteration, caching."""

from __future__ import annotations

import numpy as np

from alac.cache import DiskCache
from alac.data import criteo, files, libsvm
from alac.data.dataset import SparseDataset
from alac.data.tokens import TEXT_FORMATS
from alac.errors import DataError

FORMATS = TEXT_FORMATS
_OPTIONS = {
    "libsvm": {"n_features", "zero_based"},
    "libffm": {"n_features", "n_fields", "zero_based"},
    "criteo": {"hash_bits", "integer_mode"},
}
# Enough lines to see past a header comment; detection never reads more.
_DETECT_BYTES = 1 << 16
# a name's last suffix (after a compression suffix) that says the format
_SUFFIXES = {".csv": "table", ".parquet": "table", ".pq": "table", ".libsvm": "libsvm", ".svm": "libsvm",
             ".ffm": "libffm", ".libffm": "libffm"}
_COMPRESSED = (".gz", ".bz2", ".zst", ".xz")


def _by_suffix(path):
    name = str(path).lower()
    for suffix in _COMPRESSED:
        name = name.removesuffix(suffix)
    return next((fmt for suffix, fmt in _SUFFIXES.items() if name.endswith(suffix)), None)


def _by_content(head):
    """The format of a file's first bytes: 'table' for Parquet or comma-separated lines without
    id:value tokens, 'criteo' for tab-separated lines, 'libffm' for field:id:value tokens, else 'libsvm'."""
    if head.startswith(b"PAR1"):
        return "table"
    for line in head.split(b"\n"):
        line = line.split(b"#", 1)[0].strip()
        if not line:
            continue
        if b"\t" in line and b":" not in line:
            return "criteo"
        tokens = line.split()
        if b"," in line and not any(b":" in token for token in tokens[1:]):
            return "table"
        if len(tokens) > 1 and tokens[1].count(b":") == 2:
            return "libffm"
        return "libsvm"
    return "libsvm"


def detection(path):
    """(format, how it was found): from the file name's suffix where it names one, else from the
    content's first lines; how says which, and the compression it was read through."""
    compressed = files.compression(path)
    through = f", read through {compressed}" if compressed else ""
    named = _by_suffix(path)
    if named is not None:
        return named, f"from its name{through}"
    return _by_content(files.head(path, _DETECT_BYTES)), f"from its content{through}"


def detect_format(path):
    """The format `detection` finds (table, criteo, libffm or libsvm)."""
    return detection(path)[0]


def resolve_format(path, format, tables=False, detected=None):
    """The format to read path as: format, or the detected one for None / "auto" (told to
    detected(format, how) where given: alac.data.formats.detection's). tables: the caller reads tables
    too (else a detected table is a DataError that says where tables are read)."""
    files.file_size(path)
    if format in (None, "auto"):
        format, how = detection(path)
        if format == "table" and not tables:
            raise DataError("looks like a table (CSV or Parquet, columns named by a header): alac train, "
                            "predict and data stats read tables (--format table)", path=path)
        if detected is not None:
            detected(format, how)
        return format
    if format == "table" and tables:
        return format
    if format not in FORMATS:
        raise DataError(f"unknown format {format!r}; choose one of {', '.join(FORMATS)} or 'auto'",
                        path=path)
    return format


def _check_options(format, options):
    unknown = set(options) - _OPTIONS[format]
    if unknown:
        raise TypeError(f"{format} files take the options {sorted(_OPTIONS[format])}, "
                        f"not {sorted(unknown)}")


def _load_uncached(path, format, options):
    if format == "libsvm":
        return libsvm.load_libsvm(path, **options)
    if format == "libffm":
        return libsvm.load_libffm(path, **options)
    return criteo.load_criteo(path, **options)


def dataset_cache_key(path, format, options):
    return DiskCache.key("dataset", content=files.content_hash(path), format=format,
                         options=sorted(options.items()))


def load(path, format="auto", cache=False, cache_dir=None, **options):
    """Load a data file as a SparseDataset; with cache=True a parse is reused by content hash."""
    format = resolve_format(path, format)
    _check_options(format, options)
    if not cache:
        return _load_uncached(path, format, options)
    store = DiskCache(cache_dir)
    dataset, _ = store.get_or_build(dataset_cache_key(path, format, options), SparseDataset,
                                    lambda: _load_uncached(path, format, options))
    return dataset


def iter_blocks(path, format="auto", block_bytes=files.DEFAULT_BLOCK_BYTES, **options):
    """SparseDataset blocks of a file larger than memory (see the per-format iterators)."""
    format = resolve_format(path, format)
    _check_options(format, options)
    if format == "criteo":
        return criteo.iter_criteo_blocks(path, block_bytes=block_bytes, **options)
    return libsvm.iter_blocks(path, format=format, block_bytes=block_bytes, **options)


def label_summary(labels):
    """A short description of the labels: classes and their shares, or the range of real labels."""
    values = labels.cpu().numpy()
    classes, counts = np.unique(values, return_counts=True)
    if classes.size <= 2:
        return ", ".join(f"{c:g}: {n:,} ({100 * n / values.size:.2f}%)" for c, n in zip(classes, counts))
    return f"real-valued, min {values.min():g}, mean {values.mean():g}, max {values.max():g}"
