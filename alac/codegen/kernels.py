"""ModelIR + plan -> the Triton source of a model's kernels.

A kernel is a group of stages from the stage graph (`alac.ir.stage_graph.kernel_groups`): the fused
flow kernel is aggregate + loss + apply in one program per chunk, with accums and deltas in
registers; the stage-based plan makes each stage a kernel and passes accums and deltas through
global memory. The update kernel applies the optimizer to a batch's accumulated gradients (the
mini-batch barrier); the predict kernel is aggregate + predict.

- Async (`plan.semantics == "async"`): one persistent kernel; program p takes chunks p, p + P, ...
  and applies its gradients at once, lock-free (additive changes are atomic additions, others are
  stored). Globals are applied before the chunk's param changes (after them the bias lagged and the
  validation loss was worse: flow.py's async LR arm).
- Hot segment (`plan.hot_size` H): features below H are the most frequent. Async: every program sums
  its hot gradients in its own [H] buffer and applies them every `flush_every` K chunks at
  lr / (B K) (at lr / B async LR diverged; benchmarks/flow_sweep.py). Sync: per edge slot the C
  (feature, gradient) pairs are sorted and reduced, into R replicas (`plan.replicas`).
- Derived params (`plan.derive_params`, async): a param that is its optimizer's function of its
  state (FTRL's weight) is computed where a cold edge reads it, from states read by atomic
  operations (a load may return an older value; benchmarks/not_kept.json).
- Deterministic plans: no floating-point atomics; each edge's gradient is stored at its slot and
  summed in a fixed order by alac.runtime.execution.deterministic.
- Sync epochs (`plan.grid_barrier`): one persistent kernel runs every batch's kernel groups,
  meeting at grid-wide barriers (`triton_helpers.grid_barrier`), an epoch per launch (one batch
  where a batch must end on the host); edge updates (`plan.edge_updates`) add every cold edge's
  change instead of flagging touched features (benchmarks/sync_breakdown.py).

Every atomic is relaxed (sums need atomicity, not ordering; kernel boundaries and barriers order
the steps), except the grid barrier's counter. Kernel names are
`alac_<model>_<ir hash[:8]>_<variant name>_<role>`.

The generator is split by concern: kernels (this module: which kernels, their loops and launches),
stages (aggregate, loss, apply, predict), param_access (every read and update of a param and its
optimizer state), functions (stage bodies as device functions, written once and called from every
kernel that runs them), writer (lines and arguments), manifest (the typed arguments the runtime
binds).
"""

from __future__ import annotations

import inspect
import re
import textwrap

from alac.codegen import manifest as m
from alac.codegen import triton_helpers
from alac.codegen.epoch_kernel import EpochKernel
from alac.codegen.functions import FLOW_CONSTEXPRS, device_function, kernel_source
from alac.codegen.manifest import GeneratedKernels, KernelSpec, next_power_of_two
from alac.codegen.param_access import ParamAccess
from alac.codegen.printer import TRITON, TRITON_FULL_LANES, ExpressionPrinter
from alac.codegen.stages import StageEmitter
from alac.codegen.writer import Writer
from alac.ir.ranks import binder_ranks
from alac.ir.stage_graph import build_stage_graph, kernel_groups

# Hot features per step of the dense passes over the hot segment (the update kernel's, the async
# flush): a block of 256 float32 keeps the pass coalesced and small enough for every program count;
# with a factor block, [HOT_BLOCK, BLOCK_K] tiles of at most HOT_TILE_VALUES. benchmarks/kernel_registers.py
# (ptxas -v, sm_90): at k = 64 a [256, 64] flush tile spilled in every edge tile (up to 2 KB a thread);
# with [64, 64] no edge tile of 2,048-4,096 values at 8 warps spills (114-184 registers).
HOT_BLOCK = 256
HOT_TILE_VALUES = 4096


