"""ModelIR + plan -> the Triton source of a model's kernels.

A kernel is a group of stages from the stage graph (`alac.ir.stage_graph.kernel_groups`): the fused
flow kernel is aggregate + loss + apply in one program per chunk, with accums and deltas in
registers; the stage-based plan makes each stage a kernel and passes accums and deltas through
global memory. Both come from the same stage blocks below: a stage whose input was produced in
another kernel loads it, a stage whose output is consumed in another kernel stores it. The update
kernel applies the batch's accumulated gradients (the mini-batch barrier); the predict kernel is
aggregate + predict.

Kernel names are `alac_<model>_<ir hash[:8]>_<role>`, stable for a given IR.
"""

from __future__ import annotations

import inspect
import textwrap
from dataclasses import dataclass, field

from alac.codegen import triton_helpers
from alac.codegen.printer import TRITON, ExpressionPrinter, rank_of
from alac.ir.model_ir import LOSS, PREDICTION, grad_name, l2_name
from alac.ir.stage_graph import build_stage_graph, kernel_groups

# Arguments every chunk kernel takes: the layout and which chunks this launch covers.
_LAYOUT_ARGS = ("edge_feature_ptr", "edge_value_ptr", "chunk_start_ptr", "chunk_width_ptr",
                "row_of_slot_ptr", "label_ptr", "chunk_order_ptr", "chunk_offset")
CONSTEXPRS = ("HAS_VALUES", "C")


def next_power_of_two(n):
    return 1 << max(0, (n - 1).bit_length())


@dataclass(frozen=True)
class KernelSpec:
    name: str
    role: str          # "train" (one per group, in launch order), "update" or "predict"
    stages: tuple
    args: tuple        # run-time arguments, in order; CONSTEXPRS follow as keywords


@dataclass(frozen=True)
class GeneratedKernels:
    model: str
    ir_hash: str
    plan_text: str
    source: str
    train: tuple       # KernelSpecs launched per batch, in order (the last is the update)
    predict: KernelSpec
    buffers: tuple = field(default=())   # chunk-local data that goes through global memory: (name, vector)


class _Writer:
    def __init__(self):
        self.lines = []
        self.args = []
        self.depth = 1

    def arg(self, name):
        if name not in self.args:
            self.args.append(name)
        return name

    def line(self, text=""):
        self.lines.append(("    " * self.depth + text) if text else "")

    def comment(self, text):
        self.line(f"# {text}")


