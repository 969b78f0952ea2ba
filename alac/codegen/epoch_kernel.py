"""The sync epoch kernel of grid-barrier plans: P resident programs run an epoch's batches in order and
meet at a grid-wide barrier after each kernel group of a batch, where per-batch launches have a kernel
boundary.

Resident chunks: with edge updates the kernel runs a batch as two phases between barriers. Its general
form stores every edge's gradient in the batch's edge buffer and, after the barrier, reads the chunk's
order entry, its start, its ids and those gradients back: dependent round trips before the first
atomic. Where every program holds at most one chunk of a batch (chunks per batch <= programs) and every
row fits one [S, C] tile (the RESIDENT launch constant), the update needs none of them: the apply
returns the gradients and the update adds them at the ids the tile still holds; prefetched
(Plan.prefetch_chunks), the update also reads the next batch's chunk before the second barrier (each step
faster for LR and FM k = 16 with its whole row as the tile: benchmarks/sync_resident.py). The general form
stays in the kernel for the launches where RESIDENT is off.
"""

from __future__ import annotations

from alac.codegen import manifest as m
from alac.codegen.functions import FLOW_CONSTEXPRS, kernel_source
from alac.codegen.manifest import KernelSpec
from alac.codegen.writer import Writer
from alac.ir.names import grad_name


