"""The sync epoch's forms side by side: the ids of the most frequent features in frequency order or
spread over cache lines (alac.runtime.movement.line_spread), and the epoch kernel's general form or resident
chunks (alac.codegen.epoch_kernel), with or without the next batch's chunk read before the second
barrier (Plan.prefetch_chunks), for LR and FM k = 16 at batch 1024 and chunk sizes 16 and 8; and a
hand-written sync LR kernel of the prefetching design. One process, same data and batches.

    PYTHONPATH=. python benchmarks/sync_resident.py [--rows 4000000] [--out DIR]

The hand-written kernel holds one chunk per program (chunks per batch <= programs, one [S, C] tile a
chunk): its ids, values and edge gradients stay in registers from the first phase to the second,
and the next batch's chunk (order entry, start, ids, values, labels) is read before the second
barrier, so that after it only w is gathered. Its parameters are tested against the reference
executor (tests/benchmarks/test_sync_resident.py). Writes results/sync_resident.json and .md.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

import torch
import triton
import triton.language as tl

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from alac.codegen import grid_barrier
from benchmarks.flow_tables import sync_resident_table
from benchmarks.report import environment, write


@triton.jit
def _chunk_tile(position, active, chunk_order_ptr, chunk_start_ptr, chunk_width_ptr, edge_feature_ptr,
                edge_value_ptr, row_of_slot_ptr, label_ptr, HAS_VALUES: tl.constexpr, C: tl.constexpr,
                S: tl.constexpr):
    """The chunk at chunk-order `position` (nothing where not active): its [S, C] ids, values and
    presence, its rows' validity and labels."""
    rows = tl.arange(0, C)
    slot = tl.arange(0, S)
    chunk = tl.load(chunk_order_ptr + position, mask=active, other=0)
    edge_base = tl.load(chunk_start_ptr + chunk)
    width = tl.where(active, tl.load(chunk_width_ptr + chunk), 0)
    edge = slot[:, None] * C + rows[None, :]
    feature = tl.load(edge_feature_ptr + edge_base + edge, mask=slot[:, None] < width, other=-1)
    present = feature >= 0
    if HAS_VALUES:
        x = tl.load(edge_value_ptr + edge_base + edge, mask=present, other=0.0)
    else:
        x = tl.where(present, 1.0, 0.0)
    slots = chunk * C + rows
    valid = active & (tl.load(row_of_slot_ptr + slots) >= 0)
    y = tl.load(label_ptr + slots)
    return tl.where(present, feature, 0), present, x, valid, y


@triton.jit
def resident_sync_lr_epoch(edge_feature_ptr, edge_value_ptr, chunk_start_ptr, chunk_width_ptr, row_of_slot_ptr,
                           label_ptr, chunk_order_ptr, n_chunks, chunks_per_batch, arrivals_ptr, w_ptr, b_ptr,
                           grad_b_ptr, lr_ptr, scale_ptr, loss_sum_ptr, HAS_VALUES: tl.constexpr, C: tl.constexpr,
                           S: tl.constexpr):
    pid = tl.program_id(0)
    loss_rows = tl.zeros([C], tl.float32)
    barriers = 0
    feature, present, x, valid, y = _chunk_tile(pid, pid < tl.minimum(chunks_per_batch, n_chunks), chunk_order_ptr,
                                                chunk_start_ptr, chunk_width_ptr, edge_feature_ptr, edge_value_ptr,
                                                row_of_slot_ptr, label_ptr, HAS_VALUES, C, S)
    for batch in range(0, tl.cdiv(n_chunks, chunks_per_batch)):
        w = tl.load(w_ptr + feature, mask=present, other=0.0)
        score = tl.load(b_ptr) + tl.sum(w * x, axis=0)
        z = -(y * score)
        loss_rows += tl.where(valid, tl.maximum(z, 0.0) + tl.log(1.0 + tl.exp(-tl.abs(z))), 0.0)
        d = tl.where(valid, -(y * tl.sigmoid(z)), 0.0)
        tl.atomic_add(grad_b_ptr, tl.sum(d, axis=0), sem="relaxed")
        barriers += 1
        grid_barrier(arrivals_ptr, barriers * tl.num_programs(0))
        lr = tl.load(lr_ptr + batch)
        scale = tl.load(scale_ptr + batch)
        if pid == 0:
            g = tl.load(grad_b_ptr)
            tl.store(grad_b_ptr, 0.0)
            tl.store(b_ptr, tl.load(b_ptr) - lr * scale * g)
        tl.atomic_add(w_ptr + feature, -(d[None, :] * x) * scale * lr, mask=present, sem="relaxed")
        # the next batch's chunk read before the barrier: after it only w is gathered
        position = (batch + 1) * chunks_per_batch + pid
        active = (pid < chunks_per_batch) & (position < n_chunks)
        feature, present, x, valid, y = _chunk_tile(position, active, chunk_order_ptr, chunk_start_ptr,
                                                    chunk_width_ptr, edge_feature_ptr, edge_value_ptr,
                                                    row_of_slot_ptr, label_ptr, HAS_VALUES, C, S)
        barriers += 1
        grid_barrier(arrivals_ptr, barriers * tl.num_programs(0))
    tl.atomic_add(loss_sum_ptr, tl.sum(loss_rows, axis=0), sem="relaxed")


