"""ModelIR -> the Triton kernels of alac.nn: a model's Aggregate over bags, and its Apply with
dLoss/dAccum given from outside (a deep part's gradients, through autograd).

A batch is E entries (feature, value, bag); every program takes an [S, C] tile of consecutive
entries, so that bags may come in any order (per-field bags of one-hot rows, packed tables' keys):

- aggregate: every entry's contributions added atomically into its bag's accums ([n_bags] or
  [n_bags, K], zeroed by the caller);
- gradients: every entry's param gradients (the model's edge program, on the params and the bag's
  dLoss/dAccum of that moment) added into per-feature gradient sums, and the feature flagged;
- update: the first entry of every flagged feature takes its flag, its summed gradient (zeroing
  it) and applies the optimizer's rule once, as the sync flow kernels' update does;
- apply_async: instead of the last two, every entry's gradient through the optimizer at once, its
  change added atomically (the async flow kernels' apply): entries of one row race as Hogwild's do,
  and no gradient sums are kept.

Three launches a step per table (two async), whatever the model: the reference programs
(vectorized torch) take dozens. Param and state accesses go through the access layer the flow kernels use
(alac.codegen.param_access); the kernels and their typed arguments are golden-tested.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from alac.codegen import manifest as m
from alac.codegen.functions import kernel_source
from alac.codegen.kernels import _manifest, module_source
from alac.codegen.manifest import KernelSpec, next_power_of_two
from alac.codegen.param_access import ParamAccess
from alac.codegen.printer import TRITON, TRITON_FULL_LANES, ExpressionPrinter
from alac.codegen.variants import KernelVariant
from alac.codegen.writer import Writer
from alac.ir.names import delta_name, grad_name
from alac.ir.ranks import binder_ranks, rank_of

# The call's entries and the bags' dLoss/dAccum: bound per call by the launcher.
ENTRY_FEATURE = m.Argument("entry_feature_ptr", "entries", "feature", "int64", ("entries",), lifetime="call")
ENTRY_VALUE = m.Argument("entry_value_ptr", "entries", "value", "float32", ("entries",), lifetime="call")
ENTRY_BAG = m.Argument("entry_bag_ptr", "entries", "bag", "int64", ("entries",), lifetime="call")
N_ENTRIES = m.size("entries", "n_entries")
LR = m.Argument("lr", "launch", "lr", "float", lifetime="call")
SCALE = m.Argument("scale", "launch", "scale", "float", lifetime="call")


def accum_output(accum):
    return m.Argument(f"{accum.name}_ptr", "output", accum.name, shape=("bags", "K") if accum.vector else ("bags",),
                      lifetime="call")


def accum_delta(accum):
    return m.Argument(f"{delta_name(accum.name)}_ptr", "deltas", accum.name,
                      shape=("bags", "K") if accum.vector else ("bags",), lifetime="call")


@dataclass(frozen=True)
class GeneratedBagKernels:
    model: str
    ir_hash: str
    source: str
    aggregate: KernelSpec
    gradients: KernelSpec
    update: KernelSpec
    apply_async: KernelSpec
    manifest: tuple


class BagKernelGenerator(ParamAccess):
    """The kernels of a model's aggregate-only IR (alac.ir.pipeline.lower(aggregate_only=True)) over
    tables stored as param_dtype (float32, bfloat16 or float16: the pointers' type; sums and updates
    in float32)."""

    def __init__(self, ir, param_dtype="float32"):
        self.ir = ir
        self.param_dtype = param_dtype
        self.optimizer = ir.optimizer
        # the access layer's choices for these kernels: rows on the device, sync, no hot segment
        self.variant = KernelVariant()
        self.hot = self.asynchronous = self.deterministic = self.edge_updates = False
        self.params = {p.name: p for p in ir.params}
        self.k = ir.factor_size
        self.block_k = next_power_of_two(self.k) if self.k else 0
        self.lane_masks = self.k != self.block_k
        self.dialect = TRITON if self.lane_masks else TRITON_FULL_LANES
        # an entry is an edge of the tile; the bags' dLoss/dAccum are read per entry
        self.ranks = binder_ranks(ir)
        for accum in ir.accums:
            self.ranks[delta_name(accum.name)] = "edge_lane" if accum.vector else "edge"
        for d in ir.edge_program:
            self.ranks[d.name] = rank_of(d.expr, self.ranks)
        self.printer = ExpressionPrinter(self.dialect, {}, self.ranks)
        self.prefix = f"alac_{ir.name}_{ir.hash[:8]}_bags"

    def _param_argument(self, p):
        """The access layer's argument of p's rows, typed as the tables store them."""
        return dataclasses.replace(super()._param_argument(p), dtype=self.param_dtype)

    def _entries(self, w, bags):
        """The program's [S, C] tile of entries: their features (0 where absent), values, bags."""
        w.line("edge = tl.program_id(0) * (S * C) + tl.arange(0, S)[:, None] * C + rows[None, :]")
        w.line(f"present = edge < {w.arg(N_ENTRIES)}")
        w.line(f"feature = tl.load({w.arg(ENTRY_FEATURE)} + edge, mask=present, other=0)")
        if bags:
            w.line(f"bag = tl.load({w.arg(ENTRY_BAG)} + edge, mask=present, other=0)")

    def _values(self, w):
        w.line("if HAS_VALUES:")
        w.line(f"    x = tl.load({w.arg(ENTRY_VALUE)} + edge, mask=present, other=0.0)")
        w.line("else:")
        w.line("    x = tl.where(present, 1.0, 0.0)")

    def _params(self, w, names):
        """Load the named params, in float32 (narrow tables are summed and updated in float32)."""
        for p in self.ir.params:
            if p.name in names:
                self._load_param(w, p.name)
                w.line(f"{p.name} = {p.name}.to(tl.float32)")

    def _per_bag(self, accum, bag):
        """Offsets and mask of every entry's bag in an accum's [n_bags] or [n_bags, K] tensor."""
        if accum.vector:
            return self._vector_offsets(bag, True), self._lane_mask("present", True)
        return bag, "present"

    def _aggregate(self):
        w = Writer()
        self._entries(w, bags=True)
        self._values(w)
        self._params(w, _read_by(a.contribution for a in self.ir.accums))
        for accum in self.ir.accums:
            offsets, mask = self._per_bag(accum, "bag")
            rank = "edge_lane" if accum.vector else "edge"
            w.line(f"{accum.name} = {self.printer(accum.contribution, rank)}")
            w.line(f"tl.atomic_add({w.arg(accum_output(accum))} + {offsets}, {accum.name}, mask={mask}, "
                   "sem=\"relaxed\")")
        return self._kernel("aggregate", w)

    def _edge_gradients(self, w, every_param=False):
        """The entries' param gradients (grad_<p>) from their bags' dLoss/dAccum; every_param: every
        param loaded (an optimizer's change reads it), not only those the gradients read."""
        self._entries(w, bags=True)
        self._values(w)
        self._params(w, set(self.params) if every_param else _read_by(d.expr for d in self.ir.edge_program))
        for accum in self.ir.accums:
            offsets, mask = self._per_bag(accum, "bag")
            w.line(f"{delta_name(accum.name)} = tl.load({w.arg(accum_delta(accum))} + {offsets}, mask={mask}, "
                   "other=0.0)")
        for p in self.ir.params:
            w.arg(m.regularizer("gradient_l2", p.name))
        for d in self.ir.edge_program:
            w.line(f"{d.name} = {self.printer(d.expr, self.ranks[d.name])}")

    def _gradients(self):
        w = Writer()
        self._edge_gradients(w)
        w.line(f"tl.store({w.arg(m.TOUCHED)} + feature, tl.full([S, C], 1, tl.int32), mask=present)")
        for p in self.ir.params:
            self._add_at(w, p, m.grad(p.name, p.vector), "feature", grad_name(p.name), "present")
        return self._kernel("gradients", w)

    def _update(self):
        w = Writer()
        self._entries(w, bags=False)
        w.arg(LR)
        w.arg(SCALE)
        self._update_touched(w)
        return self._kernel("update", w)

    def _apply_async(self):
        w = Writer()
        self._edge_gradients(w, every_param=True)
        w.arg(LR)
        w.arg(SCALE)
        for p in self.ir.params:
            self._optimizer_step(w, p, "feature", "present", True, f"{grad_name(p.name)} * scale", "delta",
                                 param_loaded=True)
        return self._kernel("apply_async", w)

    def _kernel(self, role, w):
        name = f"{self.prefix}_{role}"
        return kernel_source(name, w), KernelSpec(name, role, (role,), tuple(w.args))

    def generate(self):
        built = [self._aggregate(), self._gradients(), self._update(), self._apply_async()]
        kernels = [source for source, _ in built]
        specs = [spec for _, spec in built]
        header = [f"# Generated by alac from model '{self.ir.name}' (IR {self.ir.hash[:16]}); do not edit.",
                  "# alac.nn: aggregate over bags, gradients and update of dLoss/dAccum given from outside"]
        header += [f"# {line}" for line in self.ir.declaration_lines(derivatives=False)]
        text = module_source("\n".join(header) + "\n", self.k, self.block_k, kernels)
        return GeneratedBagKernels(self.ir.name, self.ir.hash, text, *specs, _manifest(specs))


def _read_by(exprs):
    return {symbol.name for expr in exprs for symbol in expr.free_symbols}


def generate_bag_kernels(ir, param_dtype="float32"):
    return BagKernelGenerator(ir, param_dtype).generate()
