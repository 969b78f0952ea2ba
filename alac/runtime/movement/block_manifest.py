"""The manifest of a block store (its meta.json): what every file of the store holds, checked as a
whole before any training.

Every file is covered by a checksum recorded in the manifest (each block's bytes and xxh3, each
per-feature array file's), and the manifest by one over its own canonical JSON, so that an edited
or damaged manifest is refused like a damaged block. A manifest whose checksum holds is also checked
for consistency (blocks that tile the chunks and edges, row counts, the re-index a permutation and
its inverse), so that a store written wrong never trains silently either. Every problem is one
DataError naming the file.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import xxhash

from alac.checksums import file_checksum
from alac.errors import DataError
from alac.runtime.movement.block_codec import CODECS
from alac.runtime.movement.blocks import OPTIONAL_ARRAYS, Block

VERSION = 4
# stores of version 3 are read as well: they are version 4 stores without field ranks
READABLE = (3, VERSION)
META_FILE = "meta.json"
FEATURE_ARRAYS = ("new_to_old", "old_to_new", "frequency")
# each feature's field, in a store whose narrow words are ranks within a field (its "field_ranks")
FIELD_ARRAY = "field_of"
# how to rebuild, said with every refusal of a store
REBUILD = ("write the store again from its data file (alac train --out-of-core FILE, or "
           "alac.runtime.movement.block_store.write_block_store)")
# per-feature arrays are compared with their permutation check in pieces of this many ids
CHECK_PIECE = 1 << 24


def _canonical(meta):
    return json.dumps({k: v for k, v in meta.items() if k != "checksum"}, sort_keys=True).encode()


def feature_arrays(meta):
    """The names of a store's per-feature array files."""
    return FEATURE_ARRAYS + ((FIELD_ARRAY,) if meta.get("field_ranks") is not None else ())


def sealed(meta, folder):
    """meta with the checksums of the folder's feature array files and of itself."""
    meta = dict(meta, version=VERSION,
                files={f"{name}.npy": file_checksum(Path(folder) / f"{name}.npy") for name in feature_arrays(meta)})
    return dict(meta, checksum=xxhash.xxh3_64_hexdigest(_canonical(meta)))


def block_file(folder, index):
    return Path(folder) / f"block-{index:06d}.bin"


def read_manifest(folder):
    """(meta dict, {name: numpy array} of the per-feature arrays) of a store folder, every file
    checked (the blocks by size here; their bytes as they are read)."""
    folder = Path(folder)
    path = folder / META_FILE
    if not folder.is_dir():
        raise DataError("not a block store (no such folder)", path=folder)
    if not path.is_file():
        raise DataError(f"not a block store (no {META_FILE})", path=folder)
    try:
        meta = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as error:
        raise DataError(f"a damaged block store manifest ({type(error).__name__}); {REBUILD}", path=path) from None
    if not isinstance(meta, dict):
        raise DataError(f"a damaged block store manifest (not an object); {REBUILD}", path=path)
    if meta.get("version") not in READABLE:
        raise DataError(f"a block store of version {meta.get('version')}, this alac reads versions {READABLE[0]} to "
                        f"{VERSION}: {REBUILD}", path=path)
    if meta.get("checksum") != xxhash.xxh3_64_hexdigest(_canonical(meta)):
        raise DataError(f"the manifest does not match its checksum: it was edited or damaged; {REBUILD}", path=path)
    try:
        _check_meta(meta)
    except (KeyError, TypeError, ValueError) as error:
        raise DataError(f"an inconsistent block store manifest ({error}); {REBUILD}", path=path) from None
    features = {}
    for name in feature_arrays(meta):
        array_path = folder / f"{name}.npy"
        if not array_path.is_file():
            raise DataError(f"missing: the store's {name}.npy; {REBUILD}", path=array_path)
        if file_checksum(array_path) != meta["files"][array_path.name]:
            raise DataError(f"damaged: its bytes do not match the store's checksum; {REBUILD}", path=array_path)
        try:
            features[name] = np.load(array_path, allow_pickle=False)
        except (OSError, ValueError) as error:
            raise DataError(f"not readable ({error}); {REBUILD}", path=array_path) from None
    try:
        _check_features(features, meta)
    except ValueError as error:
        raise DataError(f"an inconsistent block store ({error}); {REBUILD}", path=folder) from None
    for index, entry in enumerate(meta["blocks"]):
        block_path = block_file(folder, index)
        size = block_path.stat().st_size if block_path.is_file() else None
        stored = entry.get("stored", entry["bytes"])
        if size != stored:
            raise DataError(f"block {index} is {'missing' if size is None else f'truncated: {size:,} bytes'} of "
                            f"{stored:,}; {REBUILD}", path=block_path)
    return meta, features


def _require(condition, what):
    if not condition:
        raise ValueError(what)


def _is_int(value, least=0):
    return isinstance(value, int) and not isinstance(value, bool) and value >= least


