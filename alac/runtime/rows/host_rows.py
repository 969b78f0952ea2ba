"""The executors whose rows live in pinned host memory, the Trainer's placements over the GPU budget
(CachedExecutor: a HybridHash cache; FaeExecutor: FAE's hot table): the executor of every row
(`whole`: every param in host memory, sync kernels over mapped rows) and one on the GPU (`working`),
answering as an Executor does. Training is each placement's own; everything else reads the host
table, made current first."""

from __future__ import annotations

import dataclasses

from alac.runtime.execution.executor import Executor
from alac.runtime.execution.state import ModelState
from alac.runtime.rows.store import RowStore


def _mirrored(name):
    """A counter or setting both executors keep alike: read from the GPU's, set on both."""
    def set_both(self, value):
        setattr(self.whole, name, value)
        setattr(self.working, name, value)
    return property(lambda self: getattr(self.working, name), set_both)


class HostRowsExecutor(RowStore):
    host_rows = True

    def __init__(self, model, plan, backend, device, seed, optimizer, schedule, exact_l2, working_plan):
        """working_plan: the GPU executor's plan (plan with its hot segment within the rows it holds)."""
        params = list(model.declarations()[0])
        host_plan = dataclasses.replace(plan, semantics="sync", placement=tuple((name, "host") for name in params))
        self.whole = Executor(model, host_plan, backend, device, seed, optimizer, schedule, exact_l2)
        self.working = Executor(model, working_plan, backend, device, seed, optimizer, schedule, exact_l2)
        self._initialized = False

    value_scale = _mirrored("value_scale")
    batches_done = _mirrored("batches_done")
    # what the Trainer and the writers read, from the executor of every row
    ir = property(lambda self: self.whole.ir)
    plan = property(lambda self: self.working.plan)
    optimizer = property(lambda self: self.whole.optimizer)
    schedule = property(lambda self: self.working.schedule)
    exact_l2 = property(lambda self: self.whole.exact_l2)
    seed = property(lambda self: self.whole.seed)
    backend_name = property(lambda self: self.working.backend_name)
    device = property(lambda self: self.working.device)

    def _current(self):
        """The executor of every row, its rows current (the GPU's copies written back)."""
        raise NotImplementedError

    def _restored(self):
        """The GPU's rows after the host table took a restored state."""
        raise NotImplementedError

    @property
    def state(self):
        """Every row's current state; None before initialize."""
        return self._current().state if self._initialized else self.whole.state

    @state.setter
    def state(self, value):
        """A restored state (a snapshot, a checkpoint): the host table takes it, pinned again (a clone or
        a loaded checkpoint is pageable, which the GPU cannot map); the GPU's rows follow."""
        if value is not None:
            value = ModelState.placed(value.params, value.globals, value.states, self.whole.device,
                                      host=self.whole.plan.host_params)
        self.whole.state = value
        if self._initialized and value is not None:
            self._restored()

    def sample_loss(self, layout, labels, max_rows=4096):
        return self._current().sample_loss(layout, labels, max_rows)

    def predict_slots(self, layout, labels=None):
        return self._current().predict_slots(layout, labels)

    def predict(self, layout):
        return self._current().predict(layout)

    def settings(self, l2=None):
        return self.working.settings(l2)
