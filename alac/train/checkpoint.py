"""Checkpoints: everything needed to predict with a trained model or to resume its training.

One file, written atomically (alac.outputs), so a crash at any moment leaves either the previous
checkpoint or the new one, never a torn file. It holds data only, never code: the model spec (a zoo
model's registered name, or the name of the user's model file, which is never run because a
checkpoint names it), the IR hash (to refuse a model that compiles differently now), the plan,
optimizer and schedule, the parameters, globals and optimizer state, the feature re-index map, the
label mapping, the data options, the epoch and the history. It is read with
`torch.load(weights_only=True)`: tensors, numbers, strings, lists and dicts, nothing that runs.
"""

from __future__ import annotations

import dataclasses
import pickle
from pathlib import Path

import torch

from alac.data.read_options import check_feature_ids, check_read_options
from alac.errors import AlacError, DataError
from alac.outputs import write_atomically, write_text_atomically

FORMAT = "alac-checkpoint"
VERSION = 2
# (key, type) of every entry a checkpoint must have
REQUIRED = (("spec", dict), ("ir_hash", str), ("model_name", str), ("plan", dict), ("lr", float),
            ("optimizer", dict), ("schedule", dict), ("exact_l2", bool), ("seed", int), ("epoch", int),
            ("batches_done", int), ("history", list), ("params", dict), ("globals", dict), ("states", dict),
            ("feature_order", torch.Tensor), ("labels", dict), ("data_options", dict), ("value_scale", float))


class CheckpointError(AlacError):
    """A checkpoint that cannot be used: missing, damaged, another format or an incompatible version."""


def save(trainer, path, spec, data_options=None, run=None):
    """Write trainer's model to path. spec: {"model": zoo name} or {"model_file": path}, and
    "arguments": the model's options; run: how `alac train` ran it (plain data), which a resume reads."""
    write_atomically(path, lambda out: write(trainer, out, spec, data_options, run))


def _tensors(state):
    return {part: {k: v.cpu() for k, v in getattr(state, part).items()} for part in ("params", "globals", "states")}


def write(trainer, handle, spec, data_options=None, run=None, solver=None):
    """save() into an open binary file; solver: where a coordinate-descent run ended (its resume point)."""
    state = trainer.executor.state
    if state is None:
        raise AlacError("nothing to save: the model is not trained yet")
    executor = trainer.executor
    payload = {
        "format": FORMAT, "version": VERSION, "spec": spec, "ir_hash": executor.ir.hash,
        "model_name": executor.ir.name, "plan": dataclasses.asdict(trainer.plan), "lr": float(trainer.lr),
        "optimizer": {"name": executor.optimizer.name, "hyper": executor.optimizer.values},
        "schedule": vars(executor.schedule), "exact_l2": executor.exact_l2, "seed": executor.seed,
        "value_scale": executor.value_scale,
        "epoch": trainer.epoch, "batches_done": executor.batches_done, "history": trainer.history,
        "params": {k: v.cpu() for k, v in state.params.items()},
        "globals": {k: v.cpu() for k, v in state.globals.items()},
        "states": {k: v.cpu() for k, v in state.states.items()},
        "feature_order": trainer.feature_order.cpu(),
        "feature_ids": None if trainer.feature_ids is None else trainer.feature_ids.cpu(),
        "labels": {"kind": trainer.labels.kind, "positive": trainer.labels.positive},
        "data_options": data_options or {},
        # what a resumed run continues with: early stopping as it was, and the last epoch's state where
        # early stopping kept an earlier one
        "training": {"early_stopping": trainer.early_stopping, "patience": trainer.patience, "window": trainer.window,
                     "epochs": trainer.epochs, "best_epoch": trainer.best_epoch,
                     "stopped_because": trainer.stopped_because},
        "last": None if trainer.last_state is None else {
            **_tensors(trainer.last_state[0]), "epoch": trainer.last_state[1], "batches_done": trainer.last_state[2]},
        "run": run,
        "scd": solver,
    }
    torch.save(payload, handle)


