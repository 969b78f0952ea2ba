"""`alac train --model fm --solver als|mcmc`: the factorization machine fitted by libFM's coordinate
solvers (alac.runtime.solvers.fm_coordinate) instead of SGD epochs: --epochs sweeps, MCMC's first
--burn-in of them left out of its average; --loss squared for ratings (ALS or MCMC), logistic for
classes (MCMC's probit).

Every sweep prints the training RMSE (or AUC), the noise precision, MCMC's prior precisions (their mean
over the fields), the samples kept and the validation metric of the average prediction so far (MCMC:
over the kept samples, as libFM and myFM report).
Outputs: metrics.json, history.csv and model.alac, the zoo FM holding MCMC's posterior mean (ALS's
last coordinates), which `alac predict` and `alac export` read as an SGD run's. A probit model is kept
as the logistic FM of its scores times PROBIT_TO_LOGIT (sigmoid(1.702 z) is within 0.0095 of Phi(z)
everywhere: Haley's constant of item response theory), the same ranking; the run's own metrics are
probit's.
"""

from __future__ import annotations

import dataclasses
import math
import time
from pathlib import Path

import torch

from alac import defaults, metrics
from alac.cli.run_record import run_record
from alac.errors import OptionError
from alac.outputs import RunOutputs, final_line, split_metrics, write_metrics_and_history

# sigmoid(PROBIT_TO_LOGIT z) is within 0.0095 of Phi(z) (Haley 1952)
PROBIT_TO_LOGIT = 1.702



def check_options(module, args, given_l2):
    """Refuse what the coordinate solvers cannot fit before any data is read (given_l2: --l2 as given,
    None where left out)."""
    name = module.__name__.rsplit(".", 1)[-1]
    if name != "fm":
        raise OptionError(f"--solver {args.solver} fits the factorization machine (--model fm), not {name}")
    if args.solver == "als" and args.loss != "squared":
        raise OptionError("--solver als fits the squared loss: add --loss squared, or classify by --solver mcmc")
    if args.solver == "mcmc" and given_l2 is not None:
        raise OptionError("--solver mcmc draws its priors' precisions: leave out --l2")
    if given_l2 is not None and given_l2 < 0:
        raise OptionError(f"--l2 is at least 0, got {given_l2}")
    args.l2 = defaults.ALS_L2 if given_l2 is None else given_l2
    burn_in = burn_in_of(args)
    if args.solver == "mcmc" and not 0 <= burn_in < args.epochs:
        raise OptionError(f"--burn-in is at least 0 and below --epochs ({args.epochs}), got {burn_in}")
    if getattr(args, "out_of_core", False):
        raise OptionError(f"--solver {args.solver} reads its training data in memory: leave out --out-of-core")


def burn_in_of(args):
    """--burn-in, or a fifth of the sweeps (MCMC)."""
    return args.burn_in if args.burn_in is not None else args.epochs // 5


