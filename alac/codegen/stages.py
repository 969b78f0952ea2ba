"""The stages of a chunk's program in generated code: aggregate (edges into accums), loss (per-sample
loss and its derivatives), apply (per-edge gradients routed to the update), predict; and the
per-row buffers that carry chunk-local data between stage kernels."""

from __future__ import annotations

from alac.codegen import manifest as m
from alac.codegen.functions import assigned_names
from alac.codegen.writer import Writer
from alac.ir.names import PREDICTION


class StageEmitter:
    """KernelGenerator's stages (a mixin: it reads the generator's ir, printer, ranks and flags)."""

    def _tile_params(self, stages):
        """The params a chunk's tile stages (aggregate, apply) read, gathered once per tile."""
        exprs = [a.contribution for a in self.ir.accums] if "aggregate" in stages else []
        exprs += [d.expr for d in self.ir.edge_program] if "apply" in stages else []
        return self._used_params(exprs)

    def _edge_tile_function(self, params, derived):
        """An [S, C] tile of a chunk's edges from slot slot_start on and the params they read (with
        the states a derived param was computed from, which its update reuses)."""
        w = Writer()
        w.derived = derived
        self._tile_edges(w)
        for name in params:
            self._load_param(w, name)
        states = tuple(f"{p}_state_" for p in params)
        returns = [n for n in assigned_names(w.lines)
                   if n in ("edge", "feature", "present", "x", *params) or n.startswith(states)]
        name = "edge_tile" + ("_derived" if derived & set(params) else "")
        if set(params) != set(self.params):
            name += "_" + "_".join(params)
        return self._define(name, "An [S, C] edge tile from slot slot_start on and the params it reads; absent "
                            "edges get id 0 and x 0", w, returns)

    @classmethod
    def _tile_edges(cls, w):
        """The [S, C] edge tile's features and values (x: 1 at present edges of binary data)."""
        cls._tile_features(w, "present = feature >= 0")
        w.line("if HAS_VALUES:")
        w.line("    x = tl.load(chunk_values + edge, mask=present, other=0.0)")
        w.line("else:")
        w.line("    x = tl.where(present, 1.0, 0.0)")

    @staticmethod
    def _tile_features(w, present):
        """The features of the [S, C] edge tile from slot_start on: padding edges (feature -1) and
        slots past the chunk's width are not present and get the safe id 0 that masked accesses
        ignore. Ids stay 32-bit unless WIDE_IDS (a param with 2**31 values or more)."""
        w.line("slot = slot_start + tl.arange(0, S)")
        w.line("edge = slot[:, None] * C + rows[None, :]")
        w.line("feature = tl.load(chunk_features + edge, mask=slot[:, None] < width, other=-1)")
        w.line(present)
        w.line("feature = tl.where(present, feature, 0)")
        w.line("if WIDE_IDS:")
        w.line("    feature = feature.to(tl.int64)")

    def _aggregate_function(self):
        w = Writer()
        for a in self.ir.accums:
            rank = "edge_lane" if a.vector else "edge"
            mask = "present[:, :, None]" if a.vector else "present"
            w.line(f"{a.name} += tl.sum(tl.where({mask}, {self.printer(a.contribution, rank)}, 0.0), axis=0)")
        return self._define("aggregate", "Every edge of a tile adds its contribution to its row's accums", w,
                            [a.name for a in self.ir.accums])

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
            mask = ", mask=lane_valid[None, :]" if self.lane_masks else ""
            w.line(f"tl.store({pointer} + {self._vector_offsets('slots')}, {name}{mask})")
        else:
            w.line(f"tl.store({pointer} + slots, {name})")

    def _load_rows(self, w, name, vector):
        pointer = w.arg(m.stage_rows(name, vector))
        if vector:
            mask = ", mask=lane_valid[None, :], other=0.0" if self.lane_masks else ""
            w.line(f"{name} = tl.load({pointer} + {self._vector_offsets('slots')}{mask})")
        else:
            w.line(f"{name} = tl.load({pointer} + slots)")

    def _loss(self, w):
        w.comment("loss: per-sample loss and dLoss/dAccum, computed in place; padding rows give 0")
        w.line(f"y = tl.load({w.arg(m.LABELS)} + slots)")
        for g in self.ir.globals:
            w.line(f"{g} = tl.load({w.arg(m.global_(g))})")
        self._program(w, self.ir.sample_program, mask_outputs=True)
        self._send_global_gradients(w)

    def _apply_function(self, derived, tile_params):
        if self.asynchronous:
            doc = "Every edge's gradient (x 1/B) through the optimizer, straight into the parameters"
        elif self.edge_updates:
            doc = "Per-edge gradients, kept at the edge's slot of the batch's edge buffer for the update"
        else:
            doc = "Per-edge gradients, added into the batch's gradient accumulators"
        w = Writer()
        w.derived = derived
        for p in self.ir.params:
            w.arg(m.regularizer("gradient_l2", p.name))
        self._program(w, self.ir.edge_program)
        self._send_edge_gradients(w, tile_params)
        return self._define("apply", doc, w)

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