def read(path):
    """The checkpoint's contents (plain data and tensors), checked for every key it must have."""
    path = Path(path)
    if path.is_dir():
        raise CheckpointError(f"{path}: is a folder, not a checkpoint")
    if not path.is_file():
        raise CheckpointError(f"{path}: no checkpoint there")
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as error:
        if "global" not in str(error).lower():   # what weights_only refuses: a reference to code
            raise CheckpointError(f"{path}: not a readable checkpoint (UnpicklingError)") from None
        raise CheckpointError(f"{path}: refused: it holds objects other than tensors and plain data, which "
                              "loading would run (not a checkpoint alac wrote)") from None
    except Exception as error:  # torch raises several types for a damaged zip
        raise CheckpointError(f"{path}: not a readable checkpoint ({type(error).__name__})") from None
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        raise CheckpointError(f"{path}: not an alac checkpoint")
    if payload.get("version") != VERSION:
        raise CheckpointError(f"{path}: checkpoint version {payload.get('version')} is not supported by this "
                              f"alac (version {VERSION}); retrain, or use the alac release that wrote it")
    missing = [key for key, _ in REQUIRED if key not in payload]
    if missing:
        raise CheckpointError(f"{path}: damaged checkpoint: no {', '.join(missing)}")
    wrong = [f"{key} ({type(payload[key]).__name__})" for key, kind in REQUIRED
             if not isinstance(payload[key], kind) and not (kind is float and isinstance(payload[key], int))]
    if wrong:
        raise CheckpointError(f"{path}: damaged checkpoint: wrong type of {', '.join(wrong)}")
    spec = payload["spec"]
    if not isinstance(spec.get("arguments"), dict) or not isinstance(spec.get("model", spec.get("model_file")), str):
        raise CheckpointError(f"{path}: damaged checkpoint: its model spec names no model")
    for key, kind in (("training", dict), ("last", dict), ("run", dict), ("scd", dict)):
        if payload.get(key) is not None and not isinstance(payload[key], kind):
            raise CheckpointError(f"{path}: damaged checkpoint: wrong type of {key} ({type(payload[key]).__name__})")
    try:
        check_feature_ids(payload.get("feature_ids"), payload["feature_order"].numel(), path)
        check_read_options(payload["data_options"], path)
    except DataError as error:
        raise CheckpointError(f"{path}: damaged checkpoint: {str(error).removeprefix(f'{path}: ')}") from None
    payload["path"] = str(path)
    return payload


def load(path, model, backend="triton", device=None, log=None, ranks=None):
    """A Trainer holding the checkpoint's model: ready to predict, or to fit further (resume); with
    ranks of more than one (alac.runtime.ranks.distributed), a DataParallelTrainer over them, whatever
    number of ranks wrote it."""
    return restore(read(path), model, backend, device, log, ranks)


def restore(payload, model, backend="triton", device=None, log=None, ranks=None):
    """A Trainer from read()'s payload and the model it was trained with (checked by IR hash), with the
    early stopping it trained with: it predicts with the checkpoint's parameters, and its next fit
    continues the run (from the last epoch's state where early stopping kept an earlier one)."""
    from alac.optimizers import get_optimizer
    from alac.plan import Plan
    from alac.runtime.execution.executor import LabelMap
    from alac.runtime.execution.schedule import LearningRateSchedule
    from alac.runtime.execution.state import ModelState
    from alac.train.trainer import Trainer

    path = payload["path"]
    try:
        schedule = LearningRateSchedule(**payload["schedule"])
        optimizer = get_optimizer(payload["optimizer"]["name"], **payload["optimizer"]["hyper"])
        plan = Plan(**payload["plan"])
        labels = LabelMap(payload["labels"]["kind"], payload["labels"]["positive"])
    except (TypeError, ValueError, KeyError) as error:
        raise CheckpointError(f"{path}: damaged checkpoint ({type(error).__name__}: {error})") from None
    training = payload.get("training") or {}

    def trainer_of(plan):
        options = dict(lr=payload["lr"], plan=plan, backend=backend, device=device, seed=payload["seed"], log=log,
                       optimizer=optimizer, schedule=schedule, exact_l2=payload["exact_l2"],
                       early_stopping=training.get("early_stopping"), patience=training.get("patience", 5),
                       window=training.get("window", 10), epochs=training.get("epochs", 10))
        if ranks is not None and ranks.world > 1:
            from alac.train.data_parallel import DataParallelTrainer

            return DataParallelTrainer(model, ranks=ranks, **options)
        return Trainer(model, **options)

    trainer = trainer_of(plan)
    placed = _placed_for_restore(plan, payload, trainer.device)
    if placed is not plan:
        plan, trainer = placed, trainer_of(placed)
    if trainer.executor.ir.hash != payload["ir_hash"]:
        raise CheckpointError(f"{path}: the model {payload['model_name']!r} compiles differently now than when "
                              "the checkpoint was written (IR hash differs): its parameters may not fit")
    to = trainer.device
    trainer.executor.state = ModelState.placed(payload["params"], payload["globals"], payload["states"], to,
                                               plan.host_params)
    trainer.executor.batches_done = payload["batches_done"]
    trainer.executor.value_scale = payload["value_scale"]
    trainer.feature_order = payload["feature_order"]
    trainer.feature_ids = payload.get("feature_ids")
    trainer.labels = labels
    trainer.epoch = payload["epoch"]
    trainer.history = list(payload["history"])
    trainer.checkpoint = payload
    # a next fit plans the rows with the plan they trained with (in a HybridHash or FAE store where it placed them)
    trainer.restored_plan = Plan(**payload["plan"])
    trainer.resume_from = resume_point(payload, trainer)
    return trainer


