"""Rows whose slot s holds field s, one id each (Criteo-shaped one-hot rows): what a block store needs
to move its ids as ranks within their field (alac.runtime.movement.wire.FieldRanks). Pass 1 over the
pieces finds whether the rows are so and each feature's one field; pass 2 checks each laid-out block
against it; an opened store rebuilds the ranks from its field_of.npy.
"""

from __future__ import annotations

import torch

from alac.errors import DataError
from alac.runtime.movement import wire
from alac.runtime.movement.block_manifest import FIELD_ARRAY


class SlotFields:
    """Whether the rows seen hold one id of each field, field s in slot s, and every feature one field
    (what ids as field ranks need, wire.FieldRanks); `why` says where not."""

    def __init__(self):
        self.width, self.field_of, self.why = None, torch.empty(0, dtype=torch.int64), None

    def add(self, piece):
        if self.why is not None or piece.n_rows == 0:
            return
        width = self.width if self.width is not None else piece.n_fields
        fields = piece.fields.long().cpu() if piece.fields is not None else None
        if fields is None or width < 1 or fields.numel() != piece.n_rows * width:
            self.why = "the rows are not one id of each field"
            return
        in_order = (piece.row_lengths().cpu() == width).all() and (fields.view(-1, width) == torch.arange(width)).all()
        if not bool(in_order):
            self.why = f"the rows do not hold fields 0 to {width - 1} in order, one id each"
            return
        self.width = width
        ids = piece.indices.long().cpu()
        grown = max(self.field_of.numel(), piece.n_features)
        self.field_of = torch.nn.functional.pad(self.field_of, (0, grown - self.field_of.numel()), value=-1)
        known = self.field_of[ids]
        self.field_of[ids] = fields
        if not bool(((known < 0) | (known == fields)).all() and (self.field_of[ids] == fields).all()):
            self.why = "a feature occurs in more than one field"

    def field_of_new(self, new_to_old):
        """Each feature's field in the new order (int32; a feature never seen: field 0)."""
        field_of = torch.nn.functional.pad(self.field_of, (0, new_to_old.numel() - self.field_of.numel()), value=-1)
        return field_of[new_to_old.long().cpu()].clamp_min(0).int()

    def ranks(self, new_to_old, chunk_size):
        return wire.FieldRanks.of_fields(self.field_of_new(new_to_old), self.width, chunk_size)


def check_slot_fields(layout, ranks):
    """Pass 2 laid the rows out with field s in slot s, as pass 1 found them (pieces() gave the same rows)."""
    real = layout.edge_feature >= 0
    slot = ranks.slot_of(layout.edge_feature.numel(), layout.edge_feature.device)
    if layout.edge_field is None or not torch.equal(layout.edge_field[real].long(), slot[real]):
        raise DataError("the pieces' rows changed between the two passes over them (a field left its slot)")


def field_ranks(meta, features):
    """The store's wire.FieldRanks (None where its words are ids)."""
    if meta.get("field_ranks") is None:
        return None
    return wire.FieldRanks.of_fields(torch.as_tensor(features[FIELD_ARRAY]), meta["field_ranks"],
                                     meta["options"]["chunk_size"])
