"""The `alac` command line: `alac data stats FILE`, and later train / predict / inspect / bench."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

from alac.cli.parser import Parser
from alac.errors import AlacError


def _add_load_options(parser):
    from alac.cli.options import add_data_options

    add_data_options(parser)
    parser.add_argument("--zero-based", default="auto", choices=["auto", "true", "false"],
                        help="are LIBSVM ids 0-based (default: auto, as scikit-learn)")
    parser.add_argument("--integer-mode", default=None, choices=["bucketize", "value"],
                        help="Criteo integer columns: log-squared buckets (default) or raw values")


def _load_options(args, format):
    from alac.data.formats import resolve_format

    path = getattr(args, "file", None) or args.data
    # said on stdout beside the figures (stderr holds only an error's one line), not into --json's output
    said = None if getattr(args, "json", False) else (
        lambda found, how: print(f"alac: {path}: read as {found} (detected {how})"))
    format = resolve_format(path, format, tables=True, detected=said)
    options = {}
    if format == "table":
        from alac.cli.data import table_options

        return format, table_options(args)
    if format in ("libsvm", "libffm"):
        if args.n_features is not None:
            options["n_features"] = args.n_features
        if args.zero_based != "auto" or format == "libsvm":
            options["zero_based"] = {"auto": "auto", "true": True, "false": False}[args.zero_based]
    else:
        if args.hash_bits is not None:
            options["hash_bits"] = args.hash_bits
        if args.integer_mode is not None:
            options["integer_mode"] = args.integer_mode
    return format, options


def _read_laid_out(path, format, options, layout_options, device=None, cache=False):
    """(data set, its layout, the options to show) of a file of any format train reads, tables included."""
    from alac.runtime.movement.layout import build_layout, load_layout

    if format != "table":
        dataset, layout = load_layout(path, format, layout_options, device=device, cache=cache, **options)
        return dataset, layout, options
    from alac.data.table import load_table_files

    (dataset,), encoding = load_table_files([path], **options)
    return dataset, build_layout(dataset, layout_options, device=device), {"label": encoding.label,
                                                                           "fields": len(encoding.fields)}


def _data_stats(args):
    from alac.data.formats import label_summary
    from alac.runtime.movement.layout import LayoutOptions, build_layout

    layout_options = LayoutOptions(chunk_size=args.chunk_size, hot_size=args.hot_size)
    started = time.perf_counter()
    if args.synthetic is not None:
        from alac.data.synthetic import criteo_like

        if args.file is not None:
            raise AlacError("give either a FILE or --synthetic ROWS, not both")
        dataset = criteo_like(args.synthetic, seed=args.seed, device=args.device)
        layout = build_layout(dataset, layout_options, device=args.device)
        source, format, options = f"synthetic Criteo-shaped, seed {args.seed}", "synthetic", {}
        how = "generated"
    else:
        if args.file is None:
            raise AlacError("give a data FILE (or --synthetic ROWS)")
        format, options = _load_options(args, args.format)
        dataset, layout, options = _read_laid_out(args.file, format, options, layout_options, args.device,
                                                  cache=not args.no_cache)
        how = "tables are not cached" if format == "table" else "cache off" if args.no_cache else "disk cache on"
        source = str(args.file)
    seconds = time.perf_counter() - started
    rows = [("file", source), ("format", format + "".join(f", {k}={v}" for k, v in options.items())),
            *layout.stats.lines(), ("labels", label_summary(dataset.labels)),
            ("values", "all 1 (binary)" if dataset.is_binary else "real"),
            ("load + layout", f"{seconds:.3f} s ({how})")]
    hot = None if args.hot_budget is None else _fae_hot_rows(dataset, args)
    if hot is not None:
        rows += [("fae threshold", f"t = {hot['threshold']:.3g} (rows accessed in at least that share of the "
                                   f"{dataset.n_rows:,} samples are hot)"),
                 ("fae hot rows", f"{hot['estimate']:,} estimated from {hot['share']:g} of the accesses, "
                                  f"[{hot['lower']:,}, {hot['upper']:,}] at 99.9 %: {hot['bytes']:,} of the "
                                  f"{args.hot_budget:,}-byte budget at {args.row_bytes} bytes a row"),
                 ("fae hot rows counted", f"{hot['counted']:,} reach the threshold in the counted accesses"
                                          + ("" if args.sample == 1 else
                                             f", {hot['counted_every_access']:,} in all of them")),
                 ("fae hot inputs", f"{hot['hot_inputs']:.4f} of the rows touch only hot features")]
    if args.json:
        print(json.dumps({"file": source, "format": format, "options": options,
                          "stats": {k: v for k, v in vars(layout.stats).items()},
                          "labels": label_summary(dataset.labels), "seconds": seconds,
                          **({} if hot is None else {"fae": hot})}))
        return 0
    width = max(len(name) for name, _ in rows)
    for name, value in rows:
        print(f"{name:<{width}}  {value}")
    return 0


def _fae_hot_rows(dataset, args):
    """FAE's sampling estimator (alac.runtime.rows.profiler) on a data set's one table: the threshold
    whose estimated hot rows fit --hot-budget, from --sample of the accesses, beside the exact count."""
    from alac.runtime.rows.profiler import (
        access_counts,
        classify_inputs,
        estimate_hot_rows,
        hot_features,
        threshold_for_budget,
    )

    counts = access_counts(dataset.indices, dataset.n_features, args.sample, args.seed)
    plan = threshold_for_budget([counts], args.row_bytes, args.hot_budget, dataset.n_rows, args.sample,
                                seed=args.seed)
    # threshold_for_budget draws the table's chunks with this seed: the same estimate, with its bounds
    estimate = estimate_hot_rows(counts, plan.cutoff, seed=args.seed)
    hot = hot_features([counts], plan)
    # with a sample, the rows the hot table would hold beside those a full count finds at the same t
    every = counts if args.sample == 1 else access_counts(dataset.indices, dataset.n_features)
    hot_inputs, _ = classify_inputs(dataset, hot)
    return {"threshold": plan.threshold, "share": args.sample, "estimate": estimate.rows, "lower": estimate.lower,
            "upper": estimate.upper, "bytes": plan.hot_bytes, "counted": int(hot.sum()),
            "counted_every_access": int((every >= plan.threshold * dataset.n_rows).sum()),
            "hot_inputs": len(hot_inputs) / max(dataset.n_rows, 1)}


def _inspect(args):
    from alac.codegen.kernels import generate_kernels
    from alac.ir.pipeline import PASSES, lower
    from alac.ir.stage_graph import build_stage_graph, kernel_groups
    from alac.models import build_model, model_module
    from alac.plan import Plan

    module = model_module(args.model)
    model = build_model(module)
    plan = Plan(chunk_size=args.chunk_size, batch_size=max(args.batch_size, args.chunk_size), kernels=args.kernels,
                semantics=args.mode)
    ir = lower(model)
    planning = []
    if args.data:
        from alac.runtime.movement.layout import LayoutOptions
        from alac.runtime.planning.run_plan import plan_run

        format, options = _load_options(args, args.format)
        dataset, layout, _ = _read_laid_out(args.data, format, options, LayoutOptions(chunk_size=plan.chunk_size))
        # `alac train`'s planning step: its hot segment, and where its rows would live under --gpu-memory
        device = layout.device.type
        run = plan_run(ir, dataclasses.replace(plan, memory_budget=args.gpu_memory, param_mode=args.param_mode),
                       dataset, layout, device, "triton" if device == "cuda" else "interpret")
        plan = dataclasses.replace(run.plan, memory_budget=None, param_mode=Plan.param_mode)
        planning = [f"# data: {args.data}"] + [f"#   {name}: {value}" for name, value in layout.stats.lines()]
        if args.gpu_memory is not None:
            planning += [f"# placement {line}" for line in run.placement.lines()]
        if run.costs:
            planning.append(f"# measured on {run.costs.device}: coalesced {run.costs.coalesced_ns:.4f} ns, "
                            f"random {run.costs.random_ns:.4f} ns per 4-byte access, copy "
                            f"{run.costs.copy_gb_per_s:.0f} GB/s")
        planning += [f"# plan {line}" for line in run.plan_lines()]
        roofline = _roofline(ir, plan, layout)
        if roofline:
            planning.append(f"# {roofline}")
    generated = generate_kernels(ir, plan)
    if args.registers:
        planning += _registers(args, ir, plan, generated, layout if args.data else None)
    graph = build_stage_graph(ir)
    print(f"# IR {ir.hash}  (passes: trace, {', '.join(name for name, _ in PASSES)})")
    print(ir)
    for line in planning:
        print(line)
    print(f"\n# plan: {plan.describe()}")
    if plan.semantics == "async":
        print("# kernels: one persistent aggregate + loss + apply kernel per epoch")
    else:
        print("# kernels per batch: " + " ; ".join(" + ".join(g) for g in kernel_groups(graph, plan.kernels)))
    print(f"# kernel names: {', '.join(spec.name for spec in generated.train + (generated.predict,))}")
    print("# arguments (manifest): name  role  of  dtype  shape  lifetime")
    for a in generated.manifest:
        shape = "[" + ", ".join(map(str, a.shape)) + "]" if a.shape else "scalar"
        print(f"#   {a.name}  {a.role}  {a.of or '-'}  {a.dtype}  {shape}  {a.lifetime}")
    if args.dump:
        path = Path(args.dump) / f"{generated.predict.name.removesuffix('_predict')}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(generated.source + _runner(args, ir, plan))
        print(f"# wrote {path}: python {path} trains and times these kernels (edits included) on synthetic data")
    print("\n" + generated.source)
    return 0


def _registers(args, ir, plan, generated, layout):
    """The kernels' registers and spills on args.registers (ptxas, no GPU), with this data's tiles."""
    from alac.codegen.module_cache import load_module
    from alac.codegen.registers import generated_registers
    from alac.runtime.execution.triton_backend import launch_constants

    if layout is None:
        raise AlacError("--registers needs --data: the kernels' tiles follow the data's rows")
    constants = launch_constants(plan, layout, ir.factor_size, resident=generated.resident)
    found = generated_registers(generated, load_module(generated), constants, args.registers)
    tile = f"C = {constants['C']}, S = {constants['S']}, {constants['num_warps']} warps"
    return [f"# registers ({args.registers}, {tile}): {kernel.line()}" for kernel in found]


def _roofline(ir, plan, layout):
    """The epoch's accesses and, on a GPU, the floor its flat kernels measure (None for sync plans
    without edge updates or grid barriers)."""
    from alac.runtime.planning.roofline import plan_roofline

    accesses, floor = plan_roofline(ir, plan, layout)
    if accesses is None:
        return None
    return accesses.line(floor) + (" (the floor is measured on a GPU)" if floor is None else "")


def _runner(args, ir, plan):
    """The __main__ block of a dumped module: it runs the module's kernels (alac.cli.standalone)."""
    from alac.models import is_model_file

    model = str(Path(args.model).resolve()) if is_model_file(args.model) else args.model
    fields = {f.name: getattr(plan, f.name) for f in dataclasses.fields(plan) if getattr(plan, f.name) != f.default}
    return (f"\n\nif __name__ == \"__main__\":\n"
            f"    # train and time these kernels (edits included) on synthetic data; --help for options\n"
            f"    import sys\n\n    from alac.cli.standalone import main\n\n"
            f"    sys.exit(main(__file__, {model!r}, {ir.optimizer.name!r}, {fields!r}))\n")


