"""Running the generated Triton kernels: on the GPU, or on the CPU under the Triton interpreter."""

from __future__ import annotations

import torch

from alac.codegen.kernels import generate_kernels
from alac.codegen.module_cache import load_module


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
        self.generated = generate_kernels(ir, plan.kernels, plan.describe())
        self.module = load_module(self.generated, interpret=interpret)
        # (layout and state tensors they were made for, buffers); held, so identities stay unique
        self._buffers = (None, None)
        self._prepared_key = None

    def _arguments(self, state, layout, labels, extra):
        values = {
            "edge_feature_ptr": layout.edge_feature,
            # never read when HAS_VALUES is False; any tensor serves as the pointer
            "edge_value_ptr": layout.edge_value if layout.edge_value is not None else layout.edge_feature,
            "chunk_start_ptr": layout.chunk_start, "chunk_width_ptr": layout.chunk_width,
            "row_of_slot_ptr": layout.row_of_slot, "label_ptr": labels,
        }
        for name, value in state.params.items():
            values[f"{name}_ptr"] = value
        for name, value in state.globals.items():
            values[f"{name}_ptr"] = value
        values.update(extra)
        return values

    def _buffers_for(self, state, layout):
        """Gradient accumulators (zero between batches) and, for stage kernels, per-row buffers."""
        owners = (layout, *state.params.values(), *state.globals.values())
        if not _same_objects(self._buffers[0], owners):
            device = layout.device
            buffers = {f"grad_{name}_ptr": torch.zeros_like(value) for name, value in state.params.items()}
            buffers.update({f"grad_{name}_ptr": torch.zeros_like(value) for name, value in state.globals.items()})
            for name in state.params:
                buffers[f"grad_{name}_bits_ptr"] = buffers[f"grad_{name}_ptr"].view(torch.int32)
            slots = layout.n_chunks * layout.chunk_size
            for name, vector in self.generated.buffers:
                shape = (slots, self.ir.factor_size) if vector else (slots,)
                buffers[f"{name}_buffer_ptr"] = torch.zeros(shape, device=device)
            self._buffers = (owners, buffers)
        return self._buffers[1]

    def _bound(self, spec, values, layout):
        """(kernel, argument list, constexprs): arguments in the spec's order, resolved once."""
        kernel = getattr(self.module, spec.name)
        return kernel, [values[name] for name in spec.args], {
            "HAS_VALUES": layout.edge_value is not None, "C": layout.chunk_size, "num_warps": self.plan.num_warps}

    def _prepare(self, state, layout, labels, chunk_order, loss_sum, l2):
        """Arguments of the train kernels for a run of batches; per batch only the offset and the
        step change, so the per-launch host work is two list stores."""
        values = self._arguments(state, layout, labels, self._buffers_for(state, layout))
        values.update({"chunk_order_ptr": chunk_order, "chunk_offset": 0, "step": 0.0, "loss_sum_ptr": loss_sum})
        values.update({f"l2_{p.name}": float(l2.get(p.name, 0.0)) for p in self.ir.params})
        prepared = []
        for spec in self.generated.train:
            kernel, arguments, constants = self._bound(spec, values, layout)
            offset_at = spec.args.index("chunk_offset")
            step_at = spec.args.index("step") if "step" in spec.args else None
            prepared.append((kernel, arguments, constants, offset_at, step_at))
        return prepared

    def train_batch(self, state, layout, labels, chunk_order, offset, count, step, l2, loss_sum):
        # The key holds the objects themselves (not their ids), so none can be freed and replaced by
        # a new object at the same address while the prepared arguments still point at it.
        key = (state, layout, labels, chunk_order, loss_sum, tuple(sorted(l2.items())))
        if not _same_objects(self._prepared_key, key):
            self._prepared = self._prepare(state, layout, labels, chunk_order, loss_sum, l2)
            self._prepared_key = key
        for kernel, arguments, constants, offset_at, step_at in self._prepared:
            arguments[offset_at] = offset
            if step_at is not None:
                arguments[step_at] = step
            kernel[(count,)](*arguments, **constants)

    def predict(self, state, layout, labels):
        prediction = torch.empty(layout.n_chunks * layout.chunk_size, device=layout.device)
        order = torch.arange(layout.n_chunks, device=layout.device)
        values = self._arguments(state, layout, labels, {
            "chunk_order_ptr": order, "chunk_offset": 0, "prediction_ptr": prediction})
        kernel, arguments, constants = self._bound(self.generated.predict, values, layout)
        kernel[(layout.n_chunks,)](*arguments, **constants)
        return prediction
