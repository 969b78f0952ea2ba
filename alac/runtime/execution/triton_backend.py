"""Running the generated Triton kernels: on the GPU, or on the CPU under the Triton interpreter.

Sync epochs launch the train kernels once per batch (chunk offset and batch index change, everything
else is bound once); on a GPU the epoch is captured once as a CUDA graph and replayed, with the
epoch's chunk order and per-batch steps copied into the buffers the graph reads. Async epochs are one
launch of the persistent kernel; so are sync epochs of plans with a grid barrier (the epoch kernel's
programs meet at a grid-wide barrier where per-batch launches have kernel boundaries), which launch
it once per batch only where a batch must end on the host (per-batch L2 decays, single batches).
"""

from __future__ import annotations

import dataclasses
import math

import torch

from alac.codegen import ALLOCATED_ROLES, Sizes, TorchPrograms, generate_kernels, load_module
from alac.errors import OptionError
from alac.runtime.execution.deterministic import plan_epoch, reduce_batch
from alac.runtime.execution.schedule import (
    async_programs,
    resident_programs,
    slots_per_step,
    sync_programs,
    warps_for_tile,
)

# Values of one param from which feature offsets need 64 bits (the kernels' WIDE_IDS).
WIDE_ID_LIMIT = 2 ** 31
# Rows of the hot-gradient buffers (sync replicas, async per-program sums) start at multiples of 16
# values. With rows H apart and H not a multiple of 16, Triton 3.6 on H100 summed the replicas wrong
# (sync LR, H = 83 or 255 with R >= 2: weights off the reference by 0.03-0.47 after an epoch; H = 96,
# 128 or 256 and R = 1 exact; the interpreter exact throughout), the cause not pinned down; with
# aligned rows the generated code takes Triton's aligned path (16 is its divisibility specialization).
HOT_ROW_ALIGNMENT = 16


def launch_constants(plan, layout, factor_size, interpret=False, resident=False):
    """The generated kernels' constexprs and num_warps for this plan on this layout (the edge tile
    [S, C], whether a whole row fits it, 64-bit offsets, whether a sync epoch's programs hold one chunk
    of a batch each). resident: the kernels have resident chunks (GeneratedKernels.resident)."""
    programs = sync_programs(plan, layout, interpret or layout.device.type != "cuda")
    one_chunk_each = plan.semantics == "sync" and programs >= plan.chunks_per_batch
    slots = slots_per_step(plan, layout, factor_size, resident and one_chunk_each)
    widest = layout.fixed_width if layout.fixed_width is not None else layout.stats.max_nnz
    one_tile = widest <= slots
    return {"HAS_VALUES": layout.edge_value is not None, "C": layout.chunk_size, "S": slots,
            "ONE_TILE": one_tile, "num_warps": warps_for_tile(plan, slots, factor_size),
            "WIDE_IDS": layout.n_features * max(factor_size, 1) >= WIDE_ID_LIMIT,
            "RESIDENT": one_tile and one_chunk_each}


def _same_objects(first, second):
    """True when two tuples hold the very same objects (compared by identity; other items by ==)."""
    return first is not None and len(first) == len(second) and all(
        a is b or (not isinstance(a, torch.Tensor) and not hasattr(a, "__dict__") and a == b)
        for a, b in zip(first, second))