def _train(argv):
    """`alac train --model NAME|PATH ...`: the model's own options join the parser once it is known."""
    from alac.cli.train import parser_for, run_parsed
    from alac.models import model_module

    first = Parser(add_help=False, allow_abbrev=False)
    first.add_argument("--model", default=None)
    first.add_argument("--resume", default=None)
    known, _ = first.parse_known_args(argv)
    if known.resume is not None:
        from alac.cli import resume

        return resume.main(argv)
    from alac.train.deep import DEEP_MODELS

    if known.model in DEEP_MODELS:
        from alac.cli import deep as deep_cli

        return deep_cli.main(argv)
    parser = Parser(prog="alac train", description="Train a model (a zoo name or a model file).")
    parser.add_argument("--model", required=True,
                        help="a zoo model name (lr, fm, ...), a field model (deepfm, wide_deep, ffm: their options "
                             "with alac train --model deepfm --help) or a model file (path.py)")
    module = model_module(known.model) if known.model else None
    parser_for(parser, module)
    args = parser.parse_args(argv)
    return run_parsed(module, args, args.model)


def _predict(args):
    """`alac predict --model-dir DIR --data FILE --output FILE`: one prediction per line."""
    from alac.outputs import check_output_file, settle, write_text_atomically

    check_output_file(args.output)
    settle(args.model_dir)      # a write a crash interrupted is completed before the model is read
    from alac.cli import deep as deep_cli

    if deep_cli.is_deep_checkpoint(args.model_dir):
        probabilities, trainer = deep_cli.predict(args.model_dir, args.data, args.format)
        write_text_atomically(args.output, "".join(f"{value:.9g}\n" for value in probabilities.tolist()))
        print(f"wrote {probabilities.numel():,} predictions (probability) to {args.output}"
              + (f"; {trainer.unseen_entries:,} entries with features or fields the model never trained were "
                 "ignored" if trainer.unseen_entries else ""), file=sys.stderr)
        return 0
    from alac.cli.data import read_like_training

    trainer, saved = _load_model_dir(args.model_dir, args.model, args.backend)
    dataset = read_like_training(args.data, saved, args.format)
    predictions = trainer.predict(dataset).cpu().numpy()
    write_text_atomically(args.output, "".join(f"{value:.9g}\n" for value in predictions))
    print(f"wrote {len(predictions):,} predictions ({trainer.executor.ir.prediction_kind}) to {args.output}"
          + (f"; {trainer.unseen_entries:,} entries with features the model never trained were ignored"
             if trainer.unseen_entries else ""), file=sys.stderr)
    return 0