def resume_point(payload, trainer):
    """(the last epoch's (ModelState, epoch, batches done) or None, the best epoch) of a checkpoint: what
    Trainer.continue_from takes to continue its run."""
    from alac.runtime.execution.state import ModelState

    last = payload.get("last")
    state = None if last is None else (ModelState.placed(last["params"], last["globals"], last["states"],
                                                         trainer.device, trainer.plan.host_params),
                                       last["epoch"], last["batches_done"])
    return state, (payload.get("training") or {}).get("best_epoch")


def _placed_for_restore(plan, payload, device):
    """The plan a checkpoint is restored with: a model whose rows (params and optimizer state) exceed the
    plan's GPU budget, or the GPU's free memory, keeps every param in pinned host memory, which the
    sync kernels read through mapped pointers (a model trained through a HybridHash cache)."""
    import dataclasses

    from alac.runtime.device.memory import available_bytes

    if device.type != "cuda":
        return plan
    table = sum(v.numel() * v.element_size() for v in [*payload["params"].values(), *payload["states"].values()])
    budget = plan.memory_budget if plan.memory_budget is not None else available_bytes(device)
    if budget is None or table <= budget:
        return plan
    return dataclasses.replace(plan, semantics="sync", placement=tuple((name, "host") for name in payload["params"]))


def export_readable(trainer, path, id_offset=0):
    """A text model in the user's feature ids, like Vowpal Wabbit's --readable_model: a header, then
    one line per feature with a non-zero parameter: `id value [factor ...]` (id_offset: 1 for files
    with 1-based ids)."""
    import numpy as np

    params, globals_ = trainer.parameters()
    names = list(params)
    lines = [f"# alac model {trainer.executor.ir.name} (IR {trainer.executor.ir.hash[:16]}), "
             f"{trainer.n_features} features, ids {'1' if id_offset else '0'}-based",
             "# " + " ".join(f"{name}={value:.9g}" for name, value in globals_.items()),
             "# id " + " ".join(f"{n}[{params[n].shape[1]}]" if params[n].ndim > 1 else n for n in names)]
    columns = [params[n].reshape(params[n].shape[0], -1) for n in names]
    table = np.concatenate(columns, axis=1)
    ids = np.arange(table.shape[0]) if trainer.feature_ids is None else trainer.feature_ids.numpy()
    for feature in np.flatnonzero(np.any(table != 0, axis=1)):
        lines.append(f"{ids[feature] + id_offset} " + " ".join(f"{v:.9g}" for v in table[feature]))
    write_text_atomically(path, "\n".join(lines) + "\n")


def export_numpy(trainer, path, id_offset=0):
    """The parameters and globals as a .npz archive: row i of a param is the feature `feature_id[i]`,
    in the data files' own numbering (id_offset 1 for 1-based files, as export_readable writes them;
    `id_base` holds it)."""
    import numpy as np

    params, globals_ = trainer.parameters()
    rows = next(iter(params.values())).shape[0]
    ids = np.arange(rows) if trainer.feature_ids is None else trainer.feature_ids.numpy()
    np.savez(path, **params, feature_id=ids + id_offset, id_base=np.array(id_offset),
             **{f"global_{k}": np.array(v) for k, v in globals_.items()})