def train_coordinate(args, module, data, model_reference):
    """Fit, print the first line, a line per sweep and the final metrics; write the outputs. Returns the
    exit status: 0, or 3 where the residuals stopped being finite (as a diverged SGD run)."""
    from alac.data.dataset import SparseDataset
    from alac.runtime.solvers.fm_coordinate import CoordinateSettings, CoordinateSolver

    if not isinstance(data.train, SparseDataset):
        raise OptionError(f"--solver {args.solver} reads its training data in memory, not from a block store")
    classification = args.loss == "logistic"
    if classification:
        data = _as_classes(data)
    settings = CoordinateSettings(solver=args.solver, k=args.k, iterations=args.epochs,
                                  burn_in=burn_in_of(args) if args.solver == "mcmc" else 0,
                                  reg_w=args.l2 or 0.0, reg_v=args.l2 or 0.0, seed=args.seed,
                                  task="classification" if classification else "regression")
    device = "cuda" if torch.cuda.is_available() and args.backend == "triton" else "cpu"
    solver = CoordinateSolver(settings, data.train, device=device)
    how = "MCMC" if args.solver == "mcmc" else "ALS"
    print(f"alac: fm (k = {args.k}) by {how}"
          + (f" (probit, {settings.burn_in} burn-in sweeps)" if classification else
             f" ({settings.burn_in} burn-in sweeps)" if args.solver == "mcmc" else f" (L2 {settings.reg_w:g})")
          + f" on {device}, {len(solver.blocks)} coordinate blocks of {len(solver.priors)} fields, {args.epochs} "
          f"sweeps; training: {data.described}", flush=True)
    averages = {name: None for name, part in (("valid", data.valid), ("test", data.test)) if part is not None}
    history, started, status = [], time.perf_counter(), 0
    for _ in range(args.epochs):
        solver.iterate()
        record = {"epoch": solver.iteration, **_train_metric(solver), "alpha": float(solver.alpha)}
        if args.solver == "mcmc":
            # the priors' precisions drawn, averaged over the fields (and factors)
            record.update(lambda_w=float(solver.lambda_w.mean()),
                          lambda_v=float(solver.lambda_v.mean()) if solver.lambda_v.size else 0.0)
        record["samples"] = solver.samples
        for name in averages:
            averages[name] = _averaged(solver, getattr(data, name), averages[name], classification)
        if data.valid is not None:
            record.update({f"valid_{key}": value for key, value in
                           _metrics(averages["valid"], data.valid.labels, classification).items()})
        record["seconds"] = time.perf_counter() - started
        history.append(record)
        print("  " + " ".join(f"{k} {v:.6g}" if isinstance(v, float) else f"{k} {v}" for k, v in record.items()),
              flush=True)
        if not math.isfinite(record.get("train_rmse", record.get("train_auc", 0.0))):
            status = 3
            print(f"alac: error: the residuals stopped being finite in sweep {solver.iteration}", flush=True)
            break
    coordinates = solver.coordinates()
    final = split_metrics(lambda dataset: _metrics(_scores(solver, dataset, coordinates, classification),
                                                   dataset.labels, classification),
                          data.valid, data.test, data.train)
    final.update(epochs=solver.iteration, samples=solver.samples, seconds=time.perf_counter() - started)
    print(final_line(final))
    if args.out is not None:
        out = Path(args.out)
        with RunOutputs(out) as outputs:
            write_metrics_and_history(outputs, final, history)
            _save_checkpoint(args, module, model_reference, data, coordinates, classification, history, outputs)
        print(f"wrote {out}/{', '.join(outputs.written)}")
    return status


def _as_classes(data):
    """The data's labels as 1 (the larger of the training set's two values) or 0, every split's by the
    training set's (a DataError names a set with more than two values)."""
    from alac.runtime.execution.executor import LabelMap

    labels = LabelMap.fit("binary", data.train.labels, data.train.source.path or "the training data")

    def classes(dataset):
        return None if dataset is None else dataclasses.replace(dataset,
                                                                labels=labels.positive_mask(dataset.labels).float())
    return dataclasses.replace(data, train=classes(data.train), valid=classes(data.valid), test=classes(data.test))


def _train_metric(solver):
    if solver.classes is None:
        return {"train_rmse": float(solver.e.double().pow(2).mean().sqrt())}
    prediction = (solver.targets - solver.e).float()
    return {"train_auc": float(metrics.auc(prediction, solver.classes))}


def _averaged(solver, dataset, average, classification):
    """The running mean of the predictions of a set over the kept samples (the current one before)."""
    predicted = _scores(solver, dataset, None, classification)
    if average is None or solver.samples <= 1:
        return predicted
    return average + (predicted - average) / solver.samples


def _scores(solver, dataset, coordinates, classification):
    """The predictions of a set under coordinates (None: the current ones): Phi of probit's scores."""
    predicted = solver.predict(dataset, coordinates).double()
    return torch.special.ndtr(predicted) if classification else predicted


def _metrics(prediction, labels, classification):
    labels = labels.to(prediction.device)
    if classification:
        return metrics.classification_metrics(prediction.float(), labels > 0.5)
    return metrics.regression_metrics(prediction, labels.double())


def _save_checkpoint(args, module, model_reference, data, coordinates, classification, history, outputs):
    """The zoo FM holding the coordinates (a probit model's scaled by PROBIT_TO_LOGIT), saved as `alac
    train` saves one."""
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
    scale = PROBIT_TO_LOGIT if classification else 1.0
    w0, w, v = (value.double().cpu() for value in coordinates)
    state.params["w"].copy_((scale * w).float())
    state.params["v"].copy_((math.sqrt(scale) * v).float())     # the pairwise terms scale by its square
    state.globals["b"].fill_(float(scale * w0))
    trainer.executor.state, trainer.feature_order = state, order
    trainer.labels = LabelMap.fit(model.labels, data.train.labels)
    trainer.history, trainer.epoch = history, len(history)
    outputs.write(CHECKPOINT_NAME, lambda handle: checkpoint.write(
        trainer, handle, checkpoint_spec(module, args, model_reference), data.options, run_record(args, args.solver)))
