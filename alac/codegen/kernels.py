"""ModelIR + plan -> the Triton source of a model's kernels.

A kernel is a group of stages from the stage graph (`alac.ir.stage_graph.kernel_groups`): the fused
flow kernel is aggregate + loss + apply in one program per chunk, with accums and deltas in
registers; the stage-based plan makes each stage a kernel and passes accums and deltas through
global memory. The update kernel applies the optimizer to a batch's accumulated gradients (the
mini-batch barrier); the predict kernel is aggregate + predict.

- Async (`plan.semantics == "async"`): one persistent kernel; program p takes chunks p, p + P, ...
  and applies its gradients at once, lock-free (additive changes are atomic additions, others are
  stored). Globals are applied before the chunk's param changes (after them the bias lagged: H100,
  val logloss 0.556 against 0.511 after 4 epochs).
- Hot segment (`plan.hot_size` H): features below H are the most frequent. Async: every program sums
  its hot gradients in its own [H] buffer and applies them every `flush_every` K chunks at
  lr / (B K) (at lr / B async LR diverged; benchmarks/flow_sweep.py). Sync: per edge slot the C
  (feature, gradient) pairs are sorted and reduced, into R replicas (`plan.replicas`).
- Derived params (`plan.derive_params`, async): a param that is its optimizer's function of its
  state (FTRL's weight) is computed where a cold edge reads it, from states read by atomic
  operations (a load may return an older value; benchmarks/not_kept.json).
- Deterministic plans: no floating-point atomics; each edge's gradient is stored at its slot and
  summed in a fixed order by alac.runtime.deterministic.
- Sync epochs (`plan.grid_barrier`): one persistent kernel runs every batch's kernel groups,
  meeting at grid-wide barriers (`triton_helpers.grid_barrier`); edge updates (`plan.edge_updates`)
  add every cold edge's change instead of flagging touched features (benchmarks/sync_breakdown.py).

Every atomic is relaxed (sums need atomicity, not ordering; kernel boundaries and barriers order
the steps), except the grid barrier's counter. Kernel names are
`alac_<model>_<ir hash[:8]>_<variant name>_<role>`.

The generator is split by concern: kernels (this module: which kernels, their loops and launches),
stages (aggregate, loss, apply, predict), param_access (every read and update of a param and its
optimizer state), writer (lines and arguments), manifest (the typed arguments the runtime binds).
"""

from __future__ import annotations

import inspect
import textwrap

from alac.codegen import manifest as m
from alac.codegen import triton_helpers
from alac.codegen.manifest import GeneratedKernels, KernelSpec
from alac.codegen.param_access import ParamAccess
from alac.codegen.printer import TRITON, ExpressionPrinter
from alac.codegen.stages import StageEmitter
from alac.codegen.writer import Writer
from alac.ir.ranks import binder_ranks
from alac.ir.stage_graph import build_stage_graph, kernel_groups
from alac.plan import next_power_of_two

# Arguments every chunk kernel takes: the layout and which chunks this launch covers.
_LAYOUT_ARGS = (*m.LAYOUT, m.LABELS, m.CHUNK_ORDER, m.CHUNK_OFFSET)
# WIDE_IDS: feature offsets in 64 bits, needed only when a param has 2**31 values or more; edge
# offsets are always 32-bit within a chunk (the chunk's 64-bit start moves the pointers once),
# which halves the registers an [S, C] tile of offsets takes (Triton 3.6 spilled at C = 32 with
# 64-bit ones: 248 registers against 198, compiled for sm_90a).
CONSTEXPRS = ("HAS_VALUES", "C", "S", "ONE_TILE", "WIDE_IDS")


# Hot features per step of the update kernel's dense pass over the hot segment: a block of 256
# float32 keeps the pass coalesced and small enough for every program count.
HOT_BLOCK = 256


def _manifest(specs):
    """Every argument of the specs' kernels once, in order of first use."""
    return tuple(dict.fromkeys(a for spec in specs if spec for a in spec.args))