class TritonBackend:
    def __init__(self, ir, plan, interpret=False):
        self.ir = ir
        self.plan = plan
        self.interpret = interpret
        self.name = "interpret" if interpret else "triton"
        self.generated = generate_kernels(ir, plan)
        self.module = load_module(self.generated, interpret=interpret)
        self._programs = TorchPrograms(ir) if self.generated.derived_params else None
        # (layout and state tensors they were made for, sizes); held, so identities stay unique
        self._buffers = (None, None)
        # the allocated buffers by (role, of) of their manifest Argument
        self._by_role = {}
        self._bound_key = None
        self._graph = None
        # the last async launch: its program count, and (kernel, arguments, constants, device) for
        # resident_async_programs
        self.async_programs = None
        self._last_async_launch = None

    def use_programs(self, programs):
        """Launch sync epoch kernels over `programs` persistent programs from now on (None: one per
        chunk of a batch, as many as the GPU holds): a schedule, the kernels unchanged."""
        self.plan = dataclasses.replace(self.plan, programs=programs)
        self._bound_key = None
        self._graph = None

    def use_module(self, module):
        """Run the kernels of module (a dumped one, edits included) in place of the generated ones:
        it must define every kernel of the manifest, by name."""
        specs = (*self.generated.train, self.generated.predict)
        missing = [spec.name for spec in specs if not hasattr(module, spec.name)]
        if missing:
            raise OptionError(f"the module defines no kernel {', '.join(missing)}: it was generated for another "
                              "model, optimizer or plan")
        self.module = module
        self._bound_key = None
        self._graph = None

    def _sizes(self, layout):
        """The sizes the manifest's shapes and size arguments name, for this layout and plan."""
        hot = min(self.plan.hot_size, layout.n_features)
        hot_stride = -(-hot // HOT_ROW_ALIGNMENT) * HOT_ROW_ALIGNMENT
        # sync: R replicas of the hot sums; async: one [H] row per persistent program
        copies = self.plan.replicas if self.plan.semantics == "sync" else async_programs(self.plan, layout)
        widest, edges = layout.extent()
        chunk_edges = layout.chunk_size * widest
        return Sizes(n_features=layout.n_features, K=max(self.ir.factor_size, 1), n_chunks=layout.n_chunks,
                     chunk_bounds=layout.n_chunks + 1, slots=layout.n_chunks * layout.chunk_size,
                     edges=edges,
                     n_batches=max(math.ceil(layout.n_chunks / self.plan.chunks_per_batch), 1),
                     hot_size=hot, hot_stride=hot_stride, hot_rows=max(copies * hot_stride, 1),
                     chunk_edges=chunk_edges, batch_edges=self.plan.chunks_per_batch * max(chunk_edges, 1),
                     replicas=self.plan.replicas, flush_every=self.plan.flush_every,
                     chunks_per_batch=self.plan.chunks_per_batch)

    def _buffers_for(self, state, layout):
        """Allocate the manifest's buffers for this layout (zeroed; kept between epochs) into
        _by_role; returns the sizes they were made with."""
        owners = (layout, *state.params.values(), *state.globals.values())
        if not _same_objects(self._buffers[0], owners):
            sizes = self._sizes(layout)
            allocated = sorted((a for a in self.generated.manifest if a.role in ALLOCATED_ROLES),
                               key=lambda a: ALLOCATED_ROLES.index(a.role))
            self._by_role = {(a.role, a.of): torch.zeros(sizes.shape(a), dtype=getattr(torch, a.dtype),
                                                         device=layout.device) for a in allocated}
            self._buffers = (owners, sizes)
            self._bound_key = None
            self._graph = None
        return self._buffers[1]

    def _find(self, role, of=""):
        """The allocated buffer of that role (and param, global or schedule entry)."""
        return self._by_role[(role, of)]

    def _schedule(self, entry):
        """The epoch's chunk order, learning rates or scales, as the kernels read them."""
        return self._find("schedule", entry)

    def _constants(self, layout):
        return launch_constants(self.plan, layout, self.ir.factor_size, self.interpret, self.generated.resident)

    def _value(self, argument, state, layout, labels, settings, sizes, outputs):
        """What a manifest.Argument is bound to: found by its role, never by its name (outputs
        replace the allocated buffer of the same `of`)."""
        role, of = argument.role, argument.of
        if role == "param":
            return state.params[of]
        if role == "global":
            return state.globals[of]
        if role == "state":
            return state.states[of]
        if role == "layout":
            value = getattr(layout, of)
            # never read when HAS_VALUES is False; any tensor serves as the pointer
            return layout.edge_feature if value is None else value
        if role == "labels":
            return labels
        if role == "output":
            return outputs[of]
        if role in ALLOCATED_ROLES:
            return outputs[of] if of in outputs else self._by_role[(role, of)]
        if role == "size":
            return sizes.dim(of)
        if role == "launch":
            return sizes.n_chunks if of == "chunk_end" else 0
        if role == "hyper":
            return float(settings.hypers[of])
        return float(getattr(settings, role).get(of, 0.0))   # gradient_l2, update_l1, update_l2

    def _bind(self, state, layout, labels, settings, loss_sum):
        """The train kernels with their argument lists, bound once per (state, layout, labels,
        settings): per launch only the chunk offset and the batch index change."""
        sizes = self._buffers_for(state, layout)
        key = (state, layout, labels, loss_sum, repr(settings))
        if not _same_objects(self._bound_key, key):
            def bound(spec):
                return [self._value(a, state, layout, labels, settings, sizes, {"loss_sum": loss_sum})
                        for a in spec.args]

            def position(spec, of):
                return next((i for i, a in enumerate(spec.args) if a.role == "launch" and a.of == of), None)

            constants = self._constants(layout)
            # the epoch kernel's persistent grid; per-batch kernels take one program per chunk
            epoch_grid = sync_programs(self.plan, layout, self.interpret)
            self._bound = [(getattr(self.module, spec.name), bound(spec), constants,
                            epoch_grid if spec.role == "epoch" else None,
                            {of: position(spec, of) for of in ("chunk_offset", "chunk_end", "batch")})
                           for spec in self.generated.train]
            self._bound_key = key
            self._graph = None
            self._settings, self._state, self._layout, self._loss_sum = settings, state, layout, loss_sum

    def _launch_batch(self, offset, count, batch):
        """The batch of chunk-order positions offset .. offset + count (the epoch kernel: every batch
        from there on that fits, from batch `batch` on)."""
        for index, (kernel, arguments, constants, epoch_grid, at) in enumerate(self._bound):
            for of, value in (("chunk_offset", offset), ("chunk_end", offset + count), ("batch", batch)):
                if at[of] is not None:
                    arguments[at[of]] = value
            if self.plan.deterministic and index == len(self._bound) - 1:
                # before the update kernel: the batch's gradient sums, in a fixed order
                reduce_batch(self._reduction, batch, self._find, self._state.params, self._state.globals,
                             self._loss_sum)
            if epoch_grid:
                self._find("arrivals").zero_()
                kernel[(epoch_grid,)](*arguments, **constants)
            else:
                kernel[(count,)](*arguments, **constants)
        if self._settings.decay_l2:
            self._state.decay(self._settings.decay_l2, self._schedule("lr")[batch])

    def _launch_epoch(self, chunks, start=0, first_batch=0):
        """Batch after batch of the loaded chunk order's positions start .. start + chunks."""
        per_batch = self.plan.chunks_per_batch
        for batch, offset in enumerate(range(start, start + chunks, per_batch), first_batch):
            self._launch_batch(offset, min(per_batch, start + chunks - offset), batch)

    def train_batch(self, state, layout, labels, chunk_order, offset, count, lr, scale, settings, loss_sum):
        """One sync batch (chunks chunk_order[offset:offset + count]): gradient sums times scale go
        to the optimizer with learning rate lr."""
        self._bind(state, layout, labels, settings, loss_sum)
        self._schedule("chunk_order").copy_(chunk_order)
        self._schedule("lr")[0] = lr
        self._schedule("scale")[0] = scale
        if self.plan.deterministic:
            self._reduction = plan_epoch(layout, chunk_order[offset:offset + count], count)
        self._launch_batch(offset, count, 0)

    def load_schedule(self, state, layout, labels, order, rates, scales, settings, loss_sum):
        """A sync epoch's chunk order, learning rates and batch scales copied in for train_run."""
        self._bind(state, layout, labels, settings, loss_sum)
        self._schedule("chunk_order")[:order.numel()].copy_(order)
        self._schedule("lr")[:rates.numel()] = rates
        self._schedule("scale")[:scales.numel()] = scales
        self._loaded_order = order

    def train_run(self, state, layout, labels, offset, chunks, first_batch, settings, loss_sum):
        """Sync batches from first_batch on: the loaded order's positions offset .. offset + chunks
        (load_schedule), with no copy of their schedule."""
        self._bind(state, layout, labels, settings, loss_sum)
        if self.plan.deterministic:
            self._reduction = plan_epoch(layout, self._loaded_order, self.plan.chunks_per_batch)
            self._launch_epoch(chunks, offset, first_batch)
        elif self._one_launch(settings):
            self._launch_batch(offset, chunks, first_batch)
        else:
            self._launch_epoch(chunks, offset, first_batch)

    def _one_launch(self, settings):
        """Whether the epoch kernel runs a run of batches in one persistent launch (no L2 decay between
        batches, which the host applies)."""
        return self.generated.train[0].role == "epoch" and not settings.decay_l2

    def train_epoch(self, state, layout, labels, order, rates, scales, settings, loss_sum):
        """An epoch over the chunks of order (every chunk of the layout, or a segment of whole
        batches of them): rates and scales hold one learning rate and one 1 / samples per batch
        (async: one of each, the scale being 1 / B: a sample's gradient counts as in a batch of B)."""
        self.load_schedule(state, layout, labels, order, rates, scales, settings, loss_sum)
        chunks = order.numel()
        if self.plan.semantics == "async":
            kernel, arguments, constants, _, at = self._bound[0]
            arguments[at["chunk_end"]] = chunks
            self.async_programs = async_programs(self.plan, layout)
            self._last_async_launch = (kernel, arguments, constants, layout.device)
            kernel[(self.async_programs,)](*arguments, **constants)
            self._write_derived_params(state, rates[0], settings)
            return
        graphed = (self.plan.cuda_graph and layout.device.type == "cuda" and chunks == layout.n_chunks
                   and not self.plan.deterministic and not self._one_launch(settings))
        if not graphed:
            self.train_run(state, layout, labels, 0, chunks, 0, settings, loss_sum)
        elif self._graph is None:
            self._launch_epoch(chunks)  # compiles every kernel variant before the capture
            torch.cuda.synchronize()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                self._launch_epoch(chunks)
            self._graph = graph
        else:
            self._graph.replay()

    def resident_async_programs(self):
        """How many of the last async launch's programs the GPU holds at once (schedule.
        resident_programs; None before an async launch and under the interpreter)."""
        if self.interpret or self._last_async_launch is None:
            return None
        kernel, arguments, constants, device = self._last_async_launch
        compiled = kernel.warmup(*arguments, grid=(1,), **constants)
        # Triton fills n_regs when it loads the binary (lazily, at the first launch otherwise)
        compiled._init_handles()
        return resident_programs(compiled, device)

    def _write_derived_params(self, state, lr, settings):
        """The params the async kernel derives from their state, written from the state (elementwise,
        once per epoch), for prediction, checkpoints and the next sync step."""
        optimizer = self.ir.optimizer
        for name in self.generated.derived_params:
            param = state.params[name]
            derive = self._programs.derive_vector if param.dim() == 2 else self._programs.derive_scalar
            value = derive(**{f"s_{st}": state.states[f"{name}_{st}"] for st, _, _ in optimizer.states}, lr=lr,
                           **{f"h_{h}": settings.hypers[h] for h in optimizer.hypers},
                           l1=settings.update_l1.get(name, 0.0), l2=settings.update_l2.get(name, 0.0),
                           K=self.ir.factor_size)["derived_p"]
            param.copy_(value)

    def predict(self, state, layout, labels):
        prediction = torch.empty(layout.n_chunks * layout.chunk_size, device=layout.device)
        order = torch.arange(layout.n_chunks, device=layout.device)
        spec = self.generated.predict
        # the predict kernel reads no training buffer: binding it leaves the training buffers (and the
        # epoch's CUDA graph, bound to them) alone
        outputs, sizes = {"chunk_order": order, "prediction": prediction}, self._sizes(layout)
        arguments = [self._value(a, state, layout, labels, None, sizes, outputs) for a in spec.args]
        getattr(self.module, spec.name)[(layout.n_chunks,)](*arguments, **self._constants(layout))
        return prediction