def hot_block(block_k):
    """HOT_BLOCK for vector params of block_k lanes (at least 16 features a step)."""
    return max(16, min(HOT_BLOCK, HOT_TILE_VALUES // max(block_k, 1)))


def _manifest(specs):
    """Every argument of the specs' kernels once, in order of first use."""
    return tuple(dict.fromkeys(a for spec in specs for a in spec.args))


class KernelGenerator(StageEmitter, ParamAccess, EpochKernel):
    def __init__(self, ir, plan):
        self.ir = ir
        self.optimizer = ir.optimizer
        # the mechanisms this module is built with: the plan's variant, as this optimizer runs it
        self.variant = variant = plan.variant.for_optimizer(self.optimizer)
        self.kernels = variant.kernels
        self.hot = variant.hot
        self.asynchronous = variant.asynchronous
        self.deterministic = variant.deterministic
        # sync with an additive optimizer (SGD): the apply stage keeps every cold edge's gradient in
        # a per-batch edge buffer and the update stage adds each edge's change to its param, instead
        # of flagging touched features and updating each once
        self.edge_updates = variant.edge_updates
        # ... summing a chunk's equal features per slot first
        self.summed_edge_updates = variant.sum_equal_edges
        self.prefix = f"alac_{ir.name}_{ir.hash[:8]}_{variant.name}"
        self.k = ir.factor_size
        self.block_k = next_power_of_two(self.k) if self.k else 0
        # edge values are [S, C] tiles (S slots of the chunk's C rows) in every edge loop
        self.ranks = binder_ranks(ir)
        # lanes past K (up to the power of two BLOCK_K) are masked out only where they exist
        self.lane_masks = self.k != self.block_k
        self.dialect = TRITON if self.lane_masks else TRITON_FULL_LANES
        self.printer = ExpressionPrinter(self.dialect, {}, self.ranks)
        self.params = {p.name: p for p in ir.params}
        # params computed from their optimizer state where read (async only: sync update kernels
        # store every param they update)
        self.derived = set(self.optimizer.derivable) if variant.derive_params else set()
        # async programs claim chunks from a shared queue
        self.chunk_queue = variant.chunk_queue
        # the module's device functions by name, in order of definition
        self.functions = {}

    def _define(self, name, doc, writer, returns=()):
        """A device function of the module (defined once; a second definition must be the same)."""
        function = device_function(name, doc, writer, returns)
        assert self.functions.setdefault(name, function) == function, f"two bodies for {name}"
        return function

    @staticmethod
    def _chunk_prologue(w, edges, active=False):
        """The chunk's rows; and its edges where a stage reads them (edges). active: a resident
        program's chunk, which has no rows and no edges where the variable `active` is false."""
        w.line("slots = chunk * C + rows")
        w.line("valid = active & (tl.load(row_of_slot_ptr + slots) >= 0)" if active else
               "valid = tl.load(row_of_slot_ptr + slots) >= 0")
        if not edges:
            return
        w.line("edge_base = tl.load(chunk_start_ptr + chunk)")
        if active:
            w.comment("no edges where not active (the batch has fewer chunks than programs)")
            w.line("width = tl.where(active, tl.load(chunk_width_ptr + chunk), 0)")
        else:
            w.line("width = tl.load(chunk_width_ptr + chunk)")
        w.line("chunk_features = edge_feature_ptr + edge_base")
        w.line("chunk_values = edge_value_ptr + edge_base")

    def _chunk_body(self, w, stages, local_inputs, local_outputs):
        """A chunk's stages, from `chunk`: the tile stages through device functions, in one tile
        (ONE_TILE, the fixed-width fast path: edges and params are read once for all stages) or in
        a loop over tiles."""
        for argument in m.LAYOUT:
            w.arg(argument)
        tile_stages = [stage for stage in stages if stage in ("aggregate", "apply")]
        self._chunk_prologue(w, bool(tile_stages))
        params = self._tile_params(stages)
        tile = self._edge_tile_function(params, w.derived) if tile_stages else None
        bodies = {stage: self._aggregate_function() if stage == "aggregate" else self._apply_function(w.derived, params)
                  for stage in tile_stages}
        tile_loaded = False
        for stage in stages:
            for name, vector in local_inputs.get(stage, ()):
                self._load_rows(w, name, vector)
            if stage in bodies:
                self._tile_stage(w, stage, tile, bodies[stage], tile_loaded)
                tile_loaded = True
            else:
                {"loss": self._loss, "predict": self._predict}[stage](w)
            for name, vector in local_outputs.get(stage, ()):
                self._store_rows(w, name, vector)

    def _tile_stage(self, w, stage, tile, body, tile_loaded):
        if stage == "aggregate":
            for a in self.ir.accums:
                w.line(f"{a.name} = tl.zeros({'[C, BLOCK_K]' if a.vector else '[C]'}, tl.float32)")
        w.line("if ONE_TILE:")
        w.depth += 1
        if not tile_loaded:
            w.comment("every row fits one [S, C] tile of edges: read it once for all stages")
            w.call(tile, slot_start="0")
        w.call(body)
        w.depth -= 1
        w.line("else:")
        w.depth += 1
        w.line("for slot_start in range(0, width, S):")
        w.depth += 1
        w.call(tile)
        w.call(body)
        w.depth -= 2

    def _chunk_function(self, stages, local_inputs, local_outputs):
        """Sync: a group's stages on one chunk as a device function, shared by the per-batch kernel
        and the epoch kernel; returns the chunk's per-row loss."""
        w = Writer()
        self._chunk_body(w, stages, local_inputs, local_outputs)
        returns = ("loss",) if "loss" in stages and not self.deterministic else ()
        doc = f"{' + '.join(stages)} of one chunk" + ("; returns its rows' losses" if returns else "")
        return self._define(f"{'_'.join(stages)}_chunk", doc, w, returns)

    def _chunk_kernel(self, role, stages, local_inputs, local_outputs):
        w = Writer()
        for name in m.CHUNK_ARGS:
            w.arg(name)
        if self.asynchronous and role == "train":
            w.derived = frozenset(self.derived)
            self._persistent_loop(w, stages, local_inputs, local_outputs)
            role = "async"
        elif role == "train":
            if self.edge_updates:
                w.line("batch_chunk = tl.program_id(0)")
            w.line("chunk = tl.load(chunk_order_ptr + chunk_offset + tl.program_id(0)).to(tl.int64)")
            function = self._chunk_function(stages, local_inputs, local_outputs)
            w.call(function)
            if function.returns:
                w.line(f"tl.atomic_add({w.arg(m.LOSS_SUM)}, tl.sum(loss, axis=0), sem=\"relaxed\")")
        else:
            w.line("chunk = tl.load(chunk_order_ptr + chunk_offset + tl.program_id(0)).to(tl.int64)")
            self._chunk_body(w, stages, local_inputs, local_outputs)
        name = f"{self.prefix}_{'_'.join(stages) if role == 'train' else role}"
        return kernel_source(name, w, FLOW_CONSTEXPRS), KernelSpec(name, role, tuple(stages), tuple(w.args))

    def _persistent_loop(self, w, stages, local_inputs, local_outputs):
        """Async: programs take the epoch's chunk-order positions from a shared queue until it runs
        out (or, without the queue, chunks pid, pid + P, ...); with a hot segment, every flush_every
        chunks (and after its last) a program applies its hot-gradient sums."""
        w.arg(m.CHUNK_END)
        w.comment("the epoch's learning rate, and 1 / B: a sample's gradient counts as in a batch of B")
        w.line(f"lr = tl.load({w.arg(m.LR)})")
        w.line(f"scale = tl.load({w.arg(m.SCALE)})")
        if self.chunk_queue:
            queue = w.arg(m.QUEUE)
            claim = f"chunk_offset + tl.atomic_add({queue}, 1, sem=\"relaxed\")"
            w.comment("persistent: each program claims the next position of the epoch's chunk order until none")
            w.comment("is left, so the programs finish within about a chunk of each other")
            w.line(f"position = {claim}")
        else:
            w.comment("persistent: this program takes chunks pid, pid + P, ... of the epoch's queue")
            w.line("first = chunk_offset + tl.program_id(0)")
            w.line("my_chunks = tl.cdiv(tl.maximum(chunk_end - first, 0), tl.num_programs(0))")
        if self.hot:
            w.comment("this program's own [H] sums of hot gradients")
            w.line(f"hot_base = tl.program_id(0).to(tl.int64) * {w.arg(m.size('hot_stride'))}")
        w.comment("the loss, summed per row; added to the epoch's total once, at the end")
        w.line("loss_rows = tl.zeros([C], tl.float32)")
        if self.chunk_queue:
            w.line("step = 0")
            w.line("while position < chunk_end:")
            w.depth += 1
            w.comment("claim the next position now: the claim's round trip overlaps this chunk")
            w.line(f"next_position = {claim}")
            last = "next_position >= chunk_end"
        else:
            w.line("for step in range(0, my_chunks):")
            w.depth += 1
            w.line("position = first + step * tl.num_programs(0)")
            last = "step + 1 == my_chunks"
        w.line("chunk = tl.load(chunk_order_ptr + position).to(tl.int64)")
        self._chunk_body(w, stages, local_inputs, local_outputs)
        w.line("loss_rows += loss")
        if self.hot:
            w.comment("flush the hot sums every flush_every chunks, out of phase across programs, and after the")
            w.comment("program's last (flushing in step, every program's first sums are gradients of the same params")
            w.comment("applied at once: async FM spiked with an epoch cut into launches, streaming.py's blocks)")
            w.line(f"if ((step + 1 + tl.program_id(0)) % {w.arg(m.size('flush_every'))} == 0) | ({last}):")
            w.depth += 1
            self._flush(w)
            w.depth -= 1
        if self.chunk_queue:
            w.line("step += 1")
            w.line("position = next_position")
        w.depth -= 1
        w.line(f"tl.atomic_add({w.arg(m.LOSS_SUM)}, tl.sum(loss_rows, axis=0), sem=\"relaxed\")")
        if self.chunk_queue:
            w.comment("the last program out resets the queue for the next launch (acq_rel: every program's last")
            w.comment("claim is in before the reset)")
            w.line(f"finished = tl.atomic_add({queue} + 1, 1, sem=\"acq_rel\")")
            w.line("if finished == tl.num_programs(0) - 1:")
            w.depth += 1
            w.line(f"tl.atomic_xchg({queue}, 0, sem=\"relaxed\")")
            w.line(f"tl.atomic_xchg({queue} + 1, 0, sem=\"relaxed\")")
            w.depth -= 1

    def _flush(self, w):
        w.comment("every thread's hot sums have landed before any is read back")
        w.line("tl.debug_barrier()")
        w.line(f"for hot_start in range(0, {w.arg(m.size('hot_size'))}, HOT_BLOCK):")
        w.depth += 1
        w.line("hot_feature = hot_start + tl.arange(0, HOT_BLOCK)")
        w.line("in_hot = hot_feature < hot_size")
        for p in self.ir.params:
            hot_sums = w.arg(m.hot_sums(p))
            if p.vector and self.k % 2 == 0:
                self._exchange_pairs(w, hot_sums)
            else:
                row = "(hot_base + hot_feature)"
                offsets = self._vector_offsets(row) if p.vector else row
                mask = self._lane_mask("in_hot") if p.vector else "in_hot"
                shape = "[HOT_BLOCK, BLOCK_K]" if p.vector else "[HOT_BLOCK]"
                w.comment("read and zero the sums at once (an exchange of their bits: Triton's interpreter exchanges")
                w.comment("no floats), so an addition that lands late waits for the next flush")
                w.line(f"summed_bits = tl.atomic_xchg({hot_sums}.to(tl.pointer_type(tl.int32)) "
                       f"+ {offsets}, tl.zeros({shape}, tl.int32), mask={mask}, sem=\"relaxed\")")
                w.line(f"summed = tl.where({mask}, summed_bits.to(tl.float32, bitcast=True), 0.0)")
            w.comment("a hot feature this program did not touch since its last flush is left alone")
            touched = "tl.max(tl.abs(summed), axis=1) > 0.0" if p.vector else "summed != 0.0"
            w.line(f"use = in_hot & ({touched})")
            # a flush steps by the sums over a full period of flush_every chunks, a program's last (partial)
            # one too: dividing by its own chunks overweighted them and made streamed async FM diverge
            # (benchmarks/streaming.py, one launch per block)
            self._optimizer_step(w, p, "hot_feature", "use", False,
                                 f"summed * scale / {w.arg(m.size('flush_every'))}", "delta", prefix="hot_")
        w.depth -= 1
        w.comment("the sums are zero before any thread adds to them again")
        w.line("tl.debug_barrier()")

    def _exchange_pairs(self, w, hot_sums):
        """summed: the [HOT_BLOCK, BLOCK_K] sums of a vector param of even K, read and zeroed two
        factors an exchange (half the exchanges, faster; plain loads instead were faster still but left
        a worse validation logloss: BENCHMARKS' not-kept table)."""
        w.comment("read and zero the sums at once, two factors an exchange of 64 bits, so an addition that")
        w.comment("lands late waits for the next flush")
        w.line("pair = tl.arange(0, BLOCK_K // 2)")
        pairs_mask = "in_hot[:, None] & (pair[None, :] < K // 2)" if self.lane_masks else "in_hot[:, None]"
        pairs = (f"{hot_sums}.to(tl.pointer_type(tl.int64)) + (hot_base + hot_feature)[:, None] * (K // 2) "
                 "+ pair[None, :]")
        w.line(f"pair_bits = tl.atomic_xchg({pairs}, tl.zeros([HOT_BLOCK, BLOCK_K // 2], tl.int64), mask={pairs_mask}, "
               "sem=\"relaxed\")")
        w.comment("the even factor in the low 32 bits (little-endian; the cast keeps them), the odd one in the high")
        w.line("low = pair_bits.to(tl.int32).to(tl.float32, bitcast=True)")
        w.line("high = (pair_bits >> 32).to(tl.int32).to(tl.float32, bitcast=True)")
        factors = "tl.reshape(tl.join(low, high), [HOT_BLOCK, BLOCK_K])"
        w.line(f"summed = tl.where({self._lane_mask('in_hot')}, {factors}, 0.0)")

    def _update_functions(self):
        """Sync update as two device functions: the batch's step (learning rate, scale, globals and
        the hot segment) and one chunk's cold edges."""
        w = Writer()
        self._update_start(w)
        start = self._define("update_start", "The batch's learning rate and 1 / its real samples; globals and the "
                             "hot segment updated", w, ("lr", "scale"))
        w = Writer()
        self._update_chunk(w)
        doc = ("Every cold edge of a chunk adds its own change" if self.edge_updates else
               "Every touched cold feature of a chunk updated once")
        return start, self._define("update_chunk", doc, w)

    def _update_kernel(self):
        w = Writer()
        layout = {a.of: a for a in m.LAYOUT}
        for argument in (layout["edge_feature"], layout["chunk_start"], layout["chunk_width"], m.CHUNK_ORDER,
                         m.CHUNK_OFFSET, m.BATCH):
            w.arg(argument)
        start, chunk = self._update_functions()
        w.call(start)
        if self.edge_updates:
            w.line("batch_chunk = tl.program_id(0)")
        w.line("chunk = tl.load(chunk_order_ptr + chunk_offset + tl.program_id(0)).to(tl.int64)")
        w.call(chunk)
        name = f"{self.prefix}_update"
        return kernel_source(name, w, FLOW_CONSTEXPRS), KernelSpec(name, "update", ("update",), tuple(w.args))

    def _update_start(self, w):
        w.line(f"lr = tl.load({w.arg(m.LR)} + batch)")
        w.line(f"scale = tl.load({w.arg(m.SCALE)} + batch)")
        if self.ir.globals:
            w.comment("globals: plain SGD on the batch-mean gradient")
            w.line("if tl.program_id(0) == 0:")
            w.depth += 1
            for g in self.ir.globals:
                grad = w.arg(m.grad(g, is_global=True))
                pointer = w.arg(m.global_(g))
                w.line(f"g = tl.load({grad})")
                w.line(f"tl.store({grad}, 0.0)")
                w.line(f"tl.store({pointer}, tl.load({pointer}) - lr * scale * g)")
            w.depth -= 1
        if not self.hot:
            return
        touched = None if self.edge_updates else w.arg(m.TOUCHED)
        w.comment("hot segment: every program owns blocks of hot features, sums their replicas and")
        w.comment("updates the ones the batch touched" if touched else
                  "updates them all (an additive change of a zero sum is zero)")
        hot_size = w.arg(m.size("hot_size"))
        replicas = w.arg(m.size("replicas"))
        w.line(f"for hot_start in range(tl.program_id(0) * HOT_BLOCK, {hot_size}, tl.num_programs(0) * HOT_BLOCK):")
        w.depth += 1
        w.line("hot_feature = hot_start + tl.arange(0, HOT_BLOCK)")
        w.line("in_hot = hot_feature < hot_size")
        if touched:
            w.line(f"use = in_hot & (tl.load({touched} + hot_feature, mask=in_hot, other=0) == 1)")
            w.line(f"tl.store({touched} + hot_feature, tl.zeros_like(hot_feature), mask=in_hot)")
        else:
            w.line("use = in_hot")
        for p in self.ir.params:
            buffer = w.arg(m.hot_sums(p))
            mask = self._lane_mask("in_hot") if p.vector else "in_hot"
            w.line(f"summed = tl.zeros({'[HOT_BLOCK, BLOCK_K]' if p.vector else '[HOT_BLOCK]'}, tl.float32)")
            w.line(f"for replica in range(0, {replicas}):")
            w.depth += 1
            stride = w.arg(m.size("hot_stride"))
            replica_offsets = (f"(replica * {stride} + hot_feature)[:, None] * K + lanes[None, :]"
                               if p.vector else f"replica * {stride} + hot_feature")
            w.line(f"summed += tl.load({buffer} + {replica_offsets}, mask={mask}, other=0.0)")
            w.line(f"tl.store({buffer} + {replica_offsets}, tl.zeros_like(summed), mask={mask})")
            w.depth -= 1
            self._optimizer_step(w, p, "hot_feature", "use", False, "summed * scale", "new")
        w.depth -= 1

    def _update_chunk(self, w):
        """The update of one chunk's cold edges: the optimizer on every touched feature's summed
        gradient, or (edge updates) every cold edge's change, added."""
        for name in (m.LAYOUT[0], m.LAYOUT[2], m.LAYOUT[3]):
            w.arg(name)
        w.line("edge_base = tl.load(chunk_start_ptr + chunk)")
        w.line("width = tl.load(chunk_width_ptr + chunk)")
        w.line("chunk_features = edge_feature_ptr + edge_base")
        w.comment("S edge slots of the chunk's C rows at a time: an [S, C] tile of edges")
        w.line("for slot_start in range(0, width, S):")
        w.depth += 1
        self._tile_features(w, f"present = feature >= {w.arg(m.size('hot_size'))}" if self.hot
                            else "present = feature >= 0")
        if self.edge_updates:
            if self.summed_edge_updates:
                w.comment("equal features of a slot summed first: one addition per run of them, not per edge")
                self._sort_slots(w, "present", w.arg(m.size("n_features", "feature_bound")), "sorted_feature")
            for p in self.ir.params:
                offsets, mask = self._batch_edge_offsets(w, p, "present")
                w.line(f"edge_gradient = tl.load({w.arg(m.batch_edge_grad(p))} + {offsets}, "
                       f"mask={mask}, other=0.0)")
                if self.summed_edge_updates:
                    self._segment_sums(w, p, "edge_gradient", "sorted_feature")
                    self._optimizer_step(w, p, "sorted_feature", "segment_end", True, "summed * scale", "delta")
                else:
                    self._optimizer_step(w, p, "feature", "present", True, "edge_gradient * scale", "delta")
            return
        self._update_touched(w)

    def generate(self):
        plan_text = (self.variant.describe() +
                     " (chunk size, slots per step, H, R, warps and programs are launch arguments)")
        graph = build_stage_graph(self.ir)
        groups = kernel_groups(graph, self.kernels, "train")
        if self.asynchronous:
            # one persistent kernel; Update has no place in it (updates land as they are computed)
            groups = [[stage for stage in groups[0] if stage != "update"]]
        group_of = {stage: i for i, group in enumerate(groups) for stage in group}
        # chunk-local data crossing a kernel boundary goes through global memory
        local_inputs, local_outputs = {}, {}
        for producer, consumer, data in graph.edges(data=True):
            if not data["local"] or graph.nodes[consumer]["role"] != "train":
                continue
            if group_of[producer] == group_of[consumer]:
                continue
            for name in data["data"]:
                vector = self.ranks[name] == "lane"
                local_outputs.setdefault(producer, []).append((name, vector))
                local_inputs.setdefault(consumer, []).append((name, vector))
        if self.variant.grid_barrier:
            built = [self._epoch_kernel(groups, local_inputs, local_outputs)]
        else:
            built = [self._update_kernel() if group == ["update"] else
                     self._chunk_kernel("train", group, local_inputs, local_outputs) for group in groups]
        kernels, train = [source for source, _ in built], [spec for _, spec in built]
        source, predict = self._chunk_kernel("predict", ["aggregate", "predict"], {}, {})
        kernels.append(source)
        functions = [f.source for f in self.functions.values()]
        hot_constant = ("# hot features one program of the update kernel reduces at a time\n"
                        f"HOT_BLOCK = tl.constexpr({hot_block(self.block_k)})\n\n\n") if self.hot else ""
        text = module_source(self._header(plan_text), self.k, self.block_k, [*functions, *kernels], hot_constant)
        return GeneratedKernels(self.ir.name, self.ir.hash, plan_text, text, tuple(train), predict,
                                _manifest([*train, predict]),
                                tuple(p.name for p in self.ir.params if p.name in self.derived),
                                self.variant.resident_tiles)

    def _header(self, plan_text):
        """The model, its IR hash, the variant and the plan; the model's declaration (`alac inspect`
        prints the lowered programs)."""
        lines = [f"# Generated by alac from model '{self.ir.name}' (IR {self.ir.hash[:16]}); do not edit.",
                 f"# plan: {plan_text}"]
        lines += [f"# {line}" for line in self.ir.declaration_lines(derivatives=False)]
        return "\n".join(lines) + "\n"


def module_source(header, k, block_k, sources, constants=""):
    """A generated module's text: its header, Triton's imports, K and BLOCK_K (with a vector param) and
    the other constants, the triton_helpers the sources call, then the sources."""
    if k:
        constants = (f"# factors per vector param, and the power-of-two block that holds them\n"
                     f"K = tl.constexpr({k})\nBLOCK_K = tl.constexpr({block_k})\n\n\n") + constants
    return (header + "\nimport triton\nimport triton.language as tl\n\n" + constants
            + "\n\n".join([*_helpers_used(sources), *sources]))


def _helpers_used(sources):
    """The sources of the triton_helpers the given sources call, and of the helpers those call."""
    text = "\n".join(sources)
    used = []
    for helper in reversed(triton_helpers.HELPERS):
        source = textwrap.dedent(inspect.getsource(helper.fn))
        if re.search(rf"\b{helper.fn.__name__}\b", text):
            used.append(source)
            text += source
    return list(reversed(used))


def generate_kernels(ir, plan):
    return KernelGenerator(ir, plan).generate()