class EpochKernel:
    """KernelGenerator's sync epoch kernel, general and resident forms (a mixin of alac.codegen.kernels)."""

    def _epoch_kernel(self, groups, local_inputs, local_outputs):
        """Sync with grid barriers: P resident programs run the batches of chunk-order positions
        chunk_offset .. chunk_end (an epoch, or one batch) in order, every kernel group of a batch on
        chunks pid, pid + P, ... of it, and meet at a grid-wide barrier after each group, where
        per-batch launches have a kernel boundary."""
        w = Writer()
        for name in (*m.CHUNK_ARGS, m.CHUNK_END, m.FIRST_BATCH, m.size("chunks_per_batch")):
            w.arg(name)
        arrivals = w.arg(m.ARRIVALS)
        w.comment("the loss, summed per row; added to the total once, at the end")
        w.line("loss_rows = tl.zeros([C], tl.float32)")
        w.comment("barriers passed so far: the arrival count grows by P at each")
        w.line("barriers = 0")
        if self.variant.prefetch_chunks:
            w.line("if RESIDENT:")
            w.depth += 1
            w.comment("the first batch's chunk; each batch's update reads the next one's")
            self._resident_chunk_tile(w, "chunk_offset")
            w.depth -= 1
        w.line("for step in range(0, tl.cdiv(chunk_end - chunk_offset, chunks_per_batch)):")
        w.depth += 1
        w.line("batch = first_batch + step")
        w.line("batch_start = chunk_offset + step * chunks_per_batch")
        w.line("batch_end = tl.minimum(batch_start + chunks_per_batch, chunk_end)")
        for group in groups:
            if group == ["update"]:
                start, function = self._update_functions()
                w.call(start)
            else:
                function = self._chunk_function(group, local_inputs, local_outputs)
            if self.variant.resident_tiles:
                w.line("if RESIDENT:")
                w.depth += 1
                self._resident_phase(w, group)
                w.depth -= 1
                w.line("else:")
                w.depth += 1
            w.line("for position in range(batch_start + tl.program_id(0), batch_end, tl.num_programs(0)):")
            w.depth += 1
            if self.edge_updates:
                w.line("batch_chunk = position - batch_start")
            w.line("chunk = tl.load(chunk_order_ptr + position).to(tl.int64)")
            w.call(function)
            if function.returns:
                w.line("loss_rows += loss")
            w.depth -= 2 if self.variant.resident_tiles else 1
            w.comment(f"every program's {' + '.join(group)} of this batch has landed before any program goes on")
            w.line("barriers += 1")
            w.line(f"grid_barrier({arrivals}, barriers * tl.num_programs(0))")
        w.depth -= 1
        w.line(f"tl.atomic_add({w.arg(m.LOSS_SUM)}, tl.sum(loss_rows, axis=0), sem=\"relaxed\")")
        name = f"{self.prefix}_epoch"
        stages = tuple(s for g in groups for s in g)
        return kernel_source(name, w, FLOW_CONSTEXPRS), KernelSpec(name, "epoch", stages, tuple(w.args))

    def _resident_gradients(self):
        return tuple(grad_name(p.name) for p in self.ir.params)

    def _resident_apply_function(self, derived):
        """Per-edge gradients, returned to the caller (it holds them until the update)."""
        w = Writer()
        w.derived = derived
        for p in self.ir.params:
            w.arg(m.regularizer("gradient_l2", p.name))
        self._program(w, self.ir.edge_program)
        return self._define("apply_resident", "Per-edge gradients, kept in registers for the update", w,
                            self._resident_gradients())

    def _resident_rows(self, w):
        """The lines that find a chunk's rows and edges (nothing where not active)."""
        for argument in m.LAYOUT:
            w.arg(argument)
        self._chunk_prologue(w, True, active=True)

    def _resident_ids_function(self):
        """Prefetch: one chunk's rows, ids and values in one tile, read before the barrier that ends the
        batch before its own."""
        w = Writer()
        self._resident_rows(w)
        w.line("slot_start = 0")
        self._tile_edges(w)
        return self._define("chunk_tile_resident", "One chunk's rows, ids and values in one tile (nothing where not "
                            "active)", w, ("slots", "valid", "edge", "feature", "present", "x"))

    def _resident_chunk_function(self, stages):
        """aggregate + loss + apply of one chunk held in one tile (nothing where not active: no rows,
        no edges); returns the rows' losses, the tile's ids and presence and every edge's gradients.
        Prefetch: of the chunk's tile read before the barrier (chunk_tile_resident), its params
        gathered here; returns the losses and gradients."""
        w = Writer()
        params = self._tile_params(stages)
        if self.variant.prefetch_chunks:
            for name in params:
                self._load_param(w, name)
        else:
            self._resident_rows(w)
        for stage in stages:
            if stage == "aggregate":
                for a in self.ir.accums:
                    w.line(f"{a.name} = tl.zeros({'[C, BLOCK_K]' if a.vector else '[C]'}, tl.float32)")
                if not self.variant.prefetch_chunks:
                    w.call(self._edge_tile_function(params, w.derived), slot_start="0")
                w.call(self._aggregate_function())
            elif stage == "apply":
                w.call(self._resident_apply_function(w.derived))
            else:
                self._loss(w)
        doc = f"{' + '.join(stages)} of one chunk in one tile; returns its rows' losses and its edges' gradients"
        if self.variant.prefetch_chunks:
            return self._define(f"{'_'.join(stages)}_prefetched", doc, w, ("loss", *self._resident_gradients()))
        return self._define(f"{'_'.join(stages)}_resident", doc, w,
                            ("loss", "feature", "present", *self._resident_gradients()))

    def _resident_update_function(self):
        """Every edge of the held tile adds its own change."""
        w = Writer()
        for p in self.ir.params:
            self._optimizer_step(w, p, "feature", "present", True, f"{grad_name(p.name)} * scale", "delta")
        return self._define("update_resident", "Every edge of the held tile adds its own change", w)

    def _resident_phase(self, w, group):
        """One phase of a batch in the resident form, under `if RESIDENT:` (the caller's else holds
        the general form)."""
        if group == ["update"]:
            w.call(self._resident_update_function())
            if self.variant.prefetch_chunks:
                w.comment("the next batch's chunk, read before the barrier: after it only the params are gathered")
                self._resident_chunk_tile(w, "batch_start + chunks_per_batch")
            return
        if self.variant.prefetch_chunks:
            w.call(self._resident_chunk_function(group))
            w.line("loss_rows += loss")
            return
        w.comment("one chunk a program: its tile and edge gradients stay in registers until its update")
        self._resident_chunk_of(w, "batch_start", "batch_end")
        w.call(self._resident_chunk_function(group))
        w.line("loss_rows += loss")

    @staticmethod
    def _resident_chunk_of(w, first, end):
        """This program's chunk of the batch at chunk-order positions `first` .. `end` (inactive past it)."""
        w.line(f"position = {first} + tl.program_id(0)")
        w.line(f"active = position < {end}")
        w.line("chunk = tl.load(chunk_order_ptr + position, mask=active, other=0).to(tl.int64)")

    def _resident_chunk_tile(self, w, first):
        """Prefetch: this program's chunk of the batch from chunk-order position `first` on, in one tile."""
        self._resident_chunk_of(w, first, f"tl.minimum({first} + chunks_per_batch, chunk_end)")
        w.call(self._resident_ids_function())
