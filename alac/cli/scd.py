"""`alac train --solver scd`: the zoo's linear models (lr, lsvm, lsr) fitted by stochastic
coordinate descent to a duality-gap tolerance (alac.runtime.solvers.scd) instead of SGD epochs.

lr solves the dual logistic problem, lsvm the dual hinge, lsr the squared loss (ridge: the primal,
or the dual when there are fewer rows than features; lasso / elastic net with --l1: the primal),
each with an intercept: a constant feature regularized like the others. --l2 is lambda of mean
loss + lambda/2 ||w||^2 (default 1 / N: LIBLINEAR's C = 1), --epochs the most epochs and --tol
the duality gap to reach. Outputs: metrics.json, history.csv (the gap and training seconds after
every epoch), weights.npy (the weights, the intercept last) and model.alac: the zoo model's
checkpoint with these weights and intercept, which `alac predict` and `alac export` read as they
read an SGD run's.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from alac import metrics
from alac.cli.run_record import run_record
from alac.errors import OptionError
from alac.outputs import RunOutputs, final_line, split_metrics, write_metrics_and_history

PROBLEMS = {"lr": ("dual", "logistic"), "lsvm": ("dual", "hinge"), "lsr": ("primal", "squared")}


def _name(module):
    """The zoo name of a model module (alac.models.lr: lr); a user's model file is none of them."""
    return module.__name__.rsplit(".", 1)[-1] if module.__name__.startswith("alac.models.") else module.__name__


def check_options(module, args):
    """Refuse what SCD cannot fit before any data is read."""
    name = _name(module)
    if name not in PROBLEMS:
        raise OptionError(f"--solver scd fits the linear models {', '.join(PROBLEMS)}, not {name}")
    if PROBLEMS[name][0] == "dual" and (args.l1 or args.l2 == 0):
        raise OptionError(f"--solver scd solves {name}'s dual, which takes --l2 > 0 and no --l1")
    if (args.l2 is not None and args.l2 < 0) or args.l1 < 0 or args.tol <= 0:
        raise OptionError(f"--l2 and --l1 are >= 0 and --tol > 0, got {args.l2}, {args.l1}, {args.tol}")
    if getattr(args, "out_of_core", False):
        raise OptionError("--solver scd reads its training data in memory: leave out --out-of-core")


