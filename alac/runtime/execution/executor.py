"""The executor: training epochs on a layout, in sync or async semantics, with any backend.

Sync semantics: an epoch visits the chunks in its reshuffled order, B / C chunks per batch. Every
sample of a batch reads the parameters as they were at the batch start (the train kernels only add
into gradient accumulators); the update kernel then applies the batch's summed gradient,
p <- p - lr / n * sum, with n the batch's real samples (the last chunk may be partial).

Async semantics: persistent programs take the epoch's chunks from the same reshuffled queue and
apply every sample's gradient at once, lock-free, with step lr / B per sample (B = plan.batch_size),
so one lr means the same step size in both semantics.
"""

from __future__ import annotations

import dataclasses
import math
import sys
from dataclasses import dataclass

import torch

from alac.codegen import triton_installed
from alac.errors import DataError, OptionError
from alac.ir.pipeline import lower
from alac.optimizers import get_optimizer
from alac.plan import Plan
from alac.runtime.device.memory import check_feature_tables
from alac.runtime.execution.epoch import Segment, Segmented
from alac.runtime.execution.reference import ReferenceBackend
from alac.runtime.execution.schedule import LearningRateSchedule, batch_scales
from alac.runtime.execution.state import ModelState, row_bytes_of
from alac.runtime.movement.layout import default_device
from alac.runtime.movement.streams import BlockStatistics

BACKENDS = ("triton", "interpret", "reference")
_NOTICED = set()


def _notice(message):
    if message not in _NOTICED:
        _NOTICED.add(message)
        print(f"alac: {message}", file=sys.stderr)


def resolve_backend(backend, device=None):
    """(backend, device) actually used: triton without a GPU falls back to reference, with a notice."""
    if backend not in BACKENDS:
        raise OptionError(f"backend must be one of {BACKENDS}, got {backend!r}")
    if backend == "triton" and not torch.cuda.is_available():
        _notice("no CUDA GPU here: backend 'triton' falls back to 'reference' (PyTorch on the CPU)")
        return "reference", torch.device("cpu")
    if backend in ("interpret", "triton") and not triton_installed():
        raise OptionError(f"backend {backend!r} runs Triton kernels and Triton is not installed: pip install triton "
                          "(Linux), or use backend 'reference'")
    if backend == "interpret":
        return backend, torch.device("cpu")
    if backend == "triton":
        return backend, torch.device(device or "cuda")
    return backend, torch.device(device) if device is not None else default_device()


class LabelMap:
    """Maps a data set's labels to what the model's loss expects (binary models see -1/+1)."""

    def __init__(self, kind, positive=None, classes=None):
        self.kind = kind
        self.positive = positive
        self.classes = classes   # the label values it was fit on (binary), where known

    @classmethod
    def fit(cls, kind, labels, source="the training data"):
        if kind != "binary":
            if kind == "count" and bool((labels < 0).any()):
                raise DataError(f"count models need labels >= 0; {source} has {float(labels.min()):g}")
            return cls(kind)
        classes = torch.unique(labels.cpu())
        if classes.numel() > 2:
            shown = ", ".join(f"{float(c):g}" for c in classes[:5])
            raise DataError(f"a binary classifier needs two label values; {source} has "
                            f"{classes.numel()} ({shown}{', ...' if classes.numel() > 5 else ''})")
        return cls(kind, float(classes.max()), tuple(float(c) for c in classes))

    def model_labels(self, labels):
        if self.kind != "binary":
            return labels.float()
        return torch.where(labels == self.positive, 1.0, -1.0)

    def positive_mask(self, labels):
        return labels == self.positive


@dataclass(frozen=True)
class StepSettings:
    """The run-time coefficients of a training step."""

    gradient_l2: dict    # param -> l2 added to the gradient (lazily, per occurrence)
    update_l1: dict      # param -> l1 for the optimizer's rule
    update_l2: dict      # param -> l2 for the optimizer's rule (FTRL)
    hypers: dict         # optimizer hyper-parameter -> value
    decay_l2: dict = None  # exact L2: param -> l2 of a decay p *= 1 - lr l2 of every row after each batch


