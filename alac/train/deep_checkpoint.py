"""What a field model's checkpoint holds beside its weights, checked as it is read back (alac.train.deep):
the record of where its run ended, its extras, and host copies of a network's weights."""

from __future__ import annotations

import torch

from alac.data.read_options import check_read_options
from alac.errors import DataError
from alac.runtime.device.memory import available_bytes


def state_copy(network, weights=None):
    """The network's weights (or `weights`, a state_dict of it in another form) in host memory, or None
    where they take more than a quarter of what is free there (the guard then keeps a diverged run's
    last weights)."""
    weights = network.state_dict() if weights is None else weights
    size = sum(t.numel() * t.element_size() for t in weights.values())
    free = available_bytes("cpu")
    if free is not None and size > free // 4:
        return None
    return {name: t.detach().to("cpu", copy=True) for name, t in weights.items()}


def checked_resume_point(point, where):
    """A checkpoint's resume point (None: it has none), a DataError where it is not what alac writes."""
    if point is None:
        return None
    kinds = {"epoch": int, "best_loss": float, "waited": int, "generator": torch.Tensor, "dense": dict}
    if not isinstance(point, dict) or any(not isinstance(point.get(key), kind) for key, kind in kinds.items()) or \
            not isinstance(point.get("last_weights"), (dict, type(None))) or \
            not isinstance(point.get("best_epoch"), (int, type(None))):
        raise DataError("its record of where the run ended is damaged", path=where)
    return point


def checked_extras(extras, where):
    """A checkpoint's extras (how its training data was read), a DataError naming `where` where they
    are not what alac writes: a dict with a data_options record and a field map (an integer tensor)."""
    if not isinstance(extras, dict):
        raise DataError(f"its extras are a {type(extras).__name__}, not a dict", path=where)
    check_read_options(extras.get("data_options", {}), where)
    for key in ("field_of", "field_ids"):
        value = extras.get(key)
        if value is not None and not (isinstance(value, torch.Tensor) and value.dim() == 1
                                      and not value.is_floating_point()):
            raise DataError(f"its field map is a {type(value).__name__}, not a 1-D integer tensor", path=where)
    return dict(extras)
