"""Spread lines renumber the most frequent features so that no two share a cache line, and change
nothing else: every edge keeps its feature, and training gives the same model."""

import pytest
import torch

from alac.data.synthetic import criteo_like
from alac.errors import OptionError
from alac.models import zoo_model
from alac.plan import Plan
from alac.runtime.movement.layout import LayoutOptions, build_layout
from alac.runtime.movement.line_spread import IDS_PER_LINE, spread_count, spread_layout, zone_ids
from alac.train.trainer import Trainer


def _original_features(layout):
    real = layout.edge_feature >= 0
    return torch.where(real, layout.new_to_old[layout.edge_feature.clamp(min=0).long()], -1)


@pytest.mark.parametrize("start", [0, 5])
def test_the_zone_is_renumbered_and_every_edge_keeps_its_feature(start):
    data = criteo_like(2000, n_fields=6, seed=3, device="cpu")
    layout = build_layout(data, LayoutOptions(chunk_size=8), "cpu")
    before = {name: getattr(layout, name).clone() for name in ("edge_feature", "new_to_old", "frequency")}
    features = _original_features(layout)
    lines = spread_count(layout.n_features, start, 4)
    assert lines == 4
    end = start + IDS_PER_LINE * lines
    spread_layout(layout, start, 4)

    assert torch.equal(_original_features(layout), features)
    assert torch.equal(layout.old_to_new[layout.new_to_old.long()], torch.arange(layout.n_features, dtype=torch.int32))
    real = layout.edge_feature[layout.edge_feature >= 0].long()
    assert torch.equal(layout.frequency, torch.bincount(real, minlength=layout.n_features))
    # the hot prefix and the ids past the zone are as the frequency order left them
    for name in ("new_to_old", "frequency"):
        assert torch.equal(getattr(layout, name)[:start], before[name][:start])
        assert torch.equal(getattr(layout, name)[end:], before[name][end:])
    outside = (before["edge_feature"] < start) | (before["edge_feature"] >= end)
    assert torch.equal(layout.edge_feature[outside], before["edge_feature"][outside])
    # the zone's `lines` most frequent features start as many different lines, each at a line's first id
    top = zone_ids(start, lines)[:lines]
    assert torch.equal(layout.frequency[top], before["frequency"][start:start + lines])
    assert len(set((top // IDS_PER_LINE).tolist())) == lines and bool(((top - start) % IDS_PER_LINE == 0).all())
    assert not bool((layout.frequency[start:end][1:] <= layout.frequency[start:end][:-1]).all())


def test_nothing_to_spread_leaves_the_layout():
    data = criteo_like(200, n_fields=3, seed=1, device="cpu")
    layout = build_layout(data, LayoutOptions(chunk_size=8), "cpu")
    edges = layout.edge_feature.clone()
    assert spread_count(layout.n_features, layout.n_features - 5, 8) == 0
    assert spread_layout(layout, layout.n_features - 5, 8) is layout and torch.equal(layout.edge_feature, edges)


def _fit(plan, data, valid):
    trainer = Trainer(zoo_model("lr"), lr=1.0, plan=plan, backend="reference", device="cpu", seed=2)
    trainer.fit(data, epochs=3)
    return trainer, trainer.predict(valid)


def test_a_sync_trainer_spreads_and_trains_the_same_model():
    data, valid = criteo_like(3000, n_fields=8, seed=4, device="cpu"), criteo_like(500, n_fields=8, seed=5,
                                                                                   device="cpu")
    plan = Plan(chunk_size=16, batch_size=256)
    spread, spread_scores = _fit(plan, data, valid)
    plain, plain_scores = _fit(Plan(chunk_size=16, batch_size=256, spread_lines=0), data, valid)
    frequency = spread.train_layout.frequency
    assert plan.lines_to_spread > 0 and not bool((frequency[1:] <= frequency[:-1]).all())
    assert bool((plain.train_layout.frequency[1:] <= plain.train_layout.frequency[:-1]).all())
    assert not torch.equal(spread.feature_order, plain.feature_order)
    torch.testing.assert_close(spread_scores, plain_scores, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(torch.tensor([r["train_loss"] for r in spread.history]),
                               torch.tensor([r["train_loss"] for r in plain.history]))
    # the parameters of each original feature are the same
    w_spread = spread.executor.state.params["w"][spread.train_layout.old_to_new.long()]
    w_plain = plain.executor.state.params["w"][plain.train_layout.old_to_new.long()]
    torch.testing.assert_close(w_spread, w_plain, rtol=1e-5, atol=1e-6)


def test_async_plans_keep_the_frequency_order_and_negative_lines_are_refused():
    assert Plan(semantics="async").lines_to_spread == 0 and Plan(semantics="async", spread_lines=8).lines_to_spread == 8
    assert "spread_lines=1024" in Plan().describe()
    with pytest.raises(OptionError, match="spread_lines must be >= 0"):
        Plan(spread_lines=-1)