def step_settings(model, ir, optimizer, batch_size, value_scale, exact_l2=False, l2=None):
    """StepSettings of a model's step on batches of batch_size; l2 overrides the params' own L2."""
    params, _ = model.declarations()
    l2 = {name: param.l2 for name, param in params.items()} if l2 is None else l2
    l1 = {name: param.l1 for name, param in params.items()}
    in_gradient = ir.optimizer.gradient_l2 and not exact_l2
    in_update = not ir.optimizer.gradient_l2 and not exact_l2
    return StepSettings(
        gradient_l2={name: (l2.get(name, 0.0) if in_gradient else 0.0) for name in params},
        update_l1=l1, update_l2={name: (l2.get(name, 0.0) if in_update else 0.0) for name in params},
        hypers=optimizer.hyper_values(batch_size, value_scale),
        decay_l2={name: l2.get(name, 0.0) for name in params} if exact_l2 else None)


class Executor(Segmented):
    def __init__(self, model, plan=Plan(), backend="triton", device=None, seed=0, optimizer="sgd",
                 schedule=None, exact_l2=False):
        """exact_l2: apply the params' L2 as a decay of every row after every batch (sync only),
        instead of lazily in the gradient of the rows a batch touches."""
        self.model = model
        self.exact_l2 = exact_l2
        if exact_l2 and plan.semantics != "sync":
            raise OptionError("exact L2 decays every row after every batch: it needs sync semantics")
        self.optimizer = get_optimizer(optimizer)
        self.ir = lower(model, self.optimizer)
        unknown = set(plan.host_params) - {p.name for p in self.ir.params}
        if unknown:
            raise OptionError(f"placement names {sorted(unknown)}, not params of model {self.ir.name!r} "
                              f"(its params: {', '.join(p.name for p in self.ir.params)})")
        if plan.host_params and exact_l2:
            raise OptionError("exact L2 decays every row on the device after every batch: "
                              "not with params in host memory")
        self.plan = plan
        self.seed = seed
        self.schedule = schedule or LearningRateSchedule()
        self.batches_done = 0
        self.backend_name, self.device = resolve_backend(backend, device)
        if self.backend_name == "reference":
            self.backend = ReferenceBackend(self.ir)
        else:
            from alac.runtime.execution.triton_backend import TritonBackend

            self.backend = TritonBackend(self.ir, plan, interpret=self.backend_name == "interpret")
        self.state = None
        self.value_scale = 1.0      # mean |x| of the training data's values (value_scale), set by initialize
        self.block_losses = []      # the last streamed epoch's (block index, mean loss) per block
        self._reference = None      # a reference backend for sample_loss, made when first needed
        self.loss_sum = torch.zeros(1, device=self.device)
        # on_rows(rows): told the rows of each launch (each batch on the reference backend), for progress
        self.on_rows = None

    def use_programs(self, programs):
        """Sync epochs over `programs` persistent programs from now on (None: as many as the GPU holds)."""
        self.plan = dataclasses.replace(self.plan, programs=programs)
        if hasattr(self.backend, "use_programs"):
            self.backend.use_programs(programs)

    def initialize(self, layout, value_scale=None):
        """Fresh parameters for the layout's features; value_scale: the data's mean |x| where the
        layout does not hold the data (a streamed one's meta layout)."""
        self.value_scale = layout.value_scale() if value_scale is None else value_scale
        declared, _ = self.model.declarations()
        # params placed on the host (and their state) are checked against host memory
        for where, names in (("cpu", self.plan.host_params),
                             (self.device, [n for n in declared if n not in self.plan.host_params])):
            row_bytes = row_bytes_of(self.ir, names)
            if row_bytes:
                check_feature_tables(layout.n_features, row_bytes, "the model's parameters and optimizer state", where)
        self.state = ModelState.initial(self.model, layout.new_to_old, self.device, self.seed, self.ir.optimizer,
                                        host=self.plan.host_params)
        self.batches_done = 0

    def settings(self, l2=None):
        """The step's coefficients; l2 overrides the params' own L2 coefficients."""
        return step_settings(self.model, self.ir, self.optimizer, self.plan.batch_size, self.value_scale,
                             self.exact_l2, l2)

    def _epoch_rates(self, layout, order, epoch, lr):
        """(learning rates, 1 / samples) per batch of an epoch; async: one of each for the epoch."""
        if self.plan.semantics == "async":
            rates = self.schedule.rates(lr, epoch, self.batches_done, 1, order.device)
            n_batches = math.ceil(order.numel() / self.plan.chunks_per_batch)
            return rates, torch.full((1,), 1.0 / self.plan.batch_size, device=order.device), n_batches
        scales = batch_scales(layout, order, self.plan.chunks_per_batch)
        return self.schedule.rates(lr, epoch, self.batches_done, scales.numel(), order.device), scales, scales.numel()

    def segments(self, layout, labels, epoch, lr, order=None):
        """The row store's protocol (alac.runtime.execution.epoch): every row on this executor, so an
        epoch is one segment (its chunks in order, by default the layout's order of the epoch)."""
        if self.state is None:
            self.initialize(layout)
        order = layout.chunk_order(epoch, self.seed) if order is None else order
        yield Segment(self, layout, labels, epoch, lr, chunks=order)
        return self.loss_sum

    def train_streamed_epoch(self, streamed, labels_of, epoch, lr, kernel_events=None, on_block=None):
        """One epoch over a StreamedLayout (train_streamed_epochs); returns its mean training loss."""
        progress = None if on_block is None else (lambda _, *args: on_block(*args))
        return self.train_streamed_epochs(streamed, labels_of, epoch, 1, lr, kernel_events, progress)[0]

    def train_streamed_epochs(self, streamed, labels_of, first_epoch, count, lr, kernel_events=None, on_block=None):
        """count epochs from first_epoch over a StreamedLayout (alac.runtime.movement.streams), block after
        block, queued back to back with one wait for the GPU at the end (as train_epochs: an epoch's
        first copies and launches overlap the previous epoch's kernels); labels_of(block) gives a
        block's labels as the model reads them. Returns the epochs' mean training losses; the last
        epoch's blocks' own mean losses land in self.block_losses ([(block index, mean loss)] in
        visiting order). kernel_events: a list to collect (block index, started, done) CUDA events in
        (timelines); on_block(epoch, blocks queued, blocks, (block index, mean loss) of the latest
        block whose loss has reached the host, or None): called as each block's kernels are queued."""
        if self.state is None:
            self.initialize(streamed.host, streamed.value_scale)
        epochs = []
        for epoch in range(first_epoch, first_epoch + count):
            statistics = BlockStatistics(len(streamed.blocks), self.device)
            for position, (index, block, order) in enumerate(streamed.blocks_on_device(epoch, self.seed)):
                if kernel_events is not None:
                    kernel_events.append((index, *(torch.cuda.Event(enable_timing=True) for _ in range(2))))
                    kernel_events[-1][1].record()
                self.queue_epoch(block, labels_of(block), epoch, lr, order)
                if kernel_events is not None:
                    kernel_events[-1][2].record()
                statistics.add(position, index, self.loss_sum, block.n_rows)
                if on_block is not None:
                    on_block(epoch, position + 1, len(streamed.blocks), statistics.latest())
            epochs.append(statistics)
        finished = [statistics.finish() for statistics in epochs]
        self.block_losses = finished[-1][1]
        return [mean for mean, _ in finished]

    def load_epoch(self, layout, labels, epoch, lr, order):
        """A sync epoch's chunk order, learning rates and batch scales made and loaded once, its loss
        sum zeroed: queue_batches then trains runs of its batches (a cache's segments, with no small
        launches of their own, which waited for multiprocessors the cache's side stream held)."""
        if self.state is None:
            self.initialize(layout)
        self.loss_sum.zero_()
        rates, scales, _ = self._epoch_rates(layout, order, epoch, lr)
        self._loaded = (order, rates, scales)
        if self.backend_name != "reference":
            self.backend.load_schedule(self.state, layout, labels, order, rates, scales, self.settings(),
                                       self.loss_sum)

    def queue_batches(self, layout, labels, first, end):
        """Launch batches first .. end - 1 of the loaded epoch (load_epoch; the layout may differ in
        its edges' ids only); their loss adds to self.loss_sum."""
        order, rates, scales = self._loaded
        per_batch = self.plan.chunks_per_batch
        offset, stop = first * per_batch, min(end * per_batch, order.numel())
        if self.backend_name == "reference":
            self._reference_epoch(layout, labels, order[offset:stop], rates[first:end], scales[first:end])
        else:
            self.backend.train_run(self.state, layout, labels, offset, stop - offset, first, self.settings(),
                                   self.loss_sum)
            self._launched(stop - offset, layout)
        self.batches_done += end - first

    def _launched(self, chunks, layout):
        if self.on_rows is not None:
            self.on_rows(chunks * layout.chunk_size)

    def queue_epoch(self, layout, labels, epoch, lr, order=None):
        """Launch an epoch (its chunks in order, by default the layout's order of the epoch; an order
        of fewer chunks trains those, in whole batches); its loss sum lands in self.loss_sum."""
        if self.state is None:
            self.initialize(layout)
        order = layout.chunk_order(epoch, self.seed) if order is None else order
        self.loss_sum.zero_()
        rates, scales, n_batches = self._epoch_rates(layout, order, epoch, lr)
        if self.backend_name == "reference":
            self._reference_epoch(layout, labels, order, rates, scales)
        else:
            self.backend.train_epoch(self.state, layout, labels, order, rates, scales, self.settings(), self.loss_sum)
            self._launched(order.numel(), layout)
        self.batches_done += n_batches

    def _reference_epoch(self, layout, labels, order, rates, scales):
        """Sync batches; an async plan runs as its one-program limit: chunk after chunk, each
        sample's gradient counted as 1 / B, which is sync SGD with batches of one chunk."""
        if self.plan.semantics == "async":
            per_batch = 1
            rates, scales = rates.expand(order.numel()), scales.expand(order.numel())
        else:
            per_batch = self.plan.chunks_per_batch
        settings = self.settings()
        for offset, rate, scale in zip(range(0, order.numel(), per_batch), rates.tolist(), scales.tolist()):
            count = min(per_batch, order.numel() - offset)
            self.backend.train_batch(self.state, layout, labels, order[offset:offset + count], rate, scale,
                                     settings, self.loss_sum)
            self.state.decay(settings.decay_l2, rate)
            self._launched(count, layout)

    def sample_loss(self, layout, labels, max_rows=4096):
        """The mean loss of the first chunks of the epoch-0 order (up to max_rows samples) at the
        current params, computed without changing anything (the divergence guard's yardstick)."""
        if self.state is None:
            self.initialize(layout)
        if self._reference is None:
            self._reference = self.backend if self.backend_name == "reference" else ReferenceBackend(self.ir)
        chunks = layout.chunk_order(0, self.seed)[:max(1, max_rows // layout.chunk_size)]
        rows = int((layout.row_of_slot.view(layout.n_chunks, -1)[chunks] >= 0).sum())
        return self._reference.loss(self.state, layout, labels, chunks) / max(rows, 1)

    def train_batch(self, layout, labels, order, offset, count, lr, scale, l2=None):
        """One sync batch: chunks order[offset:offset + count]; the gradient sum times scale is the
        gradient the optimizer sees (scale = 1 / samples for the batch mean)."""
        settings = self.settings(l2)
        if self.backend_name == "reference":
            self.backend.train_batch(self.state, layout, labels, order[offset:offset + count], lr, scale,
                                     settings, self.loss_sum)
            # exact L2: the decay after the batch, as the kernel backend's batches end
            self.state.decay(settings.decay_l2, lr)
        else:
            self.backend.train_batch(self.state, layout, labels, order, offset, count, lr, scale, settings,
                                     self.loss_sum)

    def predict_slots(self, layout, labels=None):
        if labels is None:
            labels = torch.zeros(layout.n_chunks * layout.chunk_size, device=layout.device)
        if self.backend_name == "reference":
            return self.backend.predict(self.state, layout)
        return self.backend.predict(self.state, layout, labels)

    def predict(self, layout):
        """Predictions in the data set's original row order."""
        per_slot = self.predict_slots(layout)
        real = layout.row_of_slot >= 0
        out = torch.empty(layout.n_rows, device=per_slot.device)
        out[layout.row_of_slot[real]] = per_slot[real]
        return out
