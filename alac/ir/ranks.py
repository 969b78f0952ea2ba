"""Ranks: the axes every binder of a ModelIR varies over, inferred once for both code generators.

"uniform" (one value per program: globals, L2 coefficients), "row" (one per sample), "lane" (per
sample and factor lane), "edge" (per edge: a kernel's [S, C] tile of slots and rows) and "edge_lane".
`binder_ranks` gives them in the kernels' view, where edges are tiles; the PyTorch reference, whose
edges are rows of a flat tensor, maps them with `flat_rank`.
"""

from __future__ import annotations

import sympy as sp

from alac.ir.functions import FactorSum
from alac.ir.names import delta_name, l2_name

RANK_AXES = {"uniform": (), "row": ("row",), "lane": ("row", "lane"), "edge": ("slot", "row"),
             "edge_lane": ("slot", "row", "lane")}

def rank_with_axes(axes):
    axes = set(axes)
    return next(rank for rank, own in RANK_AXES.items() if set(own) == axes)


def axes_of(expr, ranks):
    """The axes expr varies over: its symbols' axes (a FactorSum drops the lane axis)."""
    axes = set()
    stack = [expr]
    while stack:
        node = stack.pop()
        if isinstance(node, FactorSum):
            axes |= axes_of(node.args[0], ranks) - {"lane"}
        elif isinstance(node, sp.Symbol):
            axes |= set(RANK_AXES[ranks[node.name]])
        else:
            stack.extend(node.args)
    return axes


def rank_of(expr, ranks):
    """The rank of expr: the union of its symbols' axes (a FactorSum drops the lane axis)."""
    return rank_with_axes(axes_of(expr, ranks))


def binder_ranks(ir, given_deltas=False):
    """The rank of every symbol and binder of ir's programs; an output (not a temp) of uniform rank is
    given one value per row, as every sample has its own. given_deltas: the edge program's dLoss/dAccum
    come from outside (alac.nn: a deep part's gradients), one per lane of a vector accum, whatever
    the model's own loss makes of them."""
    ranks = {"x": "edge", "y": "row"}
    for p in ir.params:
        ranks[p.name] = "edge_lane" if p.vector else "edge"
        ranks[l2_name(p.name)] = "uniform"
    for a in ir.accums:
        ranks[a.name] = "lane" if a.vector else "row"
    for g in ir.globals:
        ranks[g] = "uniform"
    for program in (ir.sample_program, ir.predict_program, ir.edge_program):
        if given_deltas and program is ir.edge_program:
            ranks.update({delta_name(a.name): "lane" if a.vector else "row" for a in ir.accums})
        for d in program:
            rank = rank_of(d.expr, ranks)
            ranks[d.name] = "row" if not d.name.startswith("t") and rank == "uniform" else rank
    return ranks


def flat_rank(rank):
    """A rank where edges are the rows of a flat tensor (the PyTorch reference)."""
    return {"edge": "row", "edge_lane": "lane"}.get(rank, rank)


# how a rank reads in a printed IR listing: f32[axes]
LISTED = {"uniform": "", "row": "sample", "lane": "sample,k", "edge": "edge", "edge_lane": "edge,k"}
