"""Running and timing a dumped kernel module (`alac inspect --dump DIR`): the module's own kernels,
edits included, train the model it was generated for on a synthetic Criteo-shaped set, and every
epoch's time and training loss are printed. The file runs itself:

    python DIR/alac_fm_bbe43039_sync_grid_edges.py [--rows N] [--epochs E] [--lr LR]
    TRITON_INTERPRET=1 python DIR/....py --rows 2000     # on a CPU, under Triton's interpreter
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import time

import torch

from alac.errors import AlacError


def _load(path):
    spec = importlib.util.spec_from_file_location(f"alac_dumped_{abs(hash(path))}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run(path, model, optimizer, plan, rows, epochs, lr, out=print):
    """Train `model` (an alac model) with the kernels of the module at path for `epochs` epochs of a
    synthetic set of `rows` rows; returns [(milliseconds, mean training loss)] per epoch."""
    from alac.codegen import interpreter_active
    from alac.data.synthetic import criteo_like
    from alac.train.trainer import Trainer

    interpret = interpreter_active()
    if not interpret and not torch.cuda.is_available():
        raise AlacError("no CUDA GPU here: run the module under Triton's interpreter (TRITON_INTERPRET=1)")
    trainer = Trainer(model, lr=lr, plan=plan, optimizer=optimizer, backend="interpret" if interpret else "triton")
    data = criteo_like(rows, seed=0, device=trainer.device)
    layout, labels = trainer.prepare(data)
    executor = trainer.executor
    executor.initialize(layout)
    executor.backend.use_module(_load(path))
    history = []
    for epoch in range(epochs):
        if trainer.device.type == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        loss = executor.train_epoch(layout, labels, epoch, lr)
        milliseconds = (time.perf_counter() - start) * 1000
        history.append((milliseconds, loss))
        out(f"epoch {epoch + 1}: {milliseconds:9.2f} ms  training loss {loss:.6f}"
            + ("  (compiles the kernels)" if epoch == 0 and not interpret else ""))
    return history


def main(path, model, optimizer, plan_fields, argv=None):
    """The dumped module's command line (its __main__ block calls this): model is the zoo name or
    the model file it was generated from, with that model's default options."""
    from alac.codegen import interpreter_active
    from alac.models import build_model, model_module
    from alac.plan import Plan

    parser = argparse.ArgumentParser(description=f"Train and time the kernels of {path} on synthetic data.")
    parser.add_argument("--rows", type=int, default=4000 if interpreter_active() else 1_000_000)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--lr", type=float, default=0.5)
    args = parser.parse_args(argv)
    try:
        run(path, build_model(model_module(model)), optimizer, Plan(**plan_fields), args.rows, args.epochs, args.lr)
    except AlacError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 0