def _load_model_dir(model_dir, model_option=None, backend="reference"):
    """(Trainer, checkpoint payload) of an --out folder or a checkpoint file. A zoo model is found by
    its name; a model file only where the user passes it (model_option): never the file a
    checkpoint names."""
    from pathlib import Path

    from alac.cli.options import CHECKPOINT_NAME
    from alac.models import build_model, model_module, zoo_module
    from alac.train import checkpoint

    path = Path(model_dir) / CHECKPOINT_NAME if Path(model_dir).is_dir() else Path(model_dir)
    saved = checkpoint.read(path)
    spec = saved["spec"]
    if model_option is None and "model_file" in spec:
        raise checkpoint.CheckpointError(
            f"{path}: the model was trained from the file {spec['model_file']}; alac never runs a file that "
            f"a checkpoint names: pass --model {spec['model_file']} to run it")
    # a checkpoint's own model name is looked up among the zoo's, never opened as a file
    module = model_module(model_option) if model_option else zoo_module(spec["model"])
    model = build_model(module, argparse.Namespace(**spec["arguments"]))
    return checkpoint.restore(saved, model, backend=backend), saved


def _export(args):
    """`alac export --model-dir DIR [--readable FILE] [--numpy FILE.npz]`."""
    from alac.outputs import check_output_file, settle
    from alac.train import checkpoint

    if not (args.readable or args.numpy):
        raise AlacError("give --readable FILE and/or --numpy FILE.npz")
    for path in (args.readable, args.numpy):
        if path:
            check_output_file(path)
    settle(args.model_dir)
    from alac.cli import deep as deep_cli

    if deep_cli.is_deep_checkpoint(args.model_dir):
        return deep_cli.export(args.model_dir, args.readable, args.numpy)
    trainer, saved = _load_model_dir(args.model_dir, args.model)
    zero_based = saved["data_options"].get("zero_based")
    # both files in the data files' numbering (1-based LIBSVM ids stay 1-based), each saying so
    offset = 0 if zero_based in (None, True) else 1
    if args.readable:
        checkpoint.export_readable(trainer, args.readable, id_offset=offset)
    if args.numpy:
        checkpoint.export_numpy(trainer, args.numpy, id_offset=offset)
    written = [path for path in (args.readable, args.numpy) if path]
    print(f"wrote {' and '.join(written)}: feature ids as in the training files ({offset}-based)")
    return 0


