"""`alac train --resume DIR [--epochs N] [--out DIR2]`: a run continued where the checkpoint of its
output folder left it, for every model family (SGD flow models, SCD, the field models).

The checkpoint records how the run was made (alac.cli.run_record): the same data files (checked by
content: other data is refused), the same options, the optimizer the race kept, early stopping with
its patience counted across both parts, the last epoch's state where early stopping kept an earlier
one. --epochs is the run's total (the checkpoint's by default); the outputs go to --out, by default
back into DIR. Where training is deterministic (sync plans on the reference backend, the float64
SCD solver, the field models on the CPU) the resumed run ends bit for bit where one uninterrupted
run of as many epochs ends.
"""

from __future__ import annotations

import sys
from pathlib import Path

from alac.cli.options import positive_int
from alac.cli.parser import Parser
from alac.cli.run_record import record_of, run_arguments
from alac.errors import AlacError, OptionError

# options a resume may take; anything else would change the run it continues
ALLOWED = "--epochs, --out, --backend, --device and --model (a model file the run was trained from)"


def parser():
    p = Parser(prog="alac train --resume", description="Continue a run from its output folder.")
    p.add_argument("--resume", required=True, metavar="DIR", help="the --out folder of the run")
    p.add_argument("--epochs", type=positive_int, default=None, help="the run's epochs in all (default: its own)")
    p.add_argument("--out", default=None, help="where the continued run's outputs go (default: DIR)")
    p.add_argument("--backend", default=None, choices=["triton", "interpret", "reference"])
    p.add_argument("--device", default=None, help="field models: cuda or cpu")
    p.add_argument("--model", default=None, help="the model file the run was trained from (never run unless given)")
    return p


def main(argv):
    """The exit status of the continued run (as `alac train`'s)."""
    options, rest = parser().parse_known_args(argv)
    if rest:
        print(f"alac train --resume: error: {' '.join(rest)}: a resume continues a run as it was made; it takes "
              f"only {ALLOWED}", file=sys.stderr)
        return 2
    try:
        from alac.outputs import check_output_folder, settle

        folder = Path(options.resume)
        settle(folder)
        options.out = options.out if options.out is not None else str(folder)
        check_output_folder(options.out)
        if (folder / "model.pt").is_file():
            from alac.cli import deep as deep_cli

            return deep_cli.resume(folder / "model.pt", options)
        if (folder / "model.alac").is_file():
            return _resume_wide(folder / "model.alac", options)
        raise OptionError(f"{folder}: no checkpoint to resume there (model.alac or model.pt of alac train --out)")
    except AlacError as error:
        print(f"alac: error: {error}", file=sys.stderr)
        return 2


def _resume_wide(path, options):
    """An SGD (flow) or SCD run of model.alac, continued through `alac train`'s own path."""
    from alac.cli.train import run_parsed
    from alac.models import build_model, model_module, zoo_module
    from alac.train import checkpoint

    saved = checkpoint.read(path)
    record = record_of(saved.get("run"), path)
    spec = saved["spec"]
    if "model_file" in spec and options.model is None:
        file = spec["model_file"]
        raise checkpoint.CheckpointError(f"{path}: the run was trained from the model file {file}; alac never runs a "
                                         f"file a checkpoint names: give --model {file}")
    module = model_module(options.model) if options.model else zoo_module(spec["model"])
    reference = spec.get("model_file", spec.get("model"))
    if record["family"] in ("als", "mcmc"):
        raise OptionError(f"{path}: an {record['family'].upper()} run is not continued (its checkpoint holds the "
                          "posterior mean or the last coordinates, not the chain and its priors): train a new run "
                          "with more --epochs")
    if record["family"] == "scd":
        scd = saved.get("scd")
        if scd is None:
            raise OptionError(f"{path}: it holds no record of where its coordinate descent ended: train a new run")
        args = run_arguments(record, options, scd["epochs"], scd.get("stopped_because"), path)
        return run_parsed(module, args, reference, restored=scd)
    training = saved.get("training") or {}
    last = saved.get("last") or {}
    args = run_arguments(record, options, last.get("epoch", saved["epoch"]), training.get("stopped_because"), path)

    def restored(data, log):
        return checkpoint.restore(saved, build_model(module, args), backend=args.backend, log=log)

    return run_parsed(module, args, reference, restored)
