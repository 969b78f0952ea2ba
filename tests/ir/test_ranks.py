"""Ranks are inferred once per IR (alac.ir.ranks) and printed with every binder."""

from alac.ir.pipeline import lower
from alac.ir.ranks import binder_ranks, flat_rank
from tests.zoo_models import ZOO


def test_fm_binders_have_the_ranks_of_its_maths():
    ir = lower(ZOO["fm"]())
    ranks = binder_ranks(ir)
    # per edge: the gradients of w (one value) and v (k lanes); per sample: loss and dLoss/dAccum
    assert ranks["grad_w"] == "edge" and ranks["grad_v"] == "edge_lane"
    assert ranks["loss"] == "row" and ranks["d_vx"] == "lane" and ranks["d_wx"] == "row"
    # the gradient of a global is per sample, though it reads no per-sample symbol in LR-like models
    assert ranks["dg_b"] == "row"
    assert {flat_rank(r) for r in ranks.values()} <= {"uniform", "row", "lane"}


def test_the_listing_prints_every_binder_with_its_rank_and_the_hash_ignores_them():
    ir = lower(ZOO["fm"]())
    listing = str(ir)
    assert "grad_v: f32[edge,k] = " in listing and "loss: f32[sample] = " in listing
    assert "d_vx: f32[sample,k] = " in listing
    unranked = "\n".join(ir.lines(ranked=False))
    assert "f32[" not in unranked and "grad_v[k] = " in unranked
