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
the steps), except the grid barrier's counter. Kernel names are `alac_<model>_<ir hash[:8]>_<role>`.
"""

from __future__ import annotations

import inspect
import textwrap
from dataclasses import dataclass, field

from alac.codegen import manifest as m
from alac.codegen import triton_helpers
from alac.codegen.printer import TRITON, ExpressionPrinter, rank_of
from alac.ir.model_ir import LOSS, PREDICTION, grad_name, l2_name
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


@dataclass(frozen=True)
class KernelSpec:
    name: str
    role: str          # "train" (one per group, in launch order), "update", "async" or "predict"
    stages: tuple
    args: tuple        # manifest.Arguments, in order; CONSTEXPRS follow as keywords


@dataclass(frozen=True)
class GeneratedKernels:
    model: str
    ir_hash: str
    plan_text: str
    source: str
    train: tuple       # sync: KernelSpecs launched per batch, in order (the last is the update);
                       # async: the one persistent kernel, launched once per epoch
    predict: KernelSpec
    manifest: tuple = field(default=())  # every manifest.Argument of the module's kernels, once
    derived_params: tuple = ()           # params the kernels compute from their state, never store
    epoch: KernelSpec | None = None      # sync with grid barriers: the whole epoch in one launch


class _Writer:
    def __init__(self):
        self.lines = []
        self.args = []
        self.depth = 1
        # params this kernel computes from their optimizer state (async train kernel only: the
        # predict kernel reads the params the runtime wrote after the epoch)
        self.derived = frozenset()
        # one-tile code: the chunk's edges are loaded once, with the params already gathered
        self.one_tile = False
        self.tile_loaded = False
        self.loaded_params = set()
        # persistent kernels sum the loss per row in registers and add it to the total once, at the end
        self.loss_rows = False

    def arg(self, argument):
        """Declare a manifest.Argument of the kernel; returns its name in the source."""
        if argument not in self.args:
            assert all(a.name != argument.name for a in self.args), f"two descriptions of {argument.name}"
            self.args.append(argument)
        return argument.name

    def line(self, text=""):
        self.lines.append(("    " * self.depth + text) if text else "")

    def comment(self, text):
        self.line(f"# {text}")


def _is_zero(program, name):
    return next(d.expr for d in program if d.name == name) == 0


def _state_variable(prefix, state):
    """The variable holding an optimizer state's values in generated code."""
    return f"{prefix}state_{state}"


def _manifest(specs):
    """Every argument of the specs' kernels once, in order of first use."""
    return tuple(dict.fromkeys(a for spec in specs if spec for a in spec.args))


def _live(program, outputs):
    """The definitions of program that outputs need, in order."""
    needed = set(outputs)
    kept = []
    for d in reversed(program):
        if d.name in needed:
            kept.append(d)
            needed |= {s.name for s in d.expr.free_symbols}
    return tuple(reversed(kept))


