"""Rewrites of the async LR kernel that were measured and not kept, as text patches of the generated
source: each against the kernel as generated, 10 epochs of the 4M-row synthetic set, one process.

    PYTHONPATH=. python benchmarks/async_rewrites.py [--rows 4000000] [--epochs 10] [--out DIR]

Rewrites (`REWRITES`): more warps per multiprocessor at the same programs at once (a register cap);
all launched programs at once (4 warps capped at 128 registers); 3 programs per multiprocessor (4
warps capped at 168 registers); the next chunk's metadata and edge tile loaded while this one
computes; the per-row loss computed once per row (wx and d_wx through scratch rows); the hot weights
as a register tile read at each flush and gathered with tl.gather; the hot segment in shared memory
(inline PTX past Triton's own dynamic shared memory, f32 or fixed-point int32 additions). Writes
results/async_rewrites.json and .md (ms per epoch, validation logloss per epoch, registers). GPU
only; the patches are tested against the generator under the interpreter (tests/benchmarks).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.patches import replace_checked  # noqa: E402
from benchmarks.report import environment, table, write  # noqa: E402

ONE_TILE_GATHER = "            w = tl.load(w_ptr + feature, mask=present, other=0.0)\n            wx = tl.sum("
ONE_TILE_HOT_SUMS = ('            tl.atomic_add(hot_grad_w_ptr + (hot_base + feature), grad_w, mask=hot, sem="relaxed")\n'
                     '        else:')
REDUCED_WX = "            wx = tl.sum(tl.where(present, w * x, 0.0), axis=0)\n"
D_WX = "            d_wx = tl.where(valid, ts1, 0.0)\n"
LOOP_HEAD = """    for step in range(0, my_chunks):
        position = first + step * tl.num_programs(0)
        chunk = tl.load(chunk_order_ptr + position).to(tl.int64)
        slots = chunk * C + rows
        valid = tl.load(row_of_slot_ptr + slots) >= 0
        edge_base = tl.load(chunk_start_ptr + chunk)
        width = tl.load(chunk_width_ptr + chunk)
        chunk_features = edge_feature_ptr + edge_base
        chunk_values = edge_value_ptr + edge_base
        if ONE_TILE:
            # aggregate: every edge adds its contribution to its sample's accums (registers)
            # every row fits one [S, C] tile of edges: load it once for all stages
            slot = tl.arange(0, S)
            edge = slot[:, None] * C + rows[None, :]
            feature, present, x = load_edges(chunk_features, chunk_values, edge, slot[:, None] < width, HAS_VALUES, WIDE_IDS)
            w = tl.load(w_ptr + feature, mask=present, other=0.0)