class KernelGenerator(StageEmitter, ParamAccess):
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
        self.printer = ExpressionPrinter(TRITON, {}, self.ranks)
        self.params = {p.name: p for p in ir.params}
        # params computed from their optimizer state where read (async only: sync update kernels
        # store every param they update)
        self.derived = set(self.optimizer.derivable) if variant.derive_params else set()
        # async programs claim chunks from a shared queue
        self.chunk_queue = variant.chunk_queue

    def _program_constants(self, w, stages):
        w.line("rows = tl.arange(0, C)")
        if self.k:
            w.line("lanes = tl.arange(0, BLOCK_K)")
            w.line("lane_valid = lanes < K")
        hot_sums = self.hot and not self.asynchronous and "apply" in stages
        if hot_sums or (self.summed_edge_updates and "update" in stages):
            w.line("next_row = tl.minimum(rows + 1, C - 1)[None, :] + tl.zeros([S, C], tl.int32)")
        if hot_sums:
            w.line(f"replica = tl.program_id(0) % {w.arg(m.size('replicas'))}")

    def _chunk_prologue(self, w, chunk):
        w.line(f"chunk = tl.load(chunk_order_ptr + {chunk}).to(tl.int64)")
        w.line("slots = chunk * C + rows")
        w.line("valid = tl.load(row_of_slot_ptr + slots) >= 0")
        w.line("edge_base = tl.load(chunk_start_ptr + chunk)")
        w.line("width = tl.load(chunk_width_ptr + chunk)")
        w.line("chunk_features = edge_feature_ptr + edge_base")
        w.line("chunk_values = edge_value_ptr + edge_base")

    def _stages(self, w, stages, local_inputs, local_outputs):
        """The stages twice: for launches where every chunk fits one edge tile (ONE_TILE, the
        fixed-width fast path: edges and params are read once for all stages), and in tile loops."""
        w.line("if ONE_TILE:")
        w.depth += 1
        w.one_tile, w.tile_loaded, w.loaded_params = True, False, set()
        self._stage_sequence(w, stages, local_inputs, local_outputs)
        w.one_tile, w.tile_loaded, w.loaded_params = False, False, set()
        w.depth -= 1
        w.line("else:")
        w.depth += 1
        self._stage_sequence(w, stages, local_inputs, local_outputs)
        w.depth -= 1

    def _stage_sequence(self, w, stages, local_inputs, local_outputs):
        for stage in stages:
            for name, vector in local_inputs.get(stage, ()):
                self._load_rows(w, name, vector)
            {"aggregate": self._aggregate, "loss": self._loss, "apply": self._apply,
             "predict": self._predict}[stage](w)
            for name, vector in local_outputs.get(stage, ()):
                self._store_rows(w, name, vector)

    def _chunk_kernel(self, role, stages, local_inputs, local_outputs):
        w = Writer()
        for name in _LAYOUT_ARGS:
            w.arg(name)
        if self.asynchronous and role == "train":
            w.derived = frozenset(self.derived)
            w.loss_rows = True
            w.arg(m.size("n_chunks"))
            w.comment("the epoch's learning rate, and 1 / B: a sample's gradient counts as in a batch of B")
            w.line(f"lr = tl.load({w.arg(m.LR)})")
            w.line(f"scale = tl.load({w.arg(m.SCALE)})")
        self._program_constants(w, stages)
        if self.asynchronous and role == "train":
            self._persistent_loop(w, stages, local_inputs, local_outputs)
            role = "async"
        else:
            self._chunk_prologue(w, self._batch_chunks(w, persistent=False) if role == "train"
                                 else "chunk_offset + tl.program_id(0)")
            self._stages(w, stages, local_inputs, local_outputs)
        name = f"{self.prefix}_{'_'.join(stages) if role == 'train' else role}"
        return self._function(name, w), KernelSpec(name, role, tuple(stages), tuple(w.args))

    def _persistent_loop(self, w, stages, local_inputs, local_outputs):
        """Async: programs take the epoch's chunk-order positions from a shared queue until it runs
        out (or, without the queue, chunks pid, pid + P, ...); with a hot segment, every flush_every
        chunks (and after its last) a program applies its hot-gradient sums."""
        if self.chunk_queue:
            queue = w.arg(m.QUEUE)
            claim = f"chunk_offset + tl.atomic_add({queue}, 1, sem=\"relaxed\")"
            w.comment("persistent: each program claims the next position of the epoch's chunk order until none")
            w.comment("is left, so the programs finish within about a chunk of each other")
            w.line(f"position = {claim}")
        else:
            w.comment("persistent: this program takes chunks pid, pid + P, ... of the epoch's queue")
            w.line("first = chunk_offset + tl.program_id(0)")
            w.line("my_chunks = tl.cdiv(tl.maximum(n_chunks - first, 0), tl.num_programs(0))")
        if self.hot:
            w.comment("this program's own [H] sums of hot gradients")
            w.line(f"hot_base = tl.program_id(0).to(tl.int64) * {w.arg(m.size('hot_stride'))}")
        w.comment("the loss, summed per row; added to the epoch's total once, at the end")
        w.line("loss_rows = tl.zeros([C], tl.float32)")
        if self.chunk_queue:
            w.line("step = 0")
            w.line("while position < n_chunks:")
            w.depth += 1
            w.comment("claim the next position now: the claim's round trip overlaps this chunk")
            w.line(f"next_position = {claim}")
            last = "next_position >= n_chunks"
        else:
            w.line("for step in range(0, my_chunks):")
            w.depth += 1
            w.line("position = first + step * tl.num_programs(0)")
            last = "step + 1 == my_chunks"
        self._chunk_prologue(w, "position")
        self._stages(w, stages, local_inputs, local_outputs)
        if self.hot:
            w.comment("flush the hot sums every flush_every chunks, and after the program's last")
            w.line(f"if ((step + 1) % {w.arg(m.size('flush_every'))} == 0) | ({last}):")
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
        w.comment("the chunks since the last flush: flush_every, or fewer at a program's last flush")
        w.line(f"chunks_summed = step % {w.arg(m.size('flush_every'))} + 1")
        w.comment("every thread's hot sums have landed before any is read back")
        w.line("tl.debug_barrier()")
        w.line("for hot_start in range(0, hot_size, HOT_BLOCK):")
        w.depth += 1
        w.line("hot_feature = hot_start + tl.arange(0, HOT_BLOCK)")
        w.line("in_hot = hot_feature < hot_size")
        for p in self.ir.params:
            row = "(hot_base + hot_feature)"
            offsets = self._vector_offsets(row) if p.vector else row
            mask = self._lane_mask("in_hot") if p.vector else "in_hot"
            shape = "[HOT_BLOCK, BLOCK_K]" if p.vector else "[HOT_BLOCK]"
            w.comment("read and zero the sums at once (an exchange of their bits: Triton's interpreter exchanges")
            w.comment("no floats), so an addition that lands late waits for the next flush")
            hot_sums = w.arg(m.hot_sums(p))
            w.line(f"summed_bits = tl.atomic_xchg({hot_sums}.to(tl.pointer_type(tl.int32)) "
                   f"+ {offsets}, tl.zeros({shape}, tl.int32), mask={mask}, sem=\"relaxed\")")
            w.line(f"summed = tl.where({mask}, summed_bits.to(tl.float32, bitcast=True), 0.0)")
            w.comment("a hot feature this program did not touch since its last flush is left alone")
            touched = "tl.max(tl.abs(summed), axis=1) > 0.0" if p.vector else "summed != 0.0"
            w.line(f"use = in_hot & ({touched})")
            self._optimizer_step(w, p, "hot_feature", "use", False, "summed * scale / chunks_summed", "delta",
                                 prefix="hot_")
        w.depth -= 1
        w.comment("the sums are zero before any thread adds to them again")
        w.line("tl.debug_barrier()")

    def _update_kernel(self):
        w = Writer()
        layout = {a.of: a for a in m.LAYOUT}
        for argument in (layout["edge_feature"], layout["chunk_start"], layout["chunk_width"], m.CHUNK_ORDER,
                         m.CHUNK_OFFSET, m.BATCH):
            w.arg(argument)
        self._program_constants(w, ("update",))
        self._update(w, persistent=False)
        name = f"{self.prefix}_update"
        return self._function(name, w), KernelSpec(name, "update", ("update",), tuple(w.args))

    def _batch_chunks(self, w, persistent):
        """The chunk-order position of a chunk this program takes in the batch: the one chunk of a
        per-batch launch, or (persistent) chunks batch_start + pid, + P, ... in a loop it opens.
        With edge updates, batch_chunk is the chunk's index within the batch."""
        if not persistent:
            if self.edge_updates:
                w.line("batch_chunk = tl.program_id(0)")
                w.arg(m.size("chunk_edges"))
            return "chunk_offset + tl.program_id(0)"
        w.line("for position in range(batch_start + tl.program_id(0), batch_end, tl.num_programs(0)):")
        w.depth += 1
        if self.edge_updates:
            w.line("batch_chunk = position - batch_start")
            w.arg(m.size("chunk_edges"))
        return "position"

    def _update(self, w, persistent):
        """The update stage of batch `batch`: the optimizer on every touched feature's summed gradient
        (edge updates: every cold edge's change, added)."""
        w.comment("the batch's learning rate, and 1 / its real samples (the gradient sums become means)")
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
        touched = None if self.edge_updates else w.arg(m.TOUCHED)
        if self.hot:
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
                mask = "in_hot[:, None] & lane_valid[None, :]" if p.vector else "in_hot"
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
        if self.edge_updates:
            w.comment("every cold edge of the batch adds its own change (the optimizer's change is linear in")
            w.comment("the gradient: the changes sum to the change of the batch's summed gradient)")
        else:
            w.comment("every touched cold feature once: the first of its edges to swap its touched flag out")
            w.comment("(atomic exchange with 0) applies the optimizer to the batch's summed gradient")
        depth = w.depth
        position = self._batch_chunks(w, persistent)
        w.line(f"chunk = tl.load(chunk_order_ptr + {position}).to(tl.int64)")
        w.line("edge_base = tl.load(chunk_start_ptr + chunk)")
        w.line("width = tl.load(chunk_width_ptr + chunk)")
        w.line("chunk_features = edge_feature_ptr + edge_base")
        self._edge_loop_header(w, load_values=False)
        w.line(f"present = feature >= {w.arg(m.size('hot_size'))}" if self.hot else "present = feature >= 0")
        w.line("feature = tl.where(present, feature, 0)")
        w.line("if WIDE_IDS:")
        w.line("    feature = feature.to(tl.int64)")
        if self.edge_updates:
            if self.summed_edge_updates:
                w.comment("equal features of a slot summed first: one addition per run of them, not per edge")
                self._sort_slots(w, "present", w.arg(m.size("n_features", "feature_bound")), "sorted_feature")
            for p in self.ir.params:
                offsets, mask = self._batch_edge_offsets(p, "present")
                w.line(f"edge_gradient = tl.load({w.arg(m.batch_edge_grad(p))} + {offsets}, "
                       f"mask={mask}, other=0.0)")
                if self.summed_edge_updates:
                    self._segment_sums(w, p, "edge_gradient", "sorted_feature")
                    self._optimizer_step(w, p, "sorted_feature", "segment_end", True, "summed * scale", "delta")
                else:
                    self._optimizer_step(w, p, "feature", "present", True, "edge_gradient * scale", "delta")
            w.depth = depth
            return
        w.line(f"first = present & (tl.atomic_xchg({touched} + feature, 0, mask=present, sem=\"relaxed\") == 1)")
        for p in self.ir.params:
            grad = w.arg(m.grad(p.name, p.vector))
            offsets = self._vector_offsets("feature", True) if p.vector else "feature"
            mask = self._lane_mask("first", True) if p.vector else "first"
            w.line(f"summed = tl.load({grad} + {offsets}, mask={mask}, other=0.0)")
            w.line(f"tl.store({grad} + {offsets}, tl.zeros_like(summed), mask={mask})")
            self._optimizer_step(w, p, "feature", "first", True, "summed * scale", "new")
        w.depth = depth

    def _epoch_kernel(self, groups, local_inputs, local_outputs):
        """Sync, one launch per epoch: P resident programs run every batch's kernel groups in order,
        each on chunks pid, pid + P, ... of the batch, and meet at a grid-wide barrier after each
        group, where the per-batch launches had a kernel boundary."""
        w = Writer()
        for name in _LAYOUT_ARGS:
            w.arg(name)
        w.arg(m.size("n_chunks"))
        w.arg(m.size("chunks_per_batch"))
        arrivals = w.arg(m.ARRIVALS)
        w.loss_rows = True
        self._program_constants(w, [stage for group in groups for stage in group])
        w.comment("the loss, summed per row; added to the epoch's total once, at the end")
        w.line("loss_rows = tl.zeros([C], tl.float32)")
        w.comment("barriers passed so far: the arrival count grows by P at each")
        w.line("barriers = 0")
        w.line("for batch in range(0, tl.cdiv(n_chunks - chunk_offset, chunks_per_batch)):")
        w.depth += 1
        w.line("batch_start = chunk_offset + batch * chunks_per_batch")
        w.line("batch_end = tl.minimum(batch_start + chunks_per_batch, n_chunks)")
        for group in groups:
            if group == ["update"]:
                self._update(w, persistent=True)
            else:
                depth = w.depth
                self._chunk_prologue(w, self._batch_chunks(w, persistent=True))
                self._stages(w, group, local_inputs, local_outputs)
                w.depth = depth
            w.comment(f"every program's {' + '.join(group)} of this batch has landed before any program goes on")
            w.line("barriers += 1")
            w.line(f"grid_barrier({arrivals}, barriers * tl.num_programs(0))")
        w.depth -= 1
        w.line(f"tl.atomic_add({w.arg(m.LOSS_SUM)}, tl.sum(loss_rows, axis=0), sem=\"relaxed\")")
        name = f"{self.prefix}_epoch"
        return self._function(name, w), KernelSpec(name, "epoch", tuple(s for g in groups for s in g), tuple(w.args))

    def _function(self, name, w):
        declared = [a.name for a in w.args] + [f"{c}: tl.constexpr" for c in CONSTEXPRS]
        signature = ",\n".join(f"    {a}" for a in declared)
        body = "\n".join(w.lines)
        return f"@triton.jit\ndef {name}(\n{signature},\n):\n{body}\n"

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
        ranks = self.ranks
        for producer, consumer, data in graph.edges(data=True):
            if not data["local"] or graph.nodes[consumer]["role"] != "train":
                continue
            if group_of[producer] == group_of[consumer]:
                continue
            for name in data["data"]:
                vector = ranks[name] == "lane"
                local_outputs.setdefault(producer, []).append((name, vector))
                local_inputs.setdefault(consumer, []).append((name, vector))
        functions, train = [], []
        for group in groups:
            if group == ["update"]:
                source, spec = self._update_kernel()
            else:
                source, spec = self._chunk_kernel("train", group, local_inputs, local_outputs)
            functions.append(source)
            train.append(spec)
        epoch = None
        if self.variant.grid_barrier:
            # besides the per-batch kernels (single batches, per-batch decays)
            source, epoch = self._epoch_kernel(groups, local_inputs, local_outputs)
            functions.append(source)
        source, predict = self._chunk_kernel("predict", ["aggregate", "predict"], {}, {})
        functions.append(source)
        header = self._header(plan_text)
        helpers = "\n\n".join(textwrap.dedent(inspect.getsource(h.fn)) for h in triton_helpers.HELPERS)
        if (self.hot and not self.asynchronous) or self.summed_edge_updates:
            helpers += "\n\n" + textwrap.dedent(inspect.getsource(triton_helpers.segment_sum.fn))
        if self.variant.grid_barrier:
            helpers += "\n\n" + textwrap.dedent(inspect.getsource(triton_helpers.grid_barrier.fn))
        block_k = (f"# factors per vector param, and the power-of-two block that holds them\n"
                   f"K = tl.constexpr({self.k})\nBLOCK_K = tl.constexpr({self.block_k})\n\n\n") if self.k else ""
        if self.hot:
            block_k += ("# hot features one program of the update kernel reduces at a time\n"
                        f"HOT_BLOCK = tl.constexpr({HOT_BLOCK})\n\n\n")
        text = (header + "\nimport triton\nimport triton.language as tl\n\n" + block_k
                + helpers + "\n\n\n" + "\n\n".join(functions))
        return GeneratedKernels(self.ir.name, self.ir.hash, plan_text, text, tuple(train), predict,
                                _manifest([*train, predict, epoch]),
                                tuple(p.name for p in self.ir.params if p.name in self.derived),
                                epoch)

    def _header(self, plan_text):
        lines = [f"# Generated by alac from model '{self.ir.name}' (IR {self.ir.hash[:16]}); do not edit.",
                 f"# plan: {plan_text}",
                 "#"]
        lines += [f"# {line}" for line in self.ir.lines()]
        return "\n".join(lines) + "\n"


def generate_kernels(ir, plan):
    return KernelGenerator(ir, plan).generate()