def _check_meta(meta):
    """ValueError (or KeyError, TypeError) where the manifest's fields disagree with each other."""
    for key in ("n_rows", "n_features", "tile_width"):
        _require(_is_int(meta[key], 1), f"{key} {meta[key]!r} is not a positive integer")
    _require(_is_int(meta["n_fields"]), f"n_fields {meta['n_fields']!r}")
    _require(meta["fixed_width"] is None or _is_int(meta["fixed_width"], 1), f"fixed_width {meta['fixed_width']!r}")
    _require(meta["base"] in (0, 1, None), f"base {meta['base']!r} is not 0, 1 or null")
    scale = meta["value_scale"]
    _require(isinstance(scale, (int, float)) and math.isfinite(scale) and scale > 0, f"value_scale {scale!r}")
    _require(meta.get("codec") in CODECS, f"codec {meta.get('codec')!r}")
    optional = meta["optional"]
    _require(isinstance(optional, list) and set(optional) <= set(OPTIONAL_ARRAYS), f"optional {optional!r}")
    _require(("edge_feature" in optional) != ("edge_id16" in optional), "optional names no one form of the ids")
    ranks = meta.get("field_ranks")
    _require(ranks is None or (_is_int(ranks, 1) and ranks == meta["fixed_width"] and "edge_id16" in optional
                               and meta["version"] > 3),
             f"field_ranks {ranks!r} of rows of {meta['fixed_width']!r} ids")
    chunk_size = meta["options"]["chunk_size"]
    _require(_is_int(chunk_size, 1), f"chunk_size {chunk_size!r}")
    blocks = meta["blocks"]
    _require(isinstance(blocks, list) and blocks, "no blocks")
    chunk, edge, rows = 0, 0, 0
    for index, entry in enumerate(blocks):
        block = Block(**{name: entry[name] for name in Block.__dataclass_fields__})
        _require(all(_is_int(v) for v in vars(block).values()) and _is_int(entry["bytes"], 1)
                 and _is_int(entry.get("stored", 1), 1) and isinstance(entry["xxh3"], str), f"block {index}'s fields")
        frames = entry.get("frames", [entry.get("stored", entry["bytes"])])
        _require(isinstance(frames, list) and frames and all(_is_int(f, 1) for f in frames)
                 and sum(frames) == entry.get("stored", entry["bytes"]) and _is_int(entry.get("planes", 1), 1),
                 f"block {index}'s frames {frames!r}")
        _require(block.first_chunk == chunk and block.first_edge == edge,
                 f"block {index} starts at chunk {block.first_chunk} and edge {block.first_edge}, where the blocks "
                 f"before it end at chunk {chunk} and edge {edge}")
        _require(block.chunks >= 1 and 1 <= block.rows <= block.chunks * chunk_size
                 and block.edges >= 0 and block.escapes <= block.edges,
                 f"block {index} has {block.rows} rows in {block.chunks} chunks and {block.edges} edges")
        chunk, edge, rows = block.end_chunk, block.end_edge, rows + block.rows
    _require(rows == meta["n_rows"], f"the blocks hold {rows:,} rows, n_rows says {meta['n_rows']:,}")
    stats = meta["stats"]
    _require(stats["rows"] == meta["n_rows"] and stats["chunks"] == chunk and stats["n_features"] == meta["n_features"]
             and _is_int(stats["nnz"]) and stats["nnz"] <= edge,
             "the statistics disagree with the blocks")


def _check_features(features, meta):
    """ValueError unless new_to_old is a permutation of the features, old_to_new its inverse, and
    frequency their counts in the new order (summing to the store's non-zeros)."""
    n = meta["n_features"]
    for name, array in features.items():
        _require(array.shape == (n,) and array.dtype.kind == "i", f"{name}.npy holds {array.dtype} {array.shape}, "
                 f"not {n:,} integers")
    new_to_old, old_to_new, frequency = (features[name] for name in FEATURE_ARRAYS)
    if FIELD_ARRAY in features:
        field_of = features[FIELD_ARRAY]
        _require(bool(((field_of >= 0) & (field_of < meta["field_ranks"])).all()),
                 f"{FIELD_ARRAY}.npy has fields outside 0 to {meta['field_ranks'] - 1}")
    for start in range(0, n, CHECK_PIECE):
        ids = new_to_old[start:start + CHECK_PIECE]
        _require(bool(((ids >= 0) & (ids < n)).all()), "new_to_old.npy has ids outside the features")
        _require(np.array_equal(old_to_new[ids], np.arange(start, start + ids.size)),
                 "old_to_new.npy is not the inverse of new_to_old.npy (or new_to_old is no permutation)")
    _require(bool((frequency >= 0).all()) and bool((np.diff(frequency) <= 0).all()),
             "frequency.npy is not in descending order")
    _require(int(frequency.sum(dtype=np.int64)) == meta["stats"]["nnz"],
             "frequency.npy does not count the store's non-zeros")
