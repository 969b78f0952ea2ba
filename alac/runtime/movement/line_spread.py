"""Spread lines: the most frequent features' ids placed so that no two of them share a cache line.

The layout numbers features by descending frequency, so the most frequent ones are neighbours in
every param: 32 of them share a 128-byte line of a 4-byte param. A sync epoch adds every edge's change
with an atomic at the end of each batch, from all programs at once, and the L2 serializes a line's
atomics: sync LR at batch 1024 ran faster with the next 32 x 1024 ids spread, results unchanged
(benchmarks/sync_resident.py). Spreading is a
renumbering only: the ids [start, start + 32 L) (start: the plan's hot segment, which keeps its prefix)
hold the same features as before, rank r of them at id start + (r mod L) * 32 + r div L, so that the L
most frequent start L different lines and each line's others are L, 2L, ... ranks colder.
"""

from __future__ import annotations

import torch

# 128-byte L2 lines of 4-byte params
IDS_PER_LINE = 32
# edges renumbered per step: a gather's int64 temporaries stay well under a GPU's free memory
EDGE_BLOCK = 1 << 26


def spread_count(n_features, start, lines):
    """Lines actually spread: as many of `lines` as the ids after `start` fill."""
    return max(0, min(lines, (n_features - start) // IDS_PER_LINE))


def zone_ids(start, lines, device=None):
    """The new id of each rank of the zone [start, start + 32 lines): rank r's id."""
    rank = torch.arange(IDS_PER_LINE * lines, device=device)
    return start + (rank % lines) * IDS_PER_LINE + rank // lines


def spread_layout(layout, start, lines):
    """Renumber the ids of the layout's zone (module docstring) in place, its edges, maps and
    frequencies (in place: a resident layout's edges may be most of the GPU); returns the layout."""
    lines = spread_count(layout.n_features, start, lines)
    if not lines:
        return layout
    end = start + IDS_PER_LINE * lines
    new_of_rank = zone_ids(start, lines, layout.edge_feature.device)
    for first in range(0, layout.edge_feature.numel(), EDGE_BLOCK):
        block = layout.edge_feature[first:first + EDGE_BLOCK]
        in_zone = (block >= start) & (block < end)
        block[in_zone] = new_of_rank[block[in_zone].long() - start].to(block.dtype)
    zone_old = layout.new_to_old[start:end].clone()
    zone_frequency = layout.frequency[start:end].clone()
    layout.new_to_old[new_of_rank] = zone_old
    layout.frequency[new_of_rank] = zone_frequency
    layout.old_to_new[zone_old.long()] = new_of_rank.to(layout.old_to_new.dtype)
    return layout
