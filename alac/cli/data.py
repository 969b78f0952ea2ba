"""The command line's data: the synthetic set, files read into one feature space (a share of the
training rows held out for validation), or a training file streamed from a block store on disk."""

from __future__ import annotations

from dataclasses import dataclass, field

from alac.errors import AlacError, OptionError


def table_options(args):
    return {"label": args.label, "fields": args.fields, "numeric": args.numeric, "numeric_mode": args.numeric_mode,
            "hash_bits": args.hash_bits, "separator": args.separator, "numeric_scale": args.numeric_scale}


@dataclass
class TrainingData:
    train: object
    valid: object = None
    test: object = None
    described: str = ""
    options: dict = field(default_factory=dict)   # how predict reads new files the same way


def _file_options(args, format):
    """(keyword options of the format's loader, what a checkpoint keeps to read files alike)."""
    if format in ("libsvm", "libffm"):
        loader = {} if args.n_features is None else {"n_features": args.n_features}
        return loader, {"n_features": args.n_features}
    if format == "criteo":
        loader = {} if args.hash_bits is None else {"hash_bits": args.hash_bits}
        return loader, dict(loader)
    return {}, {}


def load_data(args, plan):
    """The training, validation and test sets of the command line, in one feature space (plan: how
    the training data is laid out, for a block store)."""
    import torch

    from alac.data import formats
    from alac.data.compact import compact_feature_ids
    from alac.data.split import split

    if args.train is None:
        from alac.data.synthetic import criteo_like

        rows = args.synthetic or (4_000_000 if torch.cuda.is_available() else 200_000)
        train, valid, test = split(criteo_like(rows, seed=args.seed), (0.8, 0.1, 0.1), seed=args.seed)
        return TrainingData(train, valid, test, f"synthetic Criteo-shaped, {rows:,} rows (80/10/10 split)",
                            {"format": "synthetic"})
    from alac.runtime.movement import out_of_core

    if args.out_of_core or out_of_core.is_block_store(args.train):
        return _blocks_on_disk(args, plan)
    if getattr(args, "block_codec", "none") != "none":
        raise OptionError("--block-codec compresses the block store --out-of-core writes: give --out-of-core")
    paths = [p for p in (args.train, args.valid, args.test) if p is not None]
    options, scaling = {}, None
    # every file exists and is a file before any is parsed; the training file's format is the one
    found = []      # how each file's format was detected: the training file's is said in the first line
    format = [formats.resolve_format(path, args.format, tables=True, detected=lambda *how: found.append(how))
              for path in paths][0]
    shown = f"{format}, detected {found[0][1]}" if found else format
    if format == "table":
        from alac.data.table import load_table_files

        loaded, encoding = load_table_files(paths, **table_options(args))
        options["table"] = encoding.to_dict()
        format = "table"
        scaling = encoding.describe_scaling()
    else:
        loader, options = _file_options(args, format)
        if format == "libsvm":
            from alac.data import load_libsvm_files

            loaded = load_libsvm_files(paths, **loader)
        elif format == "libffm":
            from alac.data import load_libffm_files

            loaded = load_libffm_files(paths, **loader)
        else:
            loaded = [formats.load(p, format, **loader) for p in paths]
        base = dict(loaded[0].source.options).get("base")
        options["zero_based"] = None if base is None else base == 0
    loaded[0].check_has_features()
    declared = loaded[0].n_features
    loaded, renumbered = compact_feature_ids(loaded)
    if args.normalize:
        loaded = [dataset.normalize_rows() for dataset in loaded]
    train = loaded.pop(0)
    valid = loaded.pop(0) if args.valid else None
    test = loaded.pop(0) if args.test else None
    options.update(format=format, normalize=args.normalize)
    notes = [note for note in (
        "rows L2-normalized" if args.normalize else None,
        f"ids renumbered densely: the {train.n_features:,} used of {declared:,}" if renumbered else None,
        scaling) if note]
    described = f"{args.train} ({'; '.join([shown, *notes])})"
    data = TrainingData(train, valid, test, described, options)
    return with_validation_split(data, args)


def _blocks_on_disk(args, plan):
    """The training data as a block store on disk (alac.runtime.movement.out_of_core), validation and test
    files beside it."""
    from alac.data import formats
    from alac.runtime.execution.executor import resolve_backend
    from alac.runtime.movement import out_of_core

    out_of_core.check_arguments(args)
    # a store folder's files beside it: the format of the validation or test file
    format = formats.resolve_format(args.valid or args.test if out_of_core.is_block_store(args.train) else args.train,
                                    args.format)
    loader, options = _file_options(args, format)
    store, described = out_of_core.training_blocks(
        args.train, format, plan, resolve_backend(args.backend)[1], loader,
        lambda done, rows: print(f"  written {done:,} of {rows:,} rows to the block store", flush=True),
        codec=None if args.block_codec == "none" else args.block_codec)
    valid, test = out_of_core.evaluation_files(args, store, format, loader)
    options.update(format=format, normalize=False, zero_based=None if store.base is None else store.base == 0)
    return TrainingData(store, valid, test, described, options)


def with_validation_split(data, args):
    """Without validation data (and with early stopping), a random args.valid_split share of the
    training rows (seed args.seed) becomes the validation set."""
    from alac.data.split import hold_out

    if data.valid is not None or args.early_stopping == "none":
        return data
    train, valid = hold_out(data.train, args.valid_split, args.seed)
    if valid is None:
        return data
    return TrainingData(train, valid, data.test, data.described + f", {100 * args.valid_split:g} % of its rows "
                        "held out for validation", data.options)


def read_like_training(path, saved, format_option):
    """A data file read as the checkpoint's training data was (format, id base, table encoding)."""
    from alac.data import formats

    options = saved["data_options"]
    trained_on = options.get("format")
    format = format_option or (trained_on if trained_on in formats.FORMATS + ("table",) else "auto")
    if format == "table":
        from alac.data.table import TableEncoding, load_table_files

        if "table" not in options:
            raise AlacError(f"{saved['path']}: the model was not trained on a table; give --format")
        (dataset,), _ = load_table_files([path], encoding=TableEncoding.from_dict(options["table"], saved["path"]))
    else:
        format = formats.resolve_format(path, format)
        load_options = {}
        if format in ("libsvm", "libffm") and options.get("zero_based") is not None:
            load_options["zero_based"] = options["zero_based"]  # the training files' id base
        if format == "criteo" and options.get("hash_bits") is not None:
            load_options["hash_bits"] = options["hash_bits"]
        dataset = formats.load(path, format, **load_options)
    return dataset.normalize_rows() if options.get("normalize") else dataset
