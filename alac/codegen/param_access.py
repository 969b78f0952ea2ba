"""The param access layer: how generated code reads a param (stored, or derived from its optimizer
state), where gradients go (the batch's accumulators, per-edge slots of a deterministic or an
edge-update plan, hot sums, or async straight through the optimizer), and how the optimizer's rule
updates a param and its state (stored, or added atomically). Every emitted access to params,
optimizer state and gradient buffers goes through these methods of the generator: the variant's
mechanisms (placement, deterministic, derived params, edge updates, hot segment) are choices made
here, not in the stages."""

from __future__ import annotations

from alac.codegen import manifest as m
from alac.codegen.printer import ExpressionPrinter
from alac.ir.names import LOSS, grad_name
from alac.ir.ranks import rank_of


def _is_zero(program, name):
    return next(d.expr for d in program if d.name == name) == 0


def _state_variable(prefix, state):
    """The variable holding an optimizer state's values in generated code."""
    return f"{prefix}state_{state}"


def _live(program, outputs):
    """The definitions of program that outputs need, in order."""
    needed = set(outputs)
    kept = []
    for d in reversed(program):
        if d.name in needed:
            kept.append(d)
            needed |= {s.name for s in d.expr.free_symbols}
    return tuple(reversed(kept))


class ParamAccess:
    """KernelGenerator's access to params and optimizer state (a mixin: it reads the generator's
    ir, optimizer, params and plan-derived flags)."""

    def _param_argument(self, p):
        """The argument of param p's rows, placed where the variant puts them."""
        return m.param(p, self.variant.placement(p.name))

    @staticmethod
    def _vector_offsets(ids, edge=False):
        """Offsets of the K factors of every id: ids is a [C] block, or an [S, C] tile when edge."""
        return f"{ids}[:, :, None] * K + lanes" if edge else f"{ids}[:, None] * K + lanes[None, :]"

    def _lane_mask(self, mask, edge=False):
        """mask over a vector param's lanes: and the lanes below K where K is not a power of two."""
        if not self.lane_masks:
            return f"{mask}[:, :, None]" if edge else f"{mask}[:, None]"
        return f"{mask}[:, :, None] & lane_valid" if edge else f"{mask}[:, None] & lane_valid[None, :]"

    def _load_param(self, w, name):
        if name in w.derived:
            p = self.params[name]
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
                stored = w.arg(self._param_argument(p))
                w.line(f"{name} = tl.where({cold}, derived_{name}, tl.load({stored} + {offsets}, "
                       f"mask={hot}, other=0.0, cache_modifier=\".cg\"))")
            return
        pointer = w.arg(self._param_argument(self.params[name]))
        if self.params[name].vector:
            w.line(f"{name} = tl.load({pointer} + {self._vector_offsets('feature', True)}, "
                   f"mask={self._lane_mask('present', True)}, other=0.0)")
        else:
            w.line(f"{name} = tl.load({pointer} + feature, mask=present, other=0.0)")

    def _batch_edge_offsets(self, w, p, mask):
        """Offsets and mask of the current [S, C] edge tile in a per-batch edge buffer (chunk
        batch_chunk of the batch, chunk_edges slots per chunk)."""
        slot = f"(batch_chunk * {w.arg(m.size('chunk_edges'))} + edge)"
        return ((self._vector_offsets(slot, True), self._lane_mask(mask, True)) if p.vector else (slot, mask))

    def _add_at(self, w, p, pointer, rows, value, mask):
        """Atomically add an [S, C] tile of p's values (times its K lanes for a vector param) at the
        given rows of the buffer behind pointer."""
        offsets = self._vector_offsets(rows, True) if p.vector else rows
        mask = self._lane_mask(mask, True) if p.vector else mask
        w.line(f"tl.atomic_add({w.arg(pointer)} + {offsets}, {value}, mask={mask}, sem=\"relaxed\")")

    def _send_global_gradients(self, w):
        """The chunk's loss and global gradients (summed over its rows): deterministic plans store
        them at the chunk's slots; async applies the globals' SGD step at once; sync adds them into
        the batch's accumulators."""
        if self.deterministic:
            w.comment("deterministic: the chunk's sums go to its own slots; the runtime adds them in order")
            w.line(f"tl.store({w.arg(m.CHUNK_LOSS)} + chunk, tl.sum({LOSS}, axis=0))")
            for d in self.ir.global_grads:
                w.line(f"tl.store({w.arg(m.chunk_grad(d.name[3:]))} + chunk, tl.sum({d.name}, axis=0))")
            return
        if self.asynchronous:
            for d in self.ir.global_grads:
                w.line(f"tl.atomic_add({w.arg(m.global_(d.name[3:]))}, -lr * scale * tl.sum({d.name}, axis=0), "
                       "sem=\"relaxed\")")
            return
        for d in self.ir.global_grads:
            accumulator = w.arg(m.grad(d.name[3:], is_global=True))
            w.line(f"tl.atomic_add({accumulator}, tl.sum({d.name}, axis=0), sem=\"relaxed\")")

    def _send_edge_gradients(self, w, tile_params):
        """Every edge's param gradients (grad_<p> of the edge program) to where the variant sends
        them; tile_params: params whose tile values are in variables already."""
        if not self.asynchronous and not self.edge_updates:
            w.line(f"tl.store({w.arg(m.TOUCHED)} + feature, tl.full([S, C], 1, tl.int32), mask=present)")
        if self.hot:
            w.line(f"hot = present & (feature < {w.arg(m.size('hot_size'))})")
            w.line("cold = present & ~hot")
        if self.hot and not self.asynchronous:
            w.comment("hot edges: sort the slot's (feature, row) pairs so that equal features are adjacent")
            self._sort_slots(w, "hot", w.arg(m.size("hot_size")), "hot_feature")
        for p in self.ir.params:
            self._send_edge_gradient(w, p, p.name in tile_params)

    def _send_edge_gradient(self, w, p, param_loaded):
        """One param's per-edge gradients: sync adds them into the batch's accumulators (or keeps
        them at the edge's slot), async applies the optimizer's change at once; hot edges go to
        hot sums."""
        value = grad_name(p.name)
        edges = "cold" if self.hot else "present"
        if self.asynchronous:
            self._optimizer_step(w, p, "feature", edges, True, f"{value} * scale", "delta",
                                 param_loaded=param_loaded)
        elif self.deterministic:
            offsets = "edge_base * K + edge[:, :, None] * K + lanes" if p.vector else "edge_base + edge"
            mask = self._lane_mask("present", True) if p.vector else "present"
            w.line(f"tl.store({w.arg(m.edge_grad(p))} + {offsets}, {value}, mask={mask})")
            return
        elif self.edge_updates:
            offsets, mask = self._batch_edge_offsets(w, p, edges)
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
        w.arg(m.size("replicas"))
        self._add_at(w, p, m.hot_sums(p), f"(replica * {w.arg(m.size('hot_stride'))} + hot_feature)", "summed",
                     "segment_end")

    def _update_touched(self, w):
        """Sync update of an [S, C] tile of edges (feature, present): the first edge of every touched
        feature takes its flag and its summed gradient (zeroing both) and applies the optimizer once."""
        w.comment("the first of a feature's edges to swap its touched flag out (atomic exchange with 0)")
        w.line(f"first = present & (tl.atomic_xchg({w.arg(m.TOUCHED)} + feature, 0, mask=present, "
               "sem=\"relaxed\") == 1)")
        for p in self.ir.params:
            grad = w.arg(m.grad(p.name, p.vector))
            offsets = self._vector_offsets("feature", True) if p.vector else "feature"
            mask = self._lane_mask("first", True) if p.vector else "first"
            w.line(f"summed = tl.load({grad} + {offsets}, mask={mask}, other=0.0)")
            w.line(f"tl.store({grad} + {offsets}, tl.zeros_like(summed), mask={mask})")
            self._optimizer_step(w, p, "feature", "first", True, "summed * scale", "new")

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
            targets[state] = (m.state(p, state, row, self.variant.placement(p.name)), ids if per_row else full_offsets,
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
        # and a stale z beside a fresh n derives a weight no update produced: async FTRL LR's first
        # epoch on a shared GPU lost with .cg loads, and the atomic reads cost little
        # (benchmarks/optimizers.py's FTRL arms).
        for state, (target, offsets, target_mask) in targets.items():
            if f"s_{state}" in reads and state not in loaded:
                w.line(f"{names[f's_{state}']} = tl.where({target_mask}, tl.atomic_add({w.arg(target)} + {offsets}, "
                       f"0.0, mask={target_mask}, sem=\"relaxed\"), 0.0)")
                loaded.add(state)
        for d in program:
            ranks[d.name] = rank_of(d.expr, ranks)
            names[d.name] = variable if d.name == "derived_p" else f"{prefix}{d.name}"
        printer = ExpressionPrinter(self.dialect, names, ranks)
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
        printer = ExpressionPrinter(self.dialect, names, ranks)
        used = self._use_arguments(w, p, program)
        w.comment(f"{self.optimizer.name} on {p.name}" + (" (the change, added atomically)" if mode == "delta" else ""))
        w.line(f"{names['g']} = {gradient}")
        pointer = w.arg(self._param_argument(p)) if stored else None
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
            # program's flush stored it from an earlier one), and z then grew past its weight (async
            # FTRL LR on a shared GPU ended some runs at a higher training loss; none derived here).
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
            # of sqrt(n), z outgrows beta + sqrt(n), and async LR diverged. The other states' changes
            # go out as additions nobody waits for.
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
