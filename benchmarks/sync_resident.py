"""What a sync epoch could take if a program kept its chunk in registers across a batch's barriers:
a hand-written Triton kernel of sync LR (SGD, edge updates, no hot segment) beside the generated
sync epoch, same data, same batches, in one process.

    PYTHONPATH=. python benchmarks/sync_resident.py [--rows 4000000] [--batch-size 1024] [--out DIR]

The generated epoch kernel (alac.codegen.kernels, grid barriers, edge updates) runs each batch as two
phases between grid-wide barriers; the second re-reads the chunk's order entry, its start, its ids and
the edge gradients the first stored, three dependent round trips before its atomic additions. Here a
program holds one chunk of the batch (chunks per batch <= programs, one [S, C] tile a chunk): its ids,
values and edge gradients stay in registers from the first phase to the second, and the next batch's
chunk (order entry, start, ids, values, labels) is read before the second barrier, so that after it
only w is gathered. The kernel is the measure of that design, not a training path: its parameters are
tested against the reference executor (tests/benchmarks/test_sync_resident.py). Writes
results/sync_resident.json and .md.
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
from benchmarks.report import environment, table, write


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


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=4_000_000)
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--chunk-size", type=int, default=16)
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--lr", type=float, default=2.0)
    parser.add_argument("--out", default=os.environ.get("OUT"))
    args = parser.parse_args()

    from alac import metrics
    from alac.models import zoo_model
    from alac.plan import Plan
    from alac.runtime.executor import Executor, LabelMap
    from alac.runtime.layout import LayoutOptions, build_layout
    from alac.runtime.schedule import batch_scales
    from alac.runtime.timing import gpu_milliseconds
    from benchmarks import flow

    device = "cuda"
    train, valid = flow.synthetic_train_valid(args.rows, 500_000, device, 0)
    plan = Plan(batch_size=args.batch_size, kernels="fused", chunk_size=args.chunk_size)
    generated = flow.alac_arm(train, valid, args.epochs, args.lr, 0, 0, plan)
    generated_ms = 1000 * statistics.median(s for s, _ in generated[1:])
    print(f"generated sync: {generated_ms:.2f} ms/epoch, val logloss {generated[-1][1]:.4f}", flush=True)

    # the resident kernel on the same model, initial params and batches
    executor = Executor(zoo_model("lr"), plan, backend="triton", device=device, seed=0, optimizer="sgd")
    options = LayoutOptions(chunk_size=args.chunk_size)
    layout = build_layout(train, options, device)
    labels = LabelMap.fit("binary", train.labels).model_labels(layout.labels)
    executor.initialize(layout)
    valid_layout = build_layout(valid, options, device, feature_order=layout.new_to_old)
    w, b = executor.state.params["w"], executor.state.globals["b"]
    per_batch = plan.chunks_per_batch
    times, losses = [], []
    for epoch in range(args.epochs):
        order = layout.chunk_order(epoch, 0)
        scales = batch_scales(layout, order, per_batch).float()
        rates = torch.full_like(scales, args.lr)
        times.append(gpu_milliseconds(lambda: resident_epoch(layout, labels, w, b, order, rates, scales, per_batch,
                                                             per_batch), repeats=1, warmup=0)[0])
        losses.append(float(metrics.logloss(executor.predict(valid_layout), valid.labels.to(device) > 0.5)))
        print(f"resident epoch {epoch}: {times[-1]:.2f} ms, val logloss {losses[-1]:.4f}", flush=True)
    resident_ms = statistics.median(times[1:])
    env = environment()
    result = {"device": env["device"], "environment": env, "arguments": vars(args),
              "generated": {"ms_per_epoch": generated_ms, "val_logloss": [v for _, v in generated]},
              "resident": {"ms_per_epoch": resident_ms, "ms_per_epoch_all": times, "val_logloss": losses}}
    markdown = (f"Sync LR at batch {args.batch_size} (C = {args.chunk_size}), {args.rows:,} × 39 synthetic rows, "
                f"{env['device']}, {env['date']}: median ms per epoch after the first.\n\n"
                + table(["kernel", "ms / epoch", "val logloss (last epoch)"],
                        [["generated sync epoch (grid barriers, edge updates)", f"{generated_ms:.2f}",
                          f"{generated[-1][1]:.4f}"],
                         ["resident chunk tile (hand-written)", f"{resident_ms:.2f}", f"{losses[-1]:.4f}"]]))
    write("sync_resident", result, markdown, args.out)
    print(markdown)


if __name__ == "__main__":
    main()
