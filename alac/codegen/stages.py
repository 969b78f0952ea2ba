"""The stages of a chunk's program in generated code: aggregate (edges into accums), loss (per-sample
loss and its derivatives), apply (per-edge gradients routed to the update), predict; and the
per-row buffers that carry chunk-local data between stage kernels."""

from __future__ import annotations

from alac.codegen import manifest as m
from alac.ir.model_ir import LOSS, PREDICTION, grad_name


class StageEmitter:
    """KernelGenerator's stages (a mixin: it reads the generator's ir, printer, ranks and flags)."""

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

    def _predict(self, w):
        w.comment("predict")
        for g in self.ir.globals:
            w.line(f"{g} = tl.load({w.arg(m.global_(g))})")
        self._program(w, self.ir.predict_program)
        w.line(f"tl.store({w.arg(m.PREDICTION)} + slots, {PREDICTION})")