class KernelGenerator:
    def __init__(self, ir, kernels="fused"):
        self.ir = ir
        self.kernels = kernels
        self.prefix = f"alac_{ir.name}_{ir.hash[:8]}"
        self.k = ir.factor_size
        self.block_k = next_power_of_two(self.k) if self.k else 0
        self.ranks = self._ranks()
        self.printer = ExpressionPrinter(TRITON, {}, self.ranks)
        self.param_vector = {p.name: p.vector for p in ir.params}

    def _ranks(self):
        ranks = {"x": "row", "y": "row"}
        for p in self.ir.params:
            ranks[p.name] = "lane" if p.vector else "row"
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

    def _vector_offsets(self, rows_expr):
        return f"{rows_expr}[:, None] * K + lanes[None, :]"

    def _load_param(self, w, name, feature="feature", present="present"):
        pointer = w.arg(f"{name}_ptr")
        if self.param_vector[name]:
            w.line(f"{name} = tl.load({pointer} + {self._vector_offsets(feature)}, "
                   f"mask={present}[:, None] & lane_valid[None, :], other=0.0)")
        else:
            w.line(f"{name} = tl.load({pointer} + {feature}, mask={present}, other=0.0)")

    def _edge_loop_header(self, w):
        w.line("for slot in range(0, width):")
        w.depth += 1
        w.line("edge = edge_base + slot * C + rows")
        w.line("feature, present, x = load_edges(edge_feature_ptr, edge_value_ptr, edge, HAS_VALUES)")

    def _program(self, w, program, mask_outputs=False):
        for d in program:
            rank = self.ranks[d.name]
            text = self.printer(d.expr, "lane" if rank == "lane" else "row")
            if mask_outputs and not d.name.startswith("t"):
                text = f"tl.where(valid{'[:, None]' if rank == 'lane' else ''}, {text}, 0.0)"
            w.line(f"{d.name} = {text}")

    def _used_params(self, exprs):
        names = {s.name for e in exprs for s in e.free_symbols}
        return [p.name for p in self.ir.params if p.name in names]

    def _store_rows(self, w, name, vector):
        pointer = w.arg(f"{name}_buffer_ptr")
        if vector:
            w.line(f"tl.store({pointer} + {self._vector_offsets('slots')}, {name}, mask=lane_valid[None, :])")
        else:
            w.line(f"tl.store({pointer} + slots, {name})")

    def _load_rows(self, w, name, vector):
        pointer = w.arg(f"{name}_buffer_ptr")
        if vector:
            w.line(f"{name} = tl.load({pointer} + {self._vector_offsets('slots')}, "
                   f"mask=lane_valid[None, :], other=0.0)")
        else:
            w.line(f"{name} = tl.load({pointer} + slots)")

    # --- stages --------------------------------------------------------------------------------

    def _aggregate(self, w):
        w.comment("aggregate: every edge adds its contribution to its sample's accums (registers)")
        for a in self.ir.accums:
            shape = "[C, BLOCK_K]" if a.vector else "[C]"
            w.line(f"{a.name} = tl.zeros({shape}, tl.float32)")
        self._edge_loop_header(w)
        for name in self._used_params([a.contribution for a in self.ir.accums]):
            self._load_param(w, name)
        for a in self.ir.accums:
            rank = "lane" if a.vector else "row"
            mask = "present[:, None]" if a.vector else "present"
            w.line(f"{a.name} += tl.where({mask}, {self.printer(a.contribution, rank)}, 0.0)")
        w.depth -= 1

    def _loss(self, w):
        w.comment("loss: per-sample loss and dLoss/dAccum, computed in place; padding rows give 0")
        w.line(f"y = tl.load({w.arg('label_ptr')} + slots)")
        for g in self.ir.globals:
            w.line(f"{g} = tl.load({w.arg(f'{g}_ptr')})")
        self._program(w, self.ir.sample_program, mask_outputs=True)
        w.line(f"tl.atomic_add({w.arg('loss_sum_ptr')}, tl.sum({LOSS}, axis=0))")
        for d in self.ir.global_grads:
            w.line(f"tl.atomic_add({w.arg(f'grad_{d.name[3:]}_ptr')}, tl.sum({d.name}, axis=0))")

    def _apply(self, w):
        w.comment("apply: per-edge gradients, added into the batch's gradient accumulators")
        self._edge_loop_header(w)
        exprs = [d.expr for d in self.ir.edge_program]
        for name in self._used_params(exprs):
            self._load_param(w, name)
        for p in self.ir.params:
            w.arg(l2_name(p.name))
        self._program(w, self.ir.edge_program)
        for p in self.ir.params:
            pointer = w.arg(f"{grad_name(p.name)}_ptr")
            if p.vector:
                w.line(f"tl.atomic_add({pointer} + {self._vector_offsets('feature')}, {grad_name(p.name)}, "
                       f"mask=present[:, None] & lane_valid[None, :])")
            else:
                w.line(f"tl.atomic_add({pointer} + feature, {grad_name(p.name)}, mask=present)")
        w.depth -= 1

    def _predict(self, w):
        w.comment("predict")
        for g in self.ir.globals:
            w.line(f"{g} = tl.load({w.arg(f'{g}_ptr')})")
        self._program(w, self.ir.predict_program)
        w.line(f"tl.store({w.arg('prediction_ptr')} + slots, {PREDICTION})")

    # --- kernels -------------------------------------------------------------------------------

    def _chunk_prologue(self, w):
        w.line("chunk = tl.load(chunk_order_ptr + chunk_offset + tl.program_id(0)).to(tl.int64)")
        w.line("rows = tl.arange(0, C)")
        w.line("slots = chunk * C + rows")
        w.line("valid = tl.load(row_of_slot_ptr + slots) >= 0")
        w.line("edge_base = tl.load(chunk_start_ptr + chunk)")
        w.line("width = tl.load(chunk_width_ptr + chunk)")
        if self.k:
            w.line("lanes = tl.arange(0, BLOCK_K)")
            w.line("lane_valid = lanes < K")

    def _chunk_kernel(self, role, stages, local_inputs, local_outputs):
        w = _Writer()
        for name in _LAYOUT_ARGS:
            w.arg(name)
        self._chunk_prologue(w)
        for stage in stages:
            for name, vector in local_inputs.get(stage, ()):
                self._load_rows(w, name, vector)
            {"aggregate": self._aggregate, "loss": self._loss, "apply": self._apply,
             "predict": self._predict}[stage](w)
            for name, vector in local_outputs.get(stage, ()):
                self._store_rows(w, name, vector)
        name = f"{self.prefix}_{'_'.join(stages) if role == 'train' else role}"
        return self._function(name, w), KernelSpec(name, role, tuple(stages), tuple(w.args))

    def _update_kernel(self):
        w = _Writer()
        for name in ("edge_feature_ptr", "chunk_start_ptr", "chunk_width_ptr", "chunk_order_ptr", "chunk_offset"):
            w.arg(name)
        w.arg("step")
        w.comment("p <- p - step * g once for every feature the batch touched: the first edge to swap a")
        w.comment("feature's gradient out (atomic exchange with 0) gets the batch's whole sum")
        w.line("chunk = tl.load(chunk_order_ptr + chunk_offset + tl.program_id(0)).to(tl.int64)")
        w.line("rows = tl.arange(0, C)")
        w.line("edge_base = tl.load(chunk_start_ptr + chunk)")
        w.line("width = tl.load(chunk_width_ptr + chunk)")
        if self.k:
            w.line("lanes = tl.arange(0, BLOCK_K)")
            w.line("lane_valid = lanes < K")
        if self.ir.globals:
            w.line("if tl.program_id(0) == 0:")
            w.depth += 1
            for g in self.ir.globals:
                grad = w.arg(f"grad_{g}_ptr")
                pointer = w.arg(f"{g}_ptr")
                w.line(f"g = tl.load({grad})")
                w.line(f"tl.store({grad}, 0.0)")
                w.line(f"tl.store({pointer}, tl.load({pointer}) - step * g)")
            w.depth -= 1
        w.line("for slot in range(0, width):")
        w.depth += 1
        w.line("edge = edge_base + slot * C + rows")
        w.line("feature = tl.load(edge_feature_ptr + edge)")
        w.line("present = feature >= 0")
        w.line("feature = tl.where(present, feature, 0).to(tl.int64)")
        for p in self.ir.params:
            bits = w.arg(f"{grad_name(p.name)}_bits_ptr")
            pointer = w.arg(f"{p.name}_ptr")
            offsets = self._vector_offsets("feature") if p.vector else "feature"
            mask = "present[:, None] & lane_valid[None, :]" if p.vector else "present"
            w.line(f"g = tl.atomic_xchg({bits} + {offsets}, 0, mask={mask}).to(tl.float32, bitcast=True)")
            w.line(f"changed = {mask} & (g != 0.0)")
            w.line(f"value = tl.load({pointer} + {offsets}, mask=changed, other=0.0)")
            w.line(f"tl.store({pointer} + {offsets}, value - step * g, mask=changed)")
        w.depth -= 1
        name = f"{self.prefix}_update"
        return self._function(name, w), KernelSpec(name, "update", ("update",), tuple(w.args))

    def _function(self, name, w):
        signature = ",\n".join(f"    {a}" for a in w.args + ["HAS_VALUES: tl.constexpr", "C: tl.constexpr"])
        body = "\n".join(w.lines)
        return f"@triton.jit\ndef {name}(\n{signature},\n):\n{body}\n"

    def generate(self, plan_text=""):
        graph = build_stage_graph(self.ir)
        groups = kernel_groups(graph, self.kernels, "train")
        group_of = {stage: i for i, group in enumerate(groups) for stage in group}
        # chunk-local data crossing a kernel boundary goes through global memory
        local_inputs, local_outputs, buffers = {}, {}, []
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
                buffers.append((name, vector))
        functions, train = [], []
        for group in groups:
            if group == ["update"]:
                source, spec = self._update_kernel()
            else:
                source, spec = self._chunk_kernel("train", group, local_inputs, local_outputs)
            functions.append(source)
            train.append(spec)
        source, predict = self._chunk_kernel("predict", ["aggregate", "predict"], {}, {})
        functions.append(source)
        header = self._header(plan_text)
        helpers = "\n\n".join(textwrap.dedent(inspect.getsource(h.fn)) for h in triton_helpers.HELPERS)
        block_k = (f"# factors per vector param, and the power-of-two block that holds them\n"
                   f"K = tl.constexpr({self.k})\nBLOCK_K = tl.constexpr({self.block_k})\n\n\n") if self.k else ""
        text = (header + "\nimport triton\nimport triton.language as tl\n\n" + block_k
                + helpers + "\n\n\n" + "\n\n".join(functions))
        return GeneratedKernels(self.ir.name, self.ir.hash, plan_text, text, tuple(train), predict,
                                tuple(buffers))

    def _header(self, plan_text):
        lines = [f"# Generated by alac from model '{self.ir.name}' (IR {self.ir.hash[:16]}); do not edit.",
                 f"# plan: {plan_text or '-'}; kernels: {self.kernels}",
                 "#"]
        lines += [f"# {line}" for line in self.ir.lines()]
        return "\n".join(lines) + "\n"


def generate_kernels(ir, kernels="fused", plan_text=""):
    return KernelGenerator(ir, kernels).generate(plan_text)