def train_scd(args, module, data, model_reference, restored=None):
    """Fit, print the first line, the gap of every epoch and the final metrics; write the outputs.
    Returns the exit status: 0, or 3 when the gap stopped being finite (as a diverged SGD run).
    restored: a checkpoint's solver resume point (alac.cli.resume), continued to args.epochs epochs."""
    from alac.data.dataset import SparseDataset
    from alac.runtime.solvers.cocoa_ranks import solver_over_ranks
    from alac.runtime.solvers.scd import with_constant_feature

    name = _name(module)
    form, loss = PROBLEMS[name]
    if name == "lsr" and not args.l1 and args.l2 != 0 and data.train.n_rows < data.train.n_features:
        form = "dual"          # fewer rows than features: the dual has the fewer coordinates
    if not isinstance(data.train, SparseDataset):
        raise OptionError("--solver scd reads its training data in memory, not from a block store")
    l2 = args.l2 if args.l2 is not None else 1.0 / data.train.n_rows
    backend = {"triton": "auto", "reference": "sequential", "interpret": "interpret"}[args.backend]
    solver = solver_over_ranks(with_constant_feature(data.train), form, loss, l2=l2, l1=args.l1, backend=backend,
                               seed=args.seed, aggregation=args.scd_aggregation, workers=args.scd_workers)
    ranks = solver.ranks
    if restored is not None:
        if ranks.world > 1:
            raise OptionError("a coordinate-descent run is resumed in one process (its checkpoint holds no rank's "
                              "share of the coordinates)")
        solver.continue_from(restored)
    # under torchrun every rank solves its share; the first speaks and writes the outputs
    say = print if ranks.rank == 0 else (lambda *a, **k: None)
    part = f"{'rows' if form == 'dual' else 'columns'} (CoCoA, {solver.aggregation} aggregation)"
    over = f", {ranks.describe()} each stepping its share of the {part}" if ranks.world > 1 else \
        f", {args.scd_workers} virtual workers each stepping its share of the {part}" if args.scd_workers > 1 else ""
    say(f"alac: {name} by stochastic coordinate descent ({form} {loss}, lambda {l2:.3g}"
        + (f", l1 {args.l1:g}" if args.l1 else "") + f") on {solver.backend}"
        + (f" ({solver.in_flight} coordinates in flight)" if solver.backend != "sequential" else "") + over
        + f", to duality gap {args.tol:g} in at most {args.epochs} epochs; training: {data.described}"
        + (f"; resumed after epoch {solver.epochs}" if restored is not None else ""), flush=True)
    solver.fit(args.epochs - solver.epochs, args.tol, log=lambda line: say("  " + line, flush=True))
    weights = solver.coef_.cpu()
    final = split_metrics(lambda dataset: _scores(dataset, weights, name), data.valid, data.test, data.train)
    final.update(epochs=solver.epochs, stopped_because=solver.stopped_because,
                 duality_gap=solver.history[-1]["gap"], seconds=solver.seconds)
    say(final_line(final))
    if args.out is not None and ranks.rank == 0:
        out = Path(args.out)
        with RunOutputs(out) as outputs:
            write_metrics_and_history(outputs, final, solver.history)
            outputs.write("weights.npy", lambda handle: np.save(handle, weights.numpy(), allow_pickle=False))
            _save_checkpoint(args, module, model_reference, data, weights, solver, outputs)
        print(f"wrote {out}/{', '.join(outputs.written)}")
    return 3 if solver.stopped_because == "diverged" else 0


def _save_checkpoint(args, module, model_reference, data, weights, solver, outputs):
    """The zoo model (w, and its bias b) holding the SCD weights, saved as `alac train` saves one."""
    from alac.cli.options import CHECKPOINT_NAME, checkpoint_spec, plan_of
    from alac.models import build_model
    from alac.runtime.execution.executor import LabelMap
    from alac.runtime.execution.state import ModelState
    from alac.train import checkpoint
    from alac.train.trainer import Trainer

    model = build_model(module, args)
    trainer = Trainer(model, lr=1.0, plan=plan_of(args), backend="reference", device="cpu", seed=args.seed,
                      optimizer="sgd")
    order = torch.arange(data.train.n_features)
    state = ModelState.initial(model, order, "cpu", args.seed, trainer.executor.ir.optimizer)
    state.params["w"].copy_(weights[:-1].float())
    state.globals["b"].fill_(float(weights[-1]))
    trainer.executor.state, trainer.feature_order = state, order
    trainer.labels = LabelMap.fit(model.labels, data.train.labels)
    trainer.history, trainer.epoch = solver.history, len(solver.history)
    # one process's solver holds every coordinate: its resume point continues the run (alac.cli.resume)
    point = solver.resume_point() if solver.ranks.world == 1 else None
    outputs.write(CHECKPOINT_NAME, lambda handle: checkpoint.write(
        trainer, handle, checkpoint_spec(module, args, model_reference), data.options, run_record(args, "scd"),
        point))


def _scores(dataset, weights, name):
    """The metrics of the weights (intercept last) on a dataset of the training feature space."""
    n = weights.numel() - 1
    dataset = dataset.to(weights.device)
    values = dataset.values_or_ones()
    keep = dataset.indices < n        # features the training data never had weigh nothing
    rows = dataset.entry_rows()
    margins = torch.zeros(dataset.n_rows, dtype=torch.float64).index_add_(
        0, rows[keep], values[keep].double() * weights[dataset.indices[keep].long()]) + weights[-1]
    if name == "lsr":
        return metrics.regression_metrics(margins, dataset.labels)
    positive = dataset.labels > 0
    if name == "lr":
        return metrics.classification_metrics(torch.sigmoid(margins), positive)
    return metrics.classification_metrics(margins, positive, kind="score")
