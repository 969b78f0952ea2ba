"""The row store of a planner's placement (alac.runtime.planning.param_planner's ParamPlacement.mode):
a new store registers its class here; the trainers ask for a store by placement only."""

from __future__ import annotations

from dataclasses import dataclass

from alac.runtime.rows.cached_executor import CachedExecutor
from alac.runtime.rows.device import DeviceRows
from alac.runtime.rows.disk import DiskRows
from alac.runtime.rows.fae_executor import FaeExecutor

# placement mode -> a store class with planned(executor arguments, placement, TrainingRows)
STORES = {"hybrid_hash": CachedExecutor, "fae": FaeExecutor, "disk": DiskRows}


@dataclass(frozen=True)
class TrainingRows:
    """What a store may build on: the training data set, its layout, and labels_of(layout) (the
    layout's labels as the model reads them)."""

    dataset: object
    layout: object
    labels_of: object


def planned_store(placement, executor_arguments, training):
    """The store the placement names (rows on the device for None or "device"); executor_arguments:
    an Executor's (model, plan, backend, device, seed, optimizer, schedule, exact_l2)."""
    if placement is None or placement.mode == "device":
        return DeviceRows(*executor_arguments)
    return STORES[placement.mode].planned(executor_arguments, placement, training)