def resident_epoch(layout, labels, w, b, order, rates, scales, chunks_per_batch, programs):
    """One sync LR epoch of `order` by the resident kernel on `programs` programs (every chunk of a
    batch its own program, so chunks_per_batch <= programs; one [S, C] tile a chunk); returns the
    loss sum. w, b: the params, updated in place."""
    widest, _ = layout.extent()
    if chunks_per_batch > programs:
        raise ValueError(f"{chunks_per_batch} chunks a batch need as many programs, not {programs}")
    arrivals = torch.zeros(1, dtype=torch.int32, device=w.device)
    grad_b = torch.zeros(1, device=w.device)
    loss_sum = torch.zeros(1, device=w.device)
    values = layout.edge_value if layout.edge_value is not None else layout.edge_feature
    resident_sync_lr_epoch[(programs,)](
        layout.edge_feature, values, layout.chunk_start, layout.chunk_width, layout.row_of_slot, labels, order,
        order.numel(), chunks_per_batch, arrivals, w, b, grad_b, rates, scales, loss_sum,
        HAS_VALUES=layout.edge_value is not None, C=layout.chunk_size, S=triton.next_power_of_2(max(widest, 1)))
    return loss_sum


# (name, Plan options): the forms, in the order they were built
FORMS = (("frequency order, general form", dict(spread_lines=0, resident_tiles=False)),
         ("spread lines, general form", dict(resident_tiles=False)),
         ("spread lines, resident chunks", dict()),
         ("spread lines, resident chunks, next chunk prefetched", dict(prefetch_chunks=True)))


def hand_written_arm(train, valid, epochs, lr, plan):
    """The hand-written kernel on the Trainer's spread layout: (ms per epoch after the first, val
    logloss per epoch)."""
    from alac import metrics
    from alac.runtime.device.timing import gpu_milliseconds
    from alac.runtime.execution.schedule import batch_scales
    from alac.train.trainer import Trainer
    from benchmarks import flow

    trainer = Trainer(flow._model(0), lr=lr, plan=plan, backend="triton", device=train.device, seed=0,
                      optimizer="sgd")
    trainer.initialize_model(train)
    layout, labels = trainer.prepare(train)
    valid_layout = trainer.layout_of(valid)
    executor = trainer.executor
    w, b = executor.state.params["w"], executor.state.globals["b"]
    per_batch = plan.chunks_per_batch
    times, losses = [], []
    for epoch in range(epochs):
        order = layout.chunk_order(epoch, 0)
        scales = batch_scales(layout, order, per_batch).float()
        rates = torch.full_like(scales, lr)
        times.append(gpu_milliseconds(lambda: resident_epoch(layout, labels, w, b, order, rates, scales, per_batch,
                                                             per_batch), repeats=1, warmup=0)[0])
        losses.append(float(metrics.logloss(executor.predict(valid_layout), valid.labels.to(train.device) > 0.5)))
    return statistics.median(times[1:]), losses


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=4_000_000)
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--chunk-sizes", type=int, nargs="+", default=[16, 8])
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--out", default=os.environ.get("OUT"))
    args = parser.parse_args()

    from alac.plan import Plan
    from benchmarks import flow

    train, valid = flow.synthetic_train_valid(args.rows, 500_000, "cuda", 0)
    arms = []
    for model, k, lr in (("LR", 0, 2.0), ("FM k=16", 16, 0.5)):
        for chunk in args.chunk_sizes:
            for form, options in FORMS:
                plan = Plan(batch_size=args.batch_size, chunk_size=chunk, **options)
                history = flow.alac_arm(train, valid, args.epochs, lr, k, 0, plan)
                arms.append({"model": model, "chunk_size": chunk, "form": form,
                             "ms_per_epoch": 1000 * statistics.median(s for s, _ in history[1:]),
                             "val_logloss": [v for _, v in history]})
                print(arms[-1]["model"], chunk, form, f"{arms[-1]['ms_per_epoch']:.2f} ms",
                      f"{arms[-1]['val_logloss'][-1]:.4f}", flush=True)
        if not k:
            for chunk in args.chunk_sizes:
                ms, losses = hand_written_arm(train, valid, args.epochs, lr,
                                              Plan(batch_size=args.batch_size, chunk_size=chunk))
                arms.append({"model": model, "chunk_size": chunk, "ms_per_epoch": ms, "val_logloss": losses,
                             "form": "spread lines, resident chunks, next chunk prefetched (hand-written)"})
                print(model, chunk, arms[-1]["form"], f"{ms:.2f} ms", f"{losses[-1]:.4f}", flush=True)
    env = environment()
    result = {"device": env["device"], "environment": env, "arguments": vars(args), "arms": arms}
    markdown = (f"Sync epochs at batch {args.batch_size}, {args.rows:,} × 39 synthetic rows, {env['device']}, "
                f"{env['date']}: median ms per epoch after the first, validation logloss after {args.epochs} "
                "epochs.\n\n" + sync_resident_table(result))
    write("sync_resident", result, markdown, args.out)
    print(markdown)


if __name__ == "__main__":
    main()