class KernelGenerator:
    def __init__(self, ir, plan):
        self.ir = ir
        self.optimizer = ir.optimizer
        self.plan = plan
        self.kernels = plan.kernels
        self.hot = plan.hot_size > 0
        self.asynchronous = plan.semantics == "async"
        self.deterministic = plan.deterministic
        # sync with an additive optimizer (SGD): the apply stage keeps every cold edge's gradient in
        # a per-batch edge buffer and the update stage adds each edge's change to its param, instead
        # of flagging touched features and updating each once (`Plan.edge_updates`)
        self.edge_updates = plan.uses_edge_updates and self.optimizer.additive
        # ... summing a chunk's equal features per slot first (`Plan.sum_equal_edges`)
        self.summed_edge_updates = plan.sums_equal_edges and self.optimizer.additive
        self.prefix = f"alac_{ir.name}_{ir.hash[:8]}"
        self.k = ir.factor_size
        self.block_k = next_power_of_two(self.k) if self.k else 0
        self.ranks = self._ranks()
        self.printer = ExpressionPrinter(TRITON, {}, self.ranks)
        self.params = {p.name: p for p in ir.params}
        self.param_vector = {p.name: p.vector for p in ir.params}
        # params computed from their optimizer state where read (async only: sync update kernels
        # store every param they update)
        self.derived = set(self.optimizer.derivable) if self.asynchronous and plan.derive_params else set()
        # async programs claim chunks from a shared queue (`Plan.chunk_queue`)
        self.chunk_queue = self.asynchronous and plan.chunk_queue

    def _ranks(self):
        # edge values are [S, C] tiles (S slots of the chunk's C rows) in every edge loop
        ranks = {"x": "edge", "y": "row"}
        for p in self.ir.params:
            ranks[p.name] = "edge_lane" if p.vector else "edge"
            ranks[l2_name(p.name)] = "uniform"
        for a in self.ir.accums:
            ranks[a.name] = "lane" if a.vector else "row"
        for g in self.ir.globals:
            ranks[g] = "uniform"
        for program in (self.ir.sample_program, self.ir.predict_program, self.ir.edge_program):
            for d in program:
                rank = rank_of(d.expr, ranks)
                is_output = not d.name.startswith("t")
                ranks[d.name] = "row" if is_output and rank == "uniform" else rank
        return ranks

    # --- pieces of code ---------------------------------------------------------------------

    @staticmethod
    def _vector_offsets(ids, edge=False):
        """Offsets of the K factors of every id: ids is a [C] block, or an [S, C] tile when edge."""
        return f"{ids}[:, :, None] * K + lanes" if edge else f"{ids}[:, None] * K + lanes[None, :]"

    @staticmethod
    def _lane_mask(mask, edge=False):
        return f"{mask}[:, :, None] & lane_valid" if edge else f"{mask}[:, None] & lane_valid[None, :]"

    def _load_param(self, w, name):
        if name in w.loaded_params:
            return
        if w.one_tile:
            w.loaded_params.add(name)
        if name in w.derived:
            p = next(p for p in self.ir.params if p.name == name)
            edges, variable = "present", name
            if self.hot:
                w.comment(f"{name}: stored for hot features (their flushes store it), {self.optimizer.name}'s function")
                w.comment("of its state for cold ones (computed here, never stored)")
                w.line(f"cold_{name} = present & (feature >= {w.arg(m.size('hot_size'))})")
                edges, variable = f"cold_{name}", f"derived_{name}"
            else:
                w.comment(f"{name} is {self.optimizer.name}'s function of its state: computed here, never stored")
            ranks, names, targets, _ = self._update_symbols(w, p, "feature", edges, True, f"{name}_")
            self._derive(w, p, ranks, names, targets, variable, set(), f"{name}_")
            if self.hot:
                offsets = self._vector_offsets("feature", True) if p.vector else "feature"
                hot, cold = f"present & ~cold_{name}", f"cold_{name}"
                if p.vector:
                    hot, cold = self._lane_mask(f"({hot})", True), self._lane_mask(cold, True)
                # past L1: other programs' flushes store it, and an SM's L1 keeps its old lines
                stored = w.arg(m.param(p))
                w.line(f"{name} = tl.where({cold}, derived_{name}, tl.load({stored} + {offsets}, "
                       f"mask={hot}, other=0.0, cache_modifier=\".cg\"))")
            return
        pointer = w.arg(m.param(self.params[name]))
        if self.param_vector[name]:
            w.line(f"{name} = tl.load({pointer} + {self._vector_offsets('feature', True)}, "
                   f"mask={self._lane_mask('present', True)}, other=0.0)")
        else:
            w.line(f"{name} = tl.load({pointer} + feature, mask=present, other=0.0)")

    def _edge_loop_header(self, w, load_values=True):
        """Open the loop over the chunk's [S, C] edge tiles; in one-tile code, load the one tile
        (once per kernel). Returns whether a loop was opened."""
        if w.one_tile:
            if w.tile_loaded:
                return False
            w.comment("every row fits one [S, C] tile of edges: load it once for all stages")
            w.line("slot = tl.arange(0, S)")
        else:
            w.comment("S edge slots of the chunk's C rows at a time: an [S, C] tile of edges")
            w.line("for slot_start in range(0, width, S):")
            w.depth += 1
            w.line("slot = slot_start + tl.arange(0, S)")
        w.line("edge = slot[:, None] * C + rows[None, :]")
        if load_values:
            w.line("feature, present, x = load_edges(chunk_features, chunk_values, edge, slot[:, None] < width, "
                   "HAS_VALUES, WIDE_IDS)")
        else:
            w.line("feature = tl.load(chunk_features + edge, mask=slot[:, None] < width, other=-1)")
        w.tile_loaded = w.one_tile
        return not w.one_tile

    def _program(self, w, program, mask_outputs=False):
        for d in program:
            rank = self.ranks[d.name]
            text = self.printer(d.expr, rank)
            if mask_outputs and not d.name.startswith("t"):
                text = f"tl.where(valid{'[:, None]' if rank == 'lane' else ''}, {text}, 0.0)"
            w.line(f"{d.name} = {text}")

    def _used_params(self, exprs):
        names = {s.name for e in exprs for s in e.free_symbols}
        return [p.name for p in self.ir.params if p.name in names]

    def _store_rows(self, w, name, vector):
        pointer = w.arg(m.stage_rows(name, vector))
        if vector:
            w.line(f"tl.store({pointer} + {self._vector_offsets('slots')}, {name}, mask=lane_valid[None, :])")
        else:
            w.line(f"tl.store({pointer} + slots, {name})")

    def _load_rows(self, w, name, vector):
        pointer = w.arg(m.stage_rows(name, vector))
        if vector:
            w.line(f"{name} = tl.load({pointer} + {self._vector_offsets('slots')}, "
                   f"mask=lane_valid[None, :], other=0.0)")
        else:
            w.line(f"{name} = tl.load({pointer} + slots)")

    # --- stages --------------------------------------------------------------------------------

    def _aggregate(self, w):
        w.comment("aggregate: every edge adds its contribution to its sample's accums (registers)")
        if not w.one_tile:
            for a in self.ir.accums:
                shape = "[C, BLOCK_K]" if a.vector else "[C]"
                w.line(f"{a.name} = tl.zeros({shape}, tl.float32)")
        looped = self._edge_loop_header(w)
        for name in self._used_params([a.contribution for a in self.ir.accums]):
            self._load_param(w, name)
        for a in self.ir.accums:
            rank = "edge_lane" if a.vector else "edge"
            mask = "present[:, :, None]" if a.vector else "present"
            total = f"tl.sum(tl.where({mask}, {self.printer(a.contribution, rank)}, 0.0), axis=0)"
            w.line(f"{a.name} += {total}" if looped else f"{a.name} = {total}")
        if looped:
            w.depth -= 1

    def _loss(self, w):
        w.comment("loss: per-sample loss and dLoss/dAccum, computed in place; padding rows give 0")
        w.line(f"y = tl.load({w.arg(m.LABELS)} + slots)")
        for g in self.ir.globals:
            w.line(f"{g} = tl.load({w.arg(m.global_(g))})")
        self._program(w, self.ir.sample_program, mask_outputs=True)
        if self.deterministic:
            w.comment("deterministic: the chunk's sums go to its own slots; the runtime adds them in order")
            w.line(f"tl.store({w.arg(m.CHUNK_LOSS)} + chunk, tl.sum({LOSS}, axis=0))")
            for d in self.ir.global_grads:
                w.line(f"tl.store({w.arg(m.chunk_grad(d.name[3:]))} + chunk, tl.sum({d.name}, axis=0))")
            return
        if w.loss_rows:
            w.line(f"loss_rows += {LOSS}")
        else:
            w.line(f"tl.atomic_add({w.arg(m.LOSS_SUM)}, tl.sum({LOSS}, axis=0), sem=\"relaxed\")")
        if self.asynchronous:
            for d in self.ir.global_grads:
                w.line(f"tl.atomic_add({w.arg(m.global_(d.name[3:]))}, -lr * scale * tl.sum({d.name}, axis=0), "
                       "sem=\"relaxed\")")
            return
        for d in self.ir.global_grads:
            accumulator = w.arg(m.grad(d.name[3:], is_global=True))
            w.line(f"tl.atomic_add({accumulator}, tl.sum({d.name}, axis=0), sem=\"relaxed\")")

    def _apply(self, w):
        if self.asynchronous:
            w.comment("apply: every edge's gradient (x 1/B) through the optimizer, straight into the parameters")
        elif self.edge_updates:
            w.comment("apply: per-edge gradients, kept at the edge's slot of the batch's edge buffer for the update")
        else:
            w.comment("apply: per-edge gradients, added into the batch's gradient accumulators")
        looped = self._edge_loop_header(w)
        exprs = [d.expr for d in self.ir.edge_program]
        for name in self._used_params(exprs):
            self._load_param(w, name)
        for p in self.ir.params:
            w.arg(m.regularizer("gradient_l2", p.name))
        self._program(w, self.ir.edge_program)
        if not self.asynchronous and not self.edge_updates:
            w.line(f"tl.store({w.arg(m.TOUCHED)} + feature, tl.full([S, C], 1, tl.int32), mask=present)")
        if self.hot:
            w.line(f"hot = present & (feature < {w.arg(m.size('hot_size'))})")
            w.line("cold = present & ~hot")
        if self.hot and not self.asynchronous:
            w.comment("hot edges: sort the slot's (feature, row) pairs so that equal features are adjacent")
            self._sort_slots(w, "hot", w.arg(m.size("hot_size")), "hot_feature")
        for p in self.ir.params:
            self._scatter(w, p)
        if looped:
            w.depth -= 1

    def _scatter(self, w, p):
        """Route one param's per-edge gradients (module docstring): sync adds them into the batch's
        accumulators, async applies the optimizer's change at once."""
        value = grad_name(p.name)
        edges = "cold" if self.hot else "present"
        if self.asynchronous:
            self._optimizer_step(w, p, "feature", edges, True, f"{value} * scale", "delta",
                                 param_loaded=p.name in self._used_params([d.expr for d in self.ir.edge_program])
                                 or p.name in w.loaded_params)
        elif self.deterministic:
            offsets = "edge_base * K + edge[:, :, None] * K + lanes" if p.vector else "edge_base + edge"
            mask = self._lane_mask("present", True) if p.vector else "present"
            w.line(f"tl.store({w.arg(m.edge_grad(p))} + {offsets}, {value}, mask={mask})")
            return
        elif self.edge_updates:
            offsets, mask = self._batch_edge_offsets(p, edges)
            w.line(f"tl.store({w.arg(m.batch_edge_grad(p))} + {offsets}, {value}, mask={mask})")
        else:
            self._add_at(w, p, m.grad(p.name, p.vector), "feature", value, edges)
        if not self.hot:
            return
        if self.asynchronous:
            w.comment("hot edges: into this program's own sums (no other program adds there), "
                      "applied at its next flush")
            self._add_at(w, p, m.hot_sums(p), "(hot_base + feature)", value, "hot")
            return
        self._segment_sums(w, p, value, "hot_feature")
        self._add_at(w, p, m.hot_sums(p), f"(replica * {w.arg(m.size('hot_stride'))} + hot_feature)", "summed",
                     "segment_end")

    @staticmethod
    def _sort_slots(w, selected, bound, sorted_feature):
        """Sort every slot's C (feature, row) pairs by feature, edges outside selected last (as
        bound, which exceeds every selected feature): sorted_feature, the permutation that sorts
        the slot's rows, and segment_end, the last edge of every run of one selected feature."""
        w.line(f"order = tl.sort(tl.where({selected}, feature.to(tl.int64), {bound}) * C + rows, 1)")
        w.line(f"{sorted_feature} = order // C")
        w.line("permutation = (order % C).to(tl.int32)")
        w.line(f"segment_end = ({sorted_feature} != tl.gather({sorted_feature}, next_row, 1)) | (rows == C - 1)")
        w.line(f"segment_end = segment_end & ({sorted_feature} < {bound})")

    @staticmethod
    def _segment_sums(w, p, value, sorted_feature):
        """summed: value (an edge tile of p) summed over every run of one feature that _sort_slots
        found, the run's sum at its last edge."""
        if p.vector:
            w.line("spread = tl.zeros([S, C, BLOCK_K], tl.int32)")
            w.line(f"sorted_value = tl.gather({value}, permutation[:, :, None] + spread, 1)")
            w.line(f"key = {sorted_feature}[:, :, None] + spread")
        else:
            w.line(f"sorted_value = tl.gather({value}, permutation, 1)")
            w.line(f"key = {sorted_feature}")
        w.line("key, summed = tl.associative_scan((key, sorted_value), 1, segment_sum)")

    def _batch_edge_offsets(self, p, mask):
        """Offsets and mask of the current [S, C] edge tile in a per-batch edge buffer (chunk
        batch_chunk of the batch, chunk_edges slots per chunk)."""
        slot = "(batch_chunk * chunk_edges + edge)"
        return ((self._vector_offsets(slot, True), self._lane_mask(mask, True)) if p.vector else (slot, mask))

    def _add_at(self, w, p, pointer, rows, value, mask):
        """Atomically add an [S, C] tile of p's values (times its K lanes for a vector param) at the
        given rows of the buffer behind pointer."""
        offsets = self._vector_offsets(rows, True) if p.vector else rows
        mask = self._lane_mask(mask, True) if p.vector else mask
        w.line(f"tl.atomic_add({w.arg(pointer)} + {offsets}, {value}, mask={mask}, sem=\"relaxed\")")

    def _update_symbols(self, w, p, ids, mask, edge, prefix):
        """Ranks and variable names of the optimizer's symbols for param p at feature ids (an [S, C]
        tile when edge, else a block), (pointer argument, offsets, mask) of each of its states (the
        caller declares the arguments it uses), and (offsets, mask) of p's own values there."""
        lane_rank, row_rank = ("edge_lane", "edge") if edge else ("lane", "row")
        full_rank = lane_rank if p.vector else row_rank
        ranks = {"p": full_rank, "g": full_rank, "lr": "uniform", "l1": "uniform", "l2": "uniform", "K": "uniform"}
        ranks.update({f"h_{h}": "uniform" for h in self.optimizer.hypers})
        names = {"p": f"{prefix}value", "g": f"{prefix}g",
                 "l1": w.arg(m.regularizer("update_l1", p.name)) if self.optimizer.has_l1 else "0.0",
                 "l2": m.regularizer("update_l2", p.name).name,
                 "lr": "lr"}
        full_offsets = self._vector_offsets(ids, edge) if p.vector else ids
        full_mask = self._lane_mask(mask, edge) if p.vector else mask
        targets = {}
        for state, _, row in self.optimizer.states:
            per_row = row and p.vector
            ranks[f"s_{state}"] = row_rank if (row or not p.vector) else lane_rank
            names[f"s_{state}"] = _state_variable(prefix, state)
            targets[state] = (m.state(p, state, row), ids if per_row else full_offsets,
                              mask if per_row else full_mask)
        return ranks, names, targets, (full_offsets, full_mask)

    def _derive(self, w, p, ranks, names, targets, variable, loaded, prefix):
        """Load the states p's derivation reads (those not in loaded, which it extends) and compute p
        into variable; its temps are named with prefix."""
        program = self.optimizer.for_param(p).derived
        self._use_arguments(w, p, program)
        reads = {s.name for d in program for s in d.expr.free_symbols}
        # The states are read by atomic additions of 0, not loads: an atomic operation sees the
        # latest value of its address, a load (even past L1, .cg or volatile) may see an older one,
        # and a stale z beside a fresh n derives a weight no update produced. H100, async FTRL LR,
        # 200k rows with 7 other processes on the GPU: first-epoch loss 0.60-0.71 with .cg loads,
        # 0.562 with atomic reads (stored weights 0.56-0.63); 4M rows: 9.1 against 8.7 ms per epoch.
        for state, (target, offsets, target_mask) in targets.items():
            if f"s_{state}" in reads and state not in loaded:
                w.line(f"{names[f's_{state}']} = tl.where({target_mask}, tl.atomic_add({w.arg(target)} + {offsets}, "
                       f"0.0, mask={target_mask}, sem=\"relaxed\"), 0.0)")
                loaded.add(state)
        for d in program:
            ranks[d.name] = rank_of(d.expr, ranks)
            names[d.name] = variable if d.name == "derived_p" else f"{prefix}{d.name}"
        printer = ExpressionPrinter(TRITON, names, ranks)
        for d in program:
            w.line(f"{names[d.name]} = {printer(d.expr, ranks[d.name])}")

    def _use_arguments(self, w, p, program):
        used = {symbol.name for d in program for symbol in d.expr.free_symbols}
        if "l2" in used:
            w.arg(m.regularizer("update_l2", p.name))
        for h in self.optimizer.hypers:
            if f"h_{h}" in used:
                w.arg(m.hyper(h))
        return used

    def _optimizer_step(self, w, p, ids, mask, edge, gradient, mode, param_loaded=False, prefix=""):
        """The optimizer's rule for param p at feature ids (an [S, C] tile when edge, else a block):
        mode "new" stores the new values (sync update), "delta" adds new - old atomically (async).
        param_loaded: the tile's values of p are already in a variable named after p (async apply
        reuses them instead of a second gather). prefix: for the variables it defines, where a
        loop would otherwise re-assign a chunk's tile-shaped ones with block-shaped values.
        A derived param (async, `Plan.derive_params`) is computed from its state, and only its
        state's changes are applied; the hot flush (not edge) derives its old value too but stores the
        new one, which hot edges read (see _load_param)."""
        update = self.optimizer.for_param(p)
        program = update.deltas if mode == "delta" else update.program
        derived = mode == "delta" and p.name in w.derived
        stored = not (derived and edge)
        ranks, names, targets, (full_offsets, full_mask) = self._update_symbols(w, p, ids, mask, edge, prefix)
        if not stored:
            program = _live(program, [d.name for d in program if d.name.startswith(("delta_s_", "new_s_"))])
        for d in program:
            ranks[d.name] = rank_of(d.expr, ranks)
            names[d.name] = prefix + d.name
        # the printer reads names as they are when it prints: the renames below take effect
        printer = ExpressionPrinter(TRITON, names, ranks)
        used = self._use_arguments(w, p, program)
        w.comment(f"{self.optimizer.name} on {p.name}" + (" (the change, added atomically)" if mode == "delta" else ""))
        w.line(f"{names['g']} = {gradient}")
        pointer = w.arg(m.param(p)) if stored else None
        for target, _, _ in targets.values():
            w.arg(target)
        defined = {d.name for d in program}
        loaded = set()
        if derived and param_loaded:
            # _load_param derived p with prefix "<p>_": its states are in those variables
            names["p"] = p.name
            reads = {s.name for d in update.derived for s in d.expr.free_symbols}
            for state in targets:
                if f"s_{state}" in reads:
                    names[f"s_{state}"] = _state_variable(f"{p.name}_", state)
                    loaded.add(state)
        elif derived:
            # The flush's old value too: a stored copy may be older than the state (another
            # program's flush stored it from an earlier one), and z then grew past its weight
            # (H100, async FTRL LR, 8 processes sharing the GPU: 5 of 24 runs ended at training loss
            # 0.437-0.477 against 0.430; 0 of 24 derived here).
            self._derive(w, p, ranks, names, targets, names["p"], loaded, prefix)
        elif "p" in used or "new_p" in defined:
            w.line(f"{names['p']} = {p.name}" if param_loaded else
                   f"{names['p']} = tl.load({pointer} + {full_offsets}, mask={full_mask}, other=0.0)")
        added = [st for st in targets if f"new_s_{st}" not in defined and not _is_zero(program, f"delta_s_{st}")]
        if derived:
            # A state the changes read is fetched by its own addition even though the derivation
            # loaded it: the value returned is the one this addition follows, so concurrent changes
            # chain like sequential ones. With the loaded value FTRL's sigma terms of P concurrent
            # updates sum sqrt(n + g_i^2) - sqrt(n) over i instead of telescoping to the true change
            # of sqrt(n), z outgrows beta + sqrt(n), and async LR diverged (validation logloss 6.9
            # on H100). The other states' changes go out as additions nobody waits for.
            refetch = [st for st in added if f"s_{st}" in used]
            loaded -= set(refetch)
            for state in refetch:
                names[f"s_{state}"] = _state_variable(prefix, state)
        fetched = self._emit_update_program(w, program, printer, ranks, names, targets, used,
                                            added if mode == "delta" else [], loaded)
        stores = [(pointer, "p", full_offsets, full_mask)] if stored else []
        stores += [(target.name, f"s_{st}", offsets, target_mask)
                   for st, (target, offsets, target_mask) in targets.items() if st not in fetched]
        for target, source, offsets, target_mask in stores:
            if f"new_{source}" in defined:
                w.line(f"tl.store({target} + {offsets}, {names[f'new_{source}']}, mask={target_mask})")
            elif not _is_zero(program, f"delta_{source}"):
                w.line(f"tl.atomic_add({target} + {offsets}, {names[f'delta_{source}']}, mask={target_mask}, "
                       "sem=\"relaxed\")")

    def _emit_update_program(self, w, program, printer, ranks, names, targets, used, fetchable, loaded=()):
        """Print an update program, reading each state it uses either by a load or, for a state whose
        change is added (fetchable) and computable without it, as the value its atomic addition
        returns: one fetch-and-add instead of a load and an addition (async FTRL reads z and n this
        way), and the freshest value as well. States in loaded are already in their variables.
        Returns the states read by fetch-and-add."""
        known = {"p", "g", "lr", "l1", "l2", "K"} | {f"h_{h}" for h in self.optimizer.hypers}
        known |= {f"s_{st}" for st in loaded}
        needed = [st for st in targets if f"s_{st}" in used and st not in loaded]
        fetched, remaining = [], list(program)

        def load(state):
            target, offsets, target_mask = targets[state]
            w.line(f"{names[f's_{state}']} = tl.load({target.name} + {offsets}, mask={target_mask}, other=0.0)")
            known.add(f"s_{state}")

        if not fetchable:
            for state in needed:
                load(state)
        while remaining:
            ready = [d for d in remaining if {s.name for s in d.expr.free_symbols} <= known]
            for d in ready:
                w.line(f"{names[d.name]} = {printer(d.expr, ranks[d.name])}")
                known.add(d.name)
                remaining.remove(d)
            fetch = [st for st in fetchable if st in needed and st not in fetched
                     and f"s_{st}" not in known and f"delta_s_{st}" in known]
            for state in fetch:
                target, offsets, target_mask = targets[state]
                # masked-off lanes of an atomic return garbage: zero them before any math reads them
                w.line(f"{names[f's_{state}']} = tl.where({target_mask}, tl.atomic_add({target.name} + {offsets}, "
                       f"{names[f'delta_s_{state}']}, mask={target_mask}, sem=\"relaxed\"), 0.0)")
                known.add(f"s_{state}")
                fetched.append(state)
            if remaining and not ready and not fetch:
                load(next(st for st in needed if f"s_{st}" not in known))
        return fetched

    def _predict(self, w):
        w.comment("predict")
        for g in self.ir.globals:
            w.line(f"{g} = tl.load({w.arg(m.global_(g))})")
        self._program(w, self.ir.predict_program)
        w.line(f"tl.store({w.arg(m.PREDICTION)} + slots, {PREDICTION})")

    # --- kernels -------------------------------------------------------------------------------

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
        w = _Writer()
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
        w = _Writer()
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
        w = _Writer()
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
        plan_text = self.plan.kernel_description()
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
        if self.plan.uses_grid_barrier:
            # besides the per-batch kernels (single batches, per-batch decays)
            source, epoch = self._epoch_kernel(groups, local_inputs, local_outputs)
            functions.append(source)
        source, predict = self._chunk_kernel("predict", ["aggregate", "predict"], {}, {})
        functions.append(source)
        header = self._header(plan_text)
        helpers = "\n\n".join(textwrap.dedent(inspect.getsource(h.fn)) for h in triton_helpers.HELPERS)
        if (self.hot and not self.asynchronous) or self.summed_edge_updates:
            helpers += "\n\n" + textwrap.dedent(inspect.getsource(triton_helpers.segment_sum.fn))
        if self.plan.uses_grid_barrier:
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
