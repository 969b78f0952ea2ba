"""ModelIR -> PyTorch functions of the same expressions, for the reference executor.

Four functions, generated as Python source from the IR (printed with the TORCH dialect) and executed
once: contributions (per edge), sample (per sample: loss, dLoss/dAccum, dLoss/dGlobal), predict (per
sample) and edge (per edge: parameter gradients). Rows are 1-D tensors, lanes [rows, k] tensors,
globals 0-d tensors.
"""

from __future__ import annotations

import torch

from alac.codegen.printer import TORCH, ExpressionPrinter
from alac.ir.names import l2_name
from alac.ir.ranks import binder_ranks, flat_rank, rank_of


def _softplus(z):
    return torch.clamp_min(z, 0.0) + torch.log1p(torch.exp(-torch.abs(z)))


def _maximum(a, b):
    # torch.maximum takes tensors only; a number operand becomes a clamp
    if not isinstance(a, torch.Tensor):
        a, b = b, a
    return torch.maximum(a, b) if isinstance(b, torch.Tensor) else torch.clamp_min(a, b)


def _minimum(a, b):
    if not isinstance(a, torch.Tensor):
        a, b = b, a
    return torch.minimum(a, b) if isinstance(b, torch.Tensor) else torch.clamp_max(a, b)


class TorchPrograms:
    def __init__(self, ir, given_deltas=False):
        """given_deltas: the edge program takes dLoss/dAccum per lane of a vector accum (alac.nn)."""
        self.ir = ir
        # the binders' ranks (alac.ir.ranks), with edges as the rows of flat tensors
        ranks = {name: flat_rank(rank) for name, rank in binder_ranks(ir, given_deltas).items()}
        self.ranks = ranks
        self.printer = ExpressionPrinter(TORCH, {}, ranks)
        updates = [(kind, update) for kind, update in (("scalar", ir.optimizer.scalar), ("vector", ir.optimizer.vector))
                   if update is not None]
        self.source = "\n\n".join([
            self._function("contributions", ["x"] + [p.name for p in ir.params],
                           [(a.name, a.contribution) for a in ir.accums], ()),
            self._function("sample", [a.name for a in ir.accums] + list(ir.globals) + ["y"],
                           [], ir.sample_program),
            self._function("predict", [a.name for a in ir.accums] + list(ir.globals), [], ir.predict_program),
            self._function("edge", ["x"] + [p.name for p in ir.params]
                           + [d.name for d in ir.accum_deltas] + [l2_name(p.name) for p in ir.params],
                           [], ir.edge_program),
        ] + [self._update_function(f"update_{kind}", update) for kind, update in updates]
          + [self._derive_function(f"derive_{kind}", update) for kind, update in updates if update.derived])
        namespace = {"torch": torch, "_softplus": _softplus, "_maximum": _maximum, "_minimum": _minimum}
        exec(compile(self.source, f"<alac reference program of {ir.name}>", "exec"), namespace)
        self.contributions = namespace["contributions"]
        self.sample = namespace["sample"]
        self.predict = namespace["predict"]
        self.edge = namespace["edge"]
        self.update_scalar = namespace["update_scalar"]
        self.update_vector = namespace.get("update_vector")
        self.derive_scalar = namespace.get("derive_scalar")
        self.derive_vector = namespace.get("derive_vector")

    def _update_function(self, name, update):
        """new_p, new_s_<state> of the optimizer for rows of one param ([n] or [n, k] tensors)."""
        outputs = ["new_p"] + [f"new_s_{st}" for st, _, _ in self.ir.optimizer.states]
        return self._optimizer_function(name, update, update.program, ["p", "g"], outputs)

    def _derive_function(self, name, update):
        """The param from its state (Optimizer.param_from_state), for rows of one param."""
        return self._optimizer_function(name, update, update.derived, [], ["derived_p"])

    def _optimizer_function(self, name, update, program, leading, outputs):
        optimizer = self.ir.optimizer
        lane = "lane" if update.vector else "row"
        ranks = {"p": lane, "g": lane, "lr": "uniform", "l1": "uniform", "l2": "uniform", "K": "uniform"}
        ranks.update({f"h_{h}": "uniform" for h in optimizer.hypers})
        ranks.update({f"s_{st}": ("row" if row else lane) for st, _, row in optimizer.states})
        for d in program:
            ranks[d.name] = rank_of(d.expr, ranks)
        printer = ExpressionPrinter(TORCH, {}, ranks)
        args = leading + [f"s_{st}" for st, _, _ in optimizer.states] + ["lr"] + \
            [f"h_{h}" for h in optimizer.hypers] + ["l1", "l2", "K"]
        lines = [f"def {name}({', '.join(args)}):"]
        lines += [f"    {d.name} = {printer(d.expr, ranks[d.name])}" for d in program]
        lines.append("    return {" + ", ".join(f"{o!r}: {o}" for o in outputs) + "}")
        return "\n".join(lines)

    def output_rank(self, name):
        return self.ranks[name]

    def _function(self, name, args, direct, program):
        lines = [f"def {name}({', '.join(args)}):"]
        outputs = []
        for out, expr in direct:
            rank = rank_of(expr, self.ranks)
            lines.append(f"    {out} = {self.printer(expr, 'lane' if rank == 'lane' else 'row')}")
            outputs.append(out)
        for d in program:
            rank = self.ranks[d.name]
            lines.append(f"    {d.name} = {self.printer(d.expr, 'lane' if rank == 'lane' else 'row')}")
            if not d.name.startswith("t"):
                outputs.append(d.name)
        lines.append("    return {" + ", ".join(f"{o!r}: {o}" for o in outputs) + "}")
        return "\n".join(lines)
