"""Training data that is never loaded whole: a block store folder given as the training data, or a
training file written into one in two passes (`alac train --out-of-core`), streamed from disk.

The store is cached under alac's cache directory by the file's content and the layout options, so a
second run reads it at once; validation and test files are loaded whole (they are read after every
epoch) in the store's id base.
"""

from __future__ import annotations

from pathlib import Path

from alac.errors import OptionError
from alac.runtime.movement.block_store import META_FILE, DiskBlocks, cached_block_store
from alac.runtime.movement.blocks import is_block_source
from alac.runtime.movement.layout import LayoutOptions
from alac.runtime.movement.streams import BLOCKS_IN_BUDGET

# Block bytes without a memory budget: large enough that a block's copy dwarfs its kernel launch,
# small enough for a ring of pinned buffers (benchmarks/streaming.py moves 110-345 MB blocks).
DEFAULT_BLOCK_BYTES = 256 << 20


def is_block_store(path):
    return path is not None and (Path(path) / META_FILE).is_file()


def rows_and_features(data):
    return (data.meta.n_rows, data.meta.n_features) if is_block_source(data) else (data.n_rows, data.n_features)


def training_blocks(path, format, plan, device, loader_options, progress=None, codec=None):
    """(DiskBlocks, description) of a block store folder, or of a file's cached store (written in two
    passes over the file when absent or damaged: it is never held whole; codec: how its block files
    hold their bytes, alac.runtime.movement.block_codec)."""
    import torch

    pin = torch.device(device).type == "cuda"
    if is_block_store(path):
        store = DiskBlocks(path, pin=pin)
        return store, f"{path} (block store, {len(store.blocks)} blocks)"
    if format == "table":
        raise OptionError("--out-of-core reads LIBSVM, libffm and Criteo files; a table (CSV/Parquet) is loaded whole")
    block_bytes = (plan.memory_budget // BLOCKS_IN_BUDGET) if plan.memory_budget else DEFAULT_BLOCK_BYTES
    store = cached_block_store(path, format, LayoutOptions(chunk_size=plan.chunk_size), plan.chunks_per_batch,
                               block_bytes, device=device, progress=progress, codec=codec, **loader_options)
    compressed = "" if store.codec is None else f", {store.codec}-compressed"
    return store, f"{path} ({format}, out of core: {len(store.blocks)}{compressed} blocks from {store.folder})"


def check_arguments(args):
    """What out-of-core training cannot do, refused before anything is read."""
    if args.train is None:
        raise OptionError("--out-of-core streams a training file (--train FILE or a block store folder)")
    if args.valid is None and args.test is None:
        raise OptionError("training out of core reports its metrics on --valid or --test: give one (holding "
                          "out a share of the training rows needs them in memory)")
    if args.normalize:
        raise OptionError("--normalize needs the training rows in memory; it is not available out of core")


def evaluation_files(args, store, format, loader_options):
    """The validation and test sets of the command line, loaded whole in the store's id base."""
    from alac.data import formats

    options = dict(loader_options)
    if format in ("libsvm", "libffm") and store.base is not None:
        options["zero_based"] = store.base == 0
    return [None if path is None else formats.load(path, format, **options) for path in (args.valid, args.test)]
