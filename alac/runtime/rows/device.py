"""Rows where the kernels' plan places them: in GPU memory, or a param's rows in pinned host memory
read and updated through mapped pointers (Plan.placement): the store the trainers start with."""

from __future__ import annotations

from alac.runtime.execution.executor import Executor
from alac.runtime.rows.store import RowStore


class DeviceRows(Executor, RowStore):
    @property
    def kind(self):
        return "host" if self.plan.host_params else "device"