"""
FLUSH_BODY_START = "            for hot_start in range(0, hot_size, HOT_BLOCK):\n                hot_feature"
LOSS_SUM = "    tl.atomic_add(loss_sum_ptr"
PROGRAM_START = "    loss_rows = tl.zeros([C], tl.float32)\n"
# rows the scratch-row rewrite keeps past each program's hot sums (wx, then d_wx)
SCRATCH_ROWS = 2
# hot features the register-tile and shared-memory rewrites hold (at least the data's H: about 1,400
# on the 4M-row set with the default plan)
HOT_PAD = 2048


def _replace(source, old, new, name):
    return replace_checked(source, old, new, 1, f"rewrite {name!r} (update async_rewrites)")


def prefetch(source):
    """The next chunk's order entry, start, width and edge tile are loaded while this chunk computes
    (positions past the program's last are clamped to the last chunk)."""
    source = _replace(source, LOOP_HEAD, """    slot = tl.arange(0, S)
    edge = slot[:, None] * C + rows[None, :]
    next_chunk = tl.load(chunk_order_ptr + tl.minimum(first, n_chunks - 1)).to(tl.int64)
    next_edge_base = tl.load(chunk_start_ptr + next_chunk)
    next_width = tl.load(chunk_width_ptr + next_chunk)
    next_feature, next_present, next_x = load_edges(edge_feature_ptr + next_edge_base, edge_value_ptr + next_edge_base, edge, slot[:, None] < next_width, HAS_VALUES, WIDE_IDS)
    for step in range(0, my_chunks):
        chunk = next_chunk
        edge_base = next_edge_base
        width = next_width
        slots = chunk * C + rows
        valid = tl.load(row_of_slot_ptr + slots) >= 0
        chunk_features = edge_feature_ptr + edge_base
        chunk_values = edge_value_ptr + edge_base
        if ONE_TILE:
            feature = next_feature
            present = next_present
            x = next_x
            w = tl.load(w_ptr + feature, mask=present, other=0.0)
            next_chunk = tl.load(chunk_order_ptr + tl.minimum(first + (step + 1) * tl.num_programs(0), n_chunks - 1)).to(tl.int64)
            next_edge_base = tl.load(chunk_start_ptr + next_chunk)
            next_width = tl.load(chunk_width_ptr + next_chunk)
""", "prefetch")
    return _replace(source, ONE_TILE_HOT_SUMS, ONE_TILE_HOT_SUMS.replace("\n        else:", """
            next_feature, next_present, next_x = load_edges(edge_feature_ptr + next_edge_base, edge_value_ptr + next_edge_base, edge, slot[:, None] < next_width, HAS_VALUES, WIDE_IDS)
        else:"""), "prefetch")


def rows_once(source):
    """wx and d_wx through per-program scratch rows past the hot sums: a load fixes a layout that
    Triton does not rematerialize, so the loss is computed once per row, not in 16 rows per thread."""
    source = _replace(source, REDUCED_WX, REDUCED_WX + f"""            row_scratch = hot_grad_w_ptr + hot_base + hot_stride - {SCRATCH_ROWS} * C
            tl.store(row_scratch + rows, wx)
            tl.debug_barrier()
            wx = tl.load(row_scratch + tl.arange(0, C))
""", "rows_once")
    return _replace(source, D_WX, D_WX + """            tl.store(row_scratch + C + tl.arange(0, C), d_wx)
            tl.debug_barrier()
            d_wx = tl.load(row_scratch + C + rows)
""", "rows_once")


def _hot_block_loop(body, indent):
    lines = ["for hot_start in range(0, hot_size, HOT_BLOCK):",
             "    hot_feature = hot_start + tl.arange(0, HOT_BLOCK)",
             "    in_hot = hot_feature < hot_size"] + ["    " + line for line in body]
    return "".join(" " * indent + line + "\n" for line in lines)


def _rewrite_flush(source, name, sums_read, refresh, refresh_per_block=True):
    """The flush's loop over hot blocks with the sums read by sums_read (lines), then the hot weights
    refreshed by refresh (lines, in a loop over hot blocks or once)."""
    start = source.index(FLUSH_BODY_START) if FLUSH_BODY_START in source else -1
    if start < 0 or LOSS_SUM not in source:
        raise ValueError(f"rewrite {name!r}: the flush is not in the generated kernel; update async_rewrites")
    end = source.index(LOSS_SUM)
    apply = ["use = in_hot & (summed != 0.0)", "hot_g = summed * scale / chunks_summed", "hot_delta_p = -(hot_g * lr)",
             'tl.atomic_add(w_ptr + hot_feature, hot_delta_p, mask=use, sem="relaxed")']
    refreshed = _hot_block_loop(refresh, 12) if refresh_per_block else "".join(" " * 12 + line + "\n" for line in refresh)
    flush = (_hot_block_loop(sums_read + apply, 12) + "            tl.debug_barrier()\n"
             + refreshed + "            tl.debug_barrier()\n")
    return source[:start] + flush + source[end:]


XCHG_SUMS = ["summed_bits = tl.atomic_xchg(hot_grad_w_ptr.to(tl.pointer_type(tl.int32)) + (hot_base + hot_feature), "
             'tl.zeros([HOT_BLOCK], tl.int32), mask=in_hot, sem="relaxed")',
             "summed = tl.where(in_hot, summed_bits.to(tl.float32, bitcast=True), 0.0)"]


def hot_tile(source):
    """The hot weights as a [HOT_PAD] register tile, read past L1 at the start and after each flush;
    hot edges gather from it with tl.gather (through shared memory), cold ones from w."""
    source = _replace(source, PROGRAM_START, f"""    hot_index = tl.arange(0, {HOT_PAD})
    hot_table = tl.load(w_ptr + hot_index, mask=hot_index < hot_size, other=0.0, cache_modifier=".cg")
""" + PROGRAM_START, "hot_tile")
    source = _replace(source, ONE_TILE_GATHER, """            is_hot = present & (feature < hot_size)
            w_hot = tl.reshape(tl.gather(hot_table, tl.reshape(tl.where(is_hot, feature, 0), [S * C]), 0), [S, C])
            w = tl.where(is_hot, w_hot, tl.load(w_ptr + feature, mask=present & ~is_hot, other=0.0))
            wx = tl.sum(""", "hot_tile")
    return _rewrite_flush(source, "hot_tile", XCHG_SUMS, [
        'hot_table = tl.load(w_ptr + hot_index, mask=hot_index < hot_size, other=0.0, cache_modifier=".cg")'],
        refresh_per_block=False)


def _shared_access(name, operation, output, inputs):
    """A jit helper doing one shared-memory access per element at address a = global_smem + 4 * index
    (operands: $0 the output, $1 the index, then inputs, then the mask)."""
    constraints = ",".join([output, "r"] + [constraint for constraint, _ in inputs] + ["r"])
    parameters = ", ".join(["index"] + [argument for _, argument in inputs] + ["mask"])
    arguments = ", ".join(["index"] + [argument for _, argument in inputs] + ["mask.to(tl.int32)"])
    dtype = "tl.float32" if output == "=f" else "tl.int32"
    return f"""
@triton.jit
def {name}({parameters}):
    return tl.inline_asm_elementwise(
        "{{ .reg .pred p; .reg .u32 a; setp.ne.b32 p, ${len(inputs) + 2}, 0; mov.u32 a, global_smem; "
        "mad.lo.u32 a, $1, 4, a; {operation} }}",
        "{constraints}", [{arguments}], dtype={dtype}, is_pure=False, pack=1)

"""


def shared_hot_segment(source, offset, fixed_point):
    """The hot segment in shared memory past Triton's own (offset bytes): [HOT_PAD] gradient sums and
    [HOT_PAD] weights, read and added by inline PTX; the launch must give offset + 8 * HOT_PAD bytes
    of dynamic shared memory (`raised_shared_memory`). Fixed point: gradients added as int32 at 2**20
    (native shared atomics; f32 ones are compare-and-swap loops on sm_90)."""
    sums, weights = offset, offset + 4 * HOT_PAD
    if fixed_point:
        add = (f".reg .f32 s; .reg .s32 v; mul.f32 s, $2, 0f49800000; cvt.rni.s32.f32 v, s; "
               f"@p red.shared.add.s32 [a+{sums}], v; mov.b32 $0, 0;")
        read = (f".reg .s32 t; mov.b32 t, 0; @p ld.shared.s32 t, [a+{sums}]; cvt.rn.f32.s32 $0, t; "
                "mul.f32 $0, $0, 0f35800000;")
    else:
        add = f"@p red.shared.add.f32 [a+{sums}], $2; mov.b32 $0, 0;"
        read = f"mov.b32 $0, 0f00000000; @p ld.shared.f32 $0, [a+{sums}];"
    zero = f".reg .b32 z; mov.b32 z, 0; @p st.shared.b32 [a+{sums}], z; mov.b32 $0, 0;"
    helpers = (_shared_access("shared_add_sums", add, "=r", [("f", "value")])
               + _shared_access("shared_read_sums", read, "=f", [])
               + _shared_access("shared_zero_sums", zero, "=r", [])
               + _shared_access("shared_read_w", f"mov.b32 $0, 0f00000000; @p ld.shared.f32 $0, [a+{weights}];", "=f", [])
               + _shared_access("shared_store_w", f"@p st.shared.f32 [a+{weights}], $2; mov.b32 $0, 0;", "=r",
                                [("f", "value")]))
    source = _replace(source, "@triton.jit\ndef load_edges(", helpers + "\n@triton.jit\ndef load_edges(", "shared")
    refresh = ['shared_store_w(hot_feature, tl.load(w_ptr + hot_feature, mask=in_hot, other=0.0, cache_modifier=".cg"), in_hot)']
    source = _replace(source, PROGRAM_START, _hot_block_loop(["shared_zero_sums(hot_feature, in_hot)"] + refresh, 4)
                      + "    tl.debug_barrier()\n" + PROGRAM_START, "shared")
    source = _replace(source, ONE_TILE_GATHER, """            is_hot = present & (feature < hot_size)
            w = tl.where(is_hot, shared_read_w(feature, is_hot), tl.load(w_ptr + feature, mask=present & ~is_hot, other=0.0))
            wx = tl.sum(""", "shared")
    source = _replace(source, ONE_TILE_HOT_SUMS, "            shared_add_sums(feature, grad_w, hot)\n        else:", "shared")
    return _rewrite_flush(source, "shared", ["summed = shared_read_sums(hot_feature, in_hot)",
                                             "shared_zero_sums(hot_feature, in_hot)"], refresh)


@contextlib.contextmanager
def raised_shared_memory(offset, extra):
    """Launch async kernels that use shared memory past Triton's own with `extra` more bytes: Triton
    3.6 packs (warps, CTAs, shared bytes) per compiled kernel and launches with those bytes."""
    import triton.compiler.compiler as compiler

    original = compiler.CompiledKernel.__init__

    def init(self, *args, **kwargs):
        original(self, *args, **kwargs)
        if self.name.endswith("_async") and "global_smem" in str(self.asm.get("ptx", "")) \
                and ".shared.add" in str(self.asm.get("ptx", "")):
            warps, ctas, shared = self.packed_metadata
            if shared > offset:
                raise RuntimeError(f"Triton's own shared memory ({shared} bytes) passes the rewrite's offset {offset}")
            self.packed_metadata = (warps, ctas, offset + extra)

    compiler.CompiledKernel.__init__ = init
    try:
        yield
    finally:
        compiler.CompiledKernel.__init__ = original


# Triton's own dynamic shared memory in the shared-memory rewrite's kernel (Triton 3.6, H100): 8,192
# bytes; the rewrite's region starts there.
SHARED_OFFSET = 8192
REWRITES = {
    "as generated": (None, {}),
    "8 warps, at most 128 registers": (None, {"num_warps": 8, "maxnreg": 128}),
    "16 warps, at most 64 registers": (None, {"num_warps": 16, "maxnreg": 64}),
    "4 warps, at most 128 registers (all programs at once)": (None, {"num_warps": 4, "maxnreg": 128}),
    "4 warps, at most 168 registers (3 programs per multiprocessor)": (None, {"num_warps": 4, "maxnreg": 168}),
    "next chunk loaded during this one": (prefetch, {}),
    "loss once per row (scratch rows)": (rows_once, {}),
    "hot weights as a register tile (tl.gather)": (hot_tile, {}),
    "hot segment in shared memory, f32 additions": (lambda s: shared_hot_segment(s, SHARED_OFFSET, False), {}),
    "hot segment in shared memory, int32 fixed point": (lambda s: shared_hot_segment(s, SHARED_OFFSET, True), {}),
}


@contextlib.contextmanager
def rewritten(patch, constants):
    """Trainers built inside generate the patched kernel source and launch with the extra constants."""
    import alac.runtime.triton_backend as backend
    from alac.codegen.kernels import generate_kernels

    def generate(ir, plan):
        generated = generate_kernels(ir, plan)
        if patch is not None and plan.semantics == "async":
            generated = dataclasses.replace(generated, source=patch(generated.source))
        return generated

    original_constants = backend.TritonBackend._constants

    def launch_constants(self, layout):
        return {**original_constants(self, layout), **constants}

    backend.generate_kernels, backend.TritonBackend._constants = generate, launch_constants
    try:
        yield
    finally:
        backend.generate_kernels, backend.TritonBackend._constants = generate_kernels, original_constants


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=4_000_000)
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--out", default=os.environ.get("OUT"))
    args = parser.parse_args()

    import alac.runtime.triton_backend as backend
    from alac.plan import Plan
    from alac.runtime.planner import hot_size_for_data
    from benchmarks.flow import alac_arm, synthetic_train_valid

    train, valid = synthetic_train_valid(args.rows, 500_000, "cuda", 0)
    plan = Plan(semantics="async", batch_size=1024, chunk_size=32)
    plan = dataclasses.replace(plan, hot_size=hot_size_for_data(train, plan))
    if plan.hot_size > HOT_PAD:
        raise SystemExit(f"H = {plan.hot_size} passes HOT_PAD = {HOT_PAD}")
    # the scratch-row rewrite keeps its rows past every program's hot sums
    backend.HOT_ROW_ALIGNMENT = HOT_PAD
    rows = []
    for name, (patch, constants) in list(REWRITES.items()) + [("as generated, again", (None, {}))]:
        with rewritten(patch, constants), raised_shared_memory(SHARED_OFFSET, 8 * HOT_PAD):
            history = alac_arm(train, valid, args.epochs, 2.0, 0, 0, plan)
        rows.append({"rewrite": name, "ms_per_epoch": 1000 * statistics.median(s for s, _ in history[1:]),
                     "val_logloss": [v for _, v in history], "resident_programs": history.resident_programs})
        print(rows[-1]["rewrite"], f"{rows[-1]['ms_per_epoch']:.2f} ms", rows[-1]["val_logloss"][-1], flush=True)
    env = environment()
    markdown = "\n".join([
        f"Async LR, {args.rows:,} × 39 synthetic rows, default plan (H = {plan.hot_size}), {args.epochs} epochs per "
        f"rewrite, median epoch after the first; {env['device']}, triton {env['triton']}, {env['date']}.", "",
        table(["rewrite", "ms / epoch", "val logloss (last epoch)"],
              [[r["rewrite"], f"{r['ms_per_epoch']:.2f}", f"{r['val_logloss'][-1]:.4f}"] for r in rows])])
    write("async_rewrites", {"device": env["device"], "environment": env, "arguments": vars(args),
                             "hot_size": plan.hot_size, "rewrites": rows}, markdown, args.out)
    print(markdown)


if __name__ == "__main__":
    main()