# a checkout's benchmarks (an installed alac has none, and no `alac bench`)
BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def _bench(args):
    """`alac bench NAME [ARGS]`: run benchmarks/NAME.py of this checkout with its arguments."""
    import runpy

    folder = BENCHMARKS
    script = folder / f"{args.name}.py"
    if not script.is_file():
        known = ", ".join(sorted(p.stem for p in folder.glob("*.py") if p.stem not in ("__init__", "report")))
        raise AlacError(f"unknown benchmark {args.name!r}; this checkout has: {known or 'none'}")
    sys.argv = [str(script), *args.arguments]
    runpy.run_path(str(script), run_name="__main__")
    return 0


def build_parser():
    from alac.cli.options import memory_size, positive_int, sampled_share
    from alac.plan import Plan

    parser = Parser(prog="alac", description="Train sparse wide models on GPUs.")
    commands = parser.add_subparsers(dest="command", required=True)
    data = commands.add_parser("data", help="inspect data files").add_subparsers(dest="data_command",
                                                                                  required=True)
    stats = data.add_parser("stats", help="print the statistics of a data file and its layout")
    stats.add_argument("file", nargs="?", help="a LIBSVM, libffm or Criteo TSV file")
    stats.add_argument("--synthetic", type=int, metavar="ROWS", default=None,
                       help="use ROWS rows of the built-in synthetic Criteo-shaped data instead of a file")
    stats.add_argument("--seed", type=int, default=0, help="seed of the synthetic data and of FAE's sample (default 0)")
    _add_load_options(stats)
    stats.add_argument("--chunk-size", type=int, default=128, help="samples per chunk (default 128)")
    stats.add_argument("--hot-size", type=int, default=0, help="hot-segment size H (default 0)")
    stats.add_argument("--hot-budget", type=memory_size, default=None, metavar="SIZE",
                       help="FAE's estimator: the threshold whose hot rows (params and optimizer state) fit SIZE, "
                            "the hot rows and the share of inputs that touch only them")
    stats.add_argument("--sample", type=sampled_share, default=1.0, metavar="SHARE",
                       help="with --hot-budget: the share of the accesses FAE's estimator counts (default 1: all)")
    stats.add_argument("--row-bytes", type=positive_int, default=8, metavar="BYTES",
                       help="with --hot-budget: bytes of a row (default 8: LR's weight and its AdaGrad sum)")
    stats.add_argument("--device", default=None, help="build the layout here (default: GPU if any)")
    stats.add_argument("--no-cache", action="store_true", help="neither read nor write the disk cache")
    stats.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    stats.set_defaults(handler=_data_stats)

    inspect = commands.add_parser("inspect", help="print a model's IR, derived gradients, plan and kernels")
    inspect.add_argument("--model", required=True, help="a zoo model name (lr, fm, ...) or a model file")
    inspect.add_argument("--kernels", default="fused", choices=["fused", "stage"])
    inspect.add_argument("--chunk-size", type=int, default=Plan.chunk_size)
    inspect.add_argument("--batch-size", type=int, default=1024)
    inspect.add_argument("--mode", default="sync", choices=["sync", "async"], help="execution semantics")
    inspect.add_argument("--data", help="a data file: plan for its layout and print the numbers behind it")
    inspect.add_argument("--gpu-memory", type=memory_size, default=None, metavar="SIZE",
                         help="with --data: where the model's rows go under this GPU budget (all on the GPU, or in "
                              "pinned host memory behind a HybridHash cache or FAE's hot table) and the cost model's "
                              "numbers")
    inspect.add_argument("--param-mode", default="auto", choices=["auto", "hybrid_hash", "fae"],
                         help="rows over the GPU budget for them: auto (the planner's cheaper), a HybridHash cache "
                              "(hybrid_hash) or FAE's hot table (fae)")
    _add_load_options(inspect)
    inspect.add_argument("--registers", nargs="?", const="sm_90a", metavar="ARCH",
                         help="with --data: each kernel's registers and spills for ARCH (default sm_90a), from "
                              "the ptxas Triton ships (no GPU needed)")
    inspect.add_argument("--dump", metavar="DIR", help="also write the generated kernels to DIR")
    inspect.set_defaults(handler=_inspect)

    commands.add_parser("train", help="train a model (alac train --model NAME --help for its options)",
                        add_help=False)

    predict = commands.add_parser("predict", help="predict with a trained model directory")
    predict.add_argument("--model-dir", required=True, help="the --out folder of alac train (or a checkpoint file)")
    predict.add_argument("--data", required=True, help="a data file (labels are read but not needed)")
    predict.add_argument("--output", required=True, help="where to write one prediction per line")
    predict.add_argument("--format", default=None, choices=["auto", "libsvm", "libffm", "criteo", "table"],
                         help="default: the training data's format")
    predict.add_argument("--model", default=None,
                         help="the model file the checkpoint was trained from (never run unless given here)")
    predict.add_argument("--backend", default="triton", choices=["triton", "interpret", "reference"])
    predict.set_defaults(handler=_predict)

    export = commands.add_parser("export", help="write a trained model as readable text or numpy arrays")
    export.add_argument("--model-dir", required=True)
    export.add_argument("--model", default=None,
                        help="the model file the checkpoint was trained from (never run unless given here)")
    export.add_argument("--readable", metavar="FILE", help="one line per feature: id and parameters (original ids)")
    export.add_argument("--numpy", metavar="FILE", help="a .npz of the parameters by original feature id")
    export.set_defaults(handler=_export)

    if (BENCHMARKS / "report.py").is_file():
        bench = commands.add_parser("bench", help="run a benchmark of this checkout's benchmarks/ (flow, ...)")
        bench.add_argument("name")
        bench.add_argument("arguments", nargs=argparse.REMAINDER)
        bench.set_defaults(handler=_bench)
    return parser


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        if argv and argv[0] == "train":
            return _train(argv[1:])
        args = build_parser().parse_args(argv)
        return args.handler(args)
    except AlacError as error:
        print(f"alac: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("alac: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # the reader (e.g. `| head`) went away: not an error of ours
        sys.stderr.close()
        return 0


if __name__ == "__main__":
    sys.exit(main())
