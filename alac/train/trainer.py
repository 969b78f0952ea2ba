"""The Trainer: a DSL model on data sets — layouts, label mapping, epochs, evaluation, early
stopping, a divergence guard (alac.train.divergence), callbacks and checkpoints.

Features a validation or test set has beyond the training feature space are ignored, counted in
`unseen_entries` (alac.train.feature_space).
"""

from __future__ import annotations

import math
import sys
import time

import torch

from alac import metrics
from alac.errors import AlacError, OptionError
from alac.plan import Plan
from alac.runtime.device.memory import available_bytes
from alac.runtime.execution import epoch as runner
from alac.runtime.execution.executor import LabelMap
from alac.runtime.movement.blocks import is_block_source
from alac.runtime.movement.layout import BigraphLayout, LayoutOptions, build_layout
from alac.runtime.movement.line_spread import spread_layout
from alac.runtime.movement.streams import StreamedLayout
from alac.runtime.planning.planner import streaming_budget
from alac.runtime.planning.run_plan import plan_run
from alac.runtime.ranks.distributed import doing
from alac.runtime.rows.device import DeviceRows
from alac.runtime.rows.registry import TrainingRows
from alac.train.divergence import ADVICE, TrainingDiverged, ValidationGuard, base_rate_loss, diverged
from alac.train.early_stopping import RULES, VALIDATION_KEYS, monitored, should_stop
from alac.train.feature_space import in_training_space

# fit queues epochs in groups of about this much training (one loss read, divergence check and progress
# flush per group): a short epoch read one at a time waits for its host work (benchmarks/fit_queue.py);
# half a second keeps progress lines coming and bounds what a divergence found at a group's end throws away.
QUEUE_SECONDS = 0.5
# values summed at a time by the finite-parameters check (small enough not to overflow float32)
FINITE_CHECK_VALUES = 1 << 24
MAX_QUEUED_EPOCHS = 100


class Trainer:
    def __init__(self, model, lr=0.5, epochs=10, plan=Plan(), backend="triton", device=None, seed=0,
                 log=None, optimizer="sgd", schedule=None, exact_l2=False, early_stopping=None, patience=5,
                 window=10, callbacks=(), unseen="ignore", choose_hot_segment=False):
        """choose_hot_segment: the planner picks the plan's hot segment (H, R) from the training data, as
        `alac train` and the estimators have it; else the plan's is kept. early_stopping: None; "cuwide"
        (stop when the validation loss exceeds the mean of the last `window` epochs, cuWide's rule);
        "patience" (stop after `patience` epochs without a new best).
        Either way the best epoch's parameters are restored. callbacks: callables (trainer, record)
        called after every epoch; one returning True stops training."""
        if early_stopping not in RULES:
            raise OptionError(f"early_stopping must be one of {RULES}, got {early_stopping!r}")
        if unseen not in ("ignore", "error"):
            raise OptionError(f"unseen must be 'ignore' or 'error', got {unseen!r}")
        if not 0 < lr < math.inf:
            raise OptionError(f"the learning rate must be a finite number above 0, got {lr}")
        self.model = model
        self.lr = lr
        self.epochs = epochs
        self.plan = plan
        self._executor_arguments = (model, plan, backend, device, seed, optimizer, schedule, exact_l2)
        # the row store (alac.runtime.rows.store): rows on the device until the planner places them
        self.executor = DeviceRows(*self._executor_arguments)
        self.choose_hot_segment = choose_hot_segment
        # the run's planning step (alac.runtime.planning.run_plan) once the training data is laid out
        self.run_plan = None
        # a checkpoint's plan (alac.train.checkpoint.restore) and, once planned, its state on the way to a store
        self.restored_plan = None
        self._moving = None
        self.placement = None          # its ParamPlacement
        self._said_no_snapshots = False
        self.log = log
        self.early_stopping, self.patience, self.window = early_stopping, patience, window
        self.callbacks = list(callbacks)
        self.unseen = unseen
        self.history = []
        self.epoch = 0                 # epochs trained so far (a resumed run continues the count)
        self.train_layout = None
        self._train_dataset = None     # the data set train_layout was built from (prepare reuses it)
        self.labels = None
        self.feature_order = None      # new_to_old of the training layout: the model's feature space
        self.feature_ids = None        # the files' ids of a renumbered training space (alac.data.compact)
        self.unseen_entries = 0
        self.stopped_because = None
        self.best_epoch = None         # the epoch early stopping kept
        # after a fit that early stopping ended on an earlier epoch: the last epoch's (state, epoch,
        # batches done) in host memory, what a resumed run continues from (checkpoints keep it)
        self.last_state = None
        # (its index in history, snapshot) of a resumed run's lowest monitored loss: the next fit's start
        self._best = None
        # a checkpoint's (last state, best epoch) that the next fit continues from (alac.train.checkpoint.restore)
        self.resume_from = None
        # progress: streamed epochs' block_progress(epoch, blocks queued, blocks, (block, mean loss) of the
        # latest block whose loss reached the host, or None); resident ones' row_progress(rows launched)
        self.block_progress = self.row_progress = None

    @property
    def backend(self):
        return self.executor.backend_name

    @property
    def device(self):
        return self.executor.device

    @property
    def epochs_trained(self):
        """The epochs the run has trained: where its next fit goes on from (a checkpoint's last epoch)."""
        last = self.resume_from[0] if self.resume_from is not None else None
        return self.epoch if last is None else last[1]

    @property
    def n_features(self):
        return None if self.feature_order is None else self.feature_order.numel()

    def _in_training_space(self, dataset):
        dataset, dropped = in_training_space(dataset, self.feature_ids, self.n_features, self.unseen)
        self.unseen_entries += dropped
        return dataset

    def layout_of(self, dataset):
        """The layout of a data set in the model's feature space (ids re-indexed as in training)."""
        if dataset is None:
            return None
        options = LayoutOptions(chunk_size=self.plan.chunk_size)
        if self.feature_order is None:
            return build_layout(dataset, options, self.device)
        resident = self.train_layout if isinstance(self.train_layout, BigraphLayout) else None
        if resident is not None and resident.device == torch.empty(0, device=self.device).device:
            return build_layout(self._in_training_space(dataset), options, self.device, maps_of=resident)
        return build_layout(self._in_training_space(dataset), options, self.device, feature_order=self.feature_order)

    def prepare(self, train):
        """Fit the label mapping (once) and lay the training data out; returns (layout, model labels).
        The same data set object again (fit called once more to train on) keeps its layout. A block
        source (alac.runtime.movement.blocks / block_store), or a data set whose layout exceeds the plan's
        memory budget, gives a StreamedLayout and no labels (each block brings its own)."""
        ordered_here = self.feature_order is None
        if not is_block_source(train):
            train.check_has_features()
        if self.train_layout is None or self._train_dataset is not train:
            # the old layout goes first: at 64M x 39 rows on an 80 GB GPU, two layouts and the build's
            # temporaries do not fit together
            self.train_layout = self._train_dataset = None
            self.train_layout = self._laid_out_for_training(train)
            self._train_dataset = train
        streamed = isinstance(self.train_layout, StreamedLayout)
        if self.labels is None:
            if streamed:
                first = self.train_layout.first_block()
                labels, where = first.labels[first.row_of_slot >= 0], "the training blocks"
            else:
                labels, where = train.labels, train.source.path or "the training data"
            self.labels = LabelMap.fit(self.executor.ir.labels, labels, where)
        self._plan_run(train, streamed)
        if ordered_here and not streamed and self.placement is not None and self.placement.mode == "device":
            # rows in one GPU table whose order this layout chose: its most frequent ids spread over lines
            spread_layout(self.train_layout, self.plan.hot_size, self.plan.lines_to_spread)
        if ordered_here:
            self.feature_order = self.train_layout.host.new_to_old.cpu() if streamed else \
                self.train_layout.new_to_old.cpu()
            self.feature_ids = None if streamed else train.feature_ids
        if streamed:
            return self.train_layout, None
        return self.train_layout, self.labels.model_labels(self.train_layout.labels)

    def _plan_run(self, train, streamed):
        """The run's one planning step (alac.runtime.planning.run_plan): the plan's hot segment where this
        trainer chooses it, where the model's rows live and their row store (alac.runtime.rows.registry).
        A restored model (a checkpoint's) is planned with the plan it trained with, and its state moves
        into the store that plan places its rows in (_initialize) where that is not the device."""
        if self.executor.host_rows:
            return
        restored = self._has_state()
        if restored and (self.restored_plan is None or streamed or self.run_plan is not None):
            return
        layout = None if streamed else self.train_layout
        run = plan_run(self.executor.ir, self.restored_plan if restored else self.plan, train, layout, self.device,
                       self.backend, self.choose_hot_segment and not restored, self._agree,
                       self._rows_budget(train, streamed))
        self.run_plan = run
        if restored:
            if run.placement.mode == "device":
                return
            executor = self.executor
            self._moving = (executor.state, executor.batches_done, executor.value_scale)
        if run.plan != self.plan or restored:
            self.plan = run.plan
            model, _, *rest = self._executor_arguments
            self._executor_arguments = (model, run.plan, *rest)
            self.executor = self._device_store()
        self._use_store(run, train, streamed)

    def _device_store(self):
        """The store a run starts with: its rows on the device."""
        return DeviceRows(*self._executor_arguments)

    def _agree(self, plan):
        """The plan every process training this model runs (one process here)."""
        return plan

    def _rows_budget(self, train, streamed):
        """The GPU bytes the placement weighs the rows and the resident layout against (None: the plan's)."""
        return None

    def _use_store(self, run, train, streamed):
        """Train on the run plan's row store."""
        self.placement = run.placement
        if run.placement.mode != "device":
            self.executor = run.store(self._executor_arguments, TrainingRows(
                train, self.train_layout, lambda layout: self.labels.model_labels(layout.labels)))

    def _laid_out_for_training(self, train):
        """A resident layout, or a StreamedLayout of a block source or of a layout over the budget."""
        if is_block_source(train):
            if train.meta.chunk_size != self.plan.chunk_size:
                # its chunks are the plan's batches' units: another C would train other batches
                where = getattr(train, "folder", None) or "the block source"
                raise OptionError(f"{where} was written with chunk_size {train.meta.chunk_size} and the plan's is "
                                  f"{self.plan.chunk_size}: train it with Plan(chunk_size={train.meta.chunk_size}) "
                                  "or write it again")
            return StreamedLayout(train, self.device)
        budget = streaming_budget(train, self.plan, self.device)
        if budget is None:
            return self.layout_of(train)
        # built in host memory, the order fixed by this data set's own frequencies, or the model's where it
        # has one (a resumed checkpoint's, the ranks' common one): its parameter rows are in that order
        layout = build_layout(train, LayoutOptions(chunk_size=self.plan.chunk_size), "cpu",
                              feature_order=self.feature_order)
        return StreamedLayout.from_layout(layout, self.plan.chunks_per_batch, budget, self.device)

    def _has_state(self):
        """Whether the model has its parameters (a store whose whole state is costly to assemble, over
        sharded rows, answers without assembling it)."""
        return self.executor.has_state()

    def _block_labels(self, block):
        return self.labels.model_labels(block.labels)

    def _initialize(self, labels):
        if isinstance(self.train_layout, StreamedLayout):
            self.executor.initialize(self.train_layout.host, self.train_layout.value_scale)
        else:
            self.executor.initialize(self.train_layout)
        if self._moving is not None:
            # a restored state into the store its plan placed it in: every row, in the layout's order
            self.executor.state, self.executor.batches_done, self.executor.value_scale = self._moving
            self._moving = None
        if self.placement is not None:
            self.placement = self.executor.calibrate(self.train_layout, labels, self.placement)

    def initialize_model(self, train):
        """Lay the data out and draw the initial parameters now (fit does it when not yet done): a
        cached model's forecast is complete (its kernels timed) after this."""
        _, labels = self.prepare(train)
        if not self._has_state():
            self._initialize(labels)

    def _train_group(self, labels, count):
        """count epochs from self.epoch: their mean training losses."""
        if isinstance(self.train_layout, StreamedLayout):
            def progress(epoch, queued, blocks, latest):
                if self.block_progress is not None:
                    self.block_progress(epoch + 1, queued, blocks, latest)

            return self.executor.train_streamed_epochs(self.train_layout, self._block_labels, self.epoch, count,
                                                       self.lr, on_block=progress)
        return runner.train_epochs(self.executor, self.train_layout, labels, self.epoch, count, self.lr,
                                   self.row_progress)

    def _sample_loss(self, labels):
        """The divergence guard's yardstick: the loss of the first rows (of the first block when streamed)."""
        if isinstance(self.train_layout, StreamedLayout):
            block = self.train_layout.first_block()
            return self.executor.sample_loss(block, self._block_labels(block))
        return self.executor.sample_loss(self.train_layout, labels)

    monitored = staticmethod(monitored)

    def _should_stop(self, losses, best):
        return should_stop(self.early_stopping, losses, best, self.window, self.patience)

    def fit(self, train, valid=None, epochs=None, report=None):
        """Train `epochs` (default: the constructor's) more epochs; returns the history. valid is
        monitored (early stopping, best model); report (a test set) is only evaluated and recorded
        every epoch as test_* — it never steers training."""
        try:
            return self._fit(train, valid, epochs, report)
        finally:
            if isinstance(self.train_layout, StreamedLayout):
                # a read-ahead left running would hold a disk source's buffers from its next reader
                self.train_layout.stop_reading()

    def _fit(self, train, valid, epochs, report):
        _, layout_labels = self.prepare(train)
        valid_layout = self.layout_of(valid)
        report_layout = self.layout_of(report)
        if valid_layout is not None:
            self.executor.steer_with(valid_layout, self.labels.model_labels(valid_layout.labels))
        if not self._has_state():
            self._initialize(layout_labels)
        if self.resume_from is not None:
            self.continue_from(*self.resume_from)
            self.resume_from = None
        start = self._sample_loss(layout_labels)
        guard = self._validation_guard(train, valid_layout, valid)
        # the fit's start and the last two group ends: an epoch's loss is measured on the parameters
        # the epoch before left, so those may already be the diverged ones
        snapshots = [self._checkpoint_in_memory()]
        losses, best, best_state = [], None, None
        resumed, self._best = self._best, None
        validated = all(any(key in record for key in VALIDATION_KEYS) for record in self.history)
        if self.early_stopping and resumed is not None and valid_layout is not None and validated:
            # a fit that continues a validated run (a resume): its patience counts across both
            losses, (best, best_state) = [self.monitored(record) for record in self.history], resumed
        self.last_state = None
        lowest = None
        self.stopped_because = None
        # with nothing to evaluate or decide between epochs, epochs are queued on the GPU with one
        # loss read per group (Executor.train_epochs), each group about QUEUE_SECONDS of training
        grouped = valid_layout is None and report_layout is None and not self.callbacks and not self.early_stopping
        remaining = self.epochs if epochs is None else epochs
        pending, seconds = [], None
        while remaining > 0 or pending:
            if not pending:
                count = self._group_size(grouped, remaining, seconds)
                doing(f"training epoch {self.epoch + 1}")
                started = time.perf_counter()
                pending = self._train_group(layout_labels, count)
                if self.device.type == "cuda":
                    torch.cuda.synchronize()
                seconds = (time.perf_counter() - started) / count
                remaining -= count
                finite_state = self._finite_state()
            loss = pending.pop(0)
            self.epoch += 1
            record = {"epoch": self.epoch, "train_loss": loss, "seconds": seconds,
                      "rows_per_s": self.train_layout.n_rows / max(seconds, 1e-9)}
            record.update(self.executor.epoch_record(self.epoch))
            if diverged(loss, start, lowest) or (not pending and not finite_state):
                # the lowest validation loss's epoch where there is validation data, else the last sound one
                self._diverged(f"training loss {loss:.6g}, at the start {start:.6g}", record,
                               best_state if guard is not None else None,
                               lambda: self._restore_sound(snapshots, start, lowest, layout_labels))
            lowest = loss if lowest is None else min(lowest, loss)
            if valid_layout is not None:
                began, scores = time.perf_counter(), self.evaluate_layout(valid_layout, valid)
                record.update({f"valid_{k}": v for k, v in scores.items()}, valid_seconds=time.perf_counter() - began)
            if report_layout is not None:
                record.update({f"test_{k}": v for k, v in self.evaluate_layout(report_layout, report).items()})
            self.history.append(record)
            if self.log:
                self.log(record)
            reason = guard.check(record) if guard is not None else None
            if reason is not None:
                self._diverged(reason, record, best_state, lambda: self._restore_sound(snapshots[:1], start, None,
                                                                                        layout_labels))
            losses.append(self.monitored(record))
            if not pending:
                snapshots = [snapshots[0], *snapshots[1:][-1:], self._checkpoint_in_memory()]
            if best is None or losses[-1] < losses[best]:
                best, best_state = len(losses) - 1, snapshots[-1]
            stop = any(callback(self, record) for callback in self.callbacks)
            if self.early_stopping and self._should_stop(losses, best):
                self.stopped_because = f"early stopping ({self.early_stopping})"
                stop = True
            if stop:
                self.stopped_because = self.stopped_because or "callback"
                break
        if self.early_stopping and best_state is not None:
            if best_state[1] != self.epoch:
                self.last_state = (self.executor.state.to("cpu"), self.epoch, self.executor.batches_done)
            # the best epoch's parameters with its counters; the history keeps every epoch
            self.executor.state, self.epoch, self.executor.batches_done, _ = best_state
            self.best_epoch = self.epoch
        return self.history

    def continue_from(self, last_state, best_epoch):
        """Make this trainer (its state the best epoch's, as a checkpoint holds it) continue the run
        that checkpoint ended: from last_state (ModelState, epoch, batches done; None where the best
        epoch was the last), with early stopping's best epoch and patience as they were."""
        best = best_epoch - 1 if best_epoch is not None else None
        if best is not None and self.early_stopping and 0 <= best < len(self.history):
            self._best = (best, (self.executor.state.clone(), best_epoch, self.executor.batches_done, best_epoch))
            self.best_epoch = best_epoch
        if last_state is not None:
            state, self.epoch, self.executor.batches_done = last_state
            self.executor.state = state

    def _validation_guard(self, train, valid_layout, valid):
        """The validation-loss rule of alac.train.divergence for this fit (None without validation data): the
        losses of predicting the training labels' base rate (the validation labels' where the training
        data is streamed) and of the parameters the fit starts from."""
        if valid_layout is None:
            return None
        at_start = self.evaluate_layout(valid_layout, valid)
        metric = "logloss" if "logloss" in at_start else "rmse"
        binary = self.executor.ir.labels == "binary"
        labels = [d.labels.cpu() for d in (valid if is_block_source(train) else train, valid)]
        if binary:
            labels = [self.labels.positive_mask(values) for values in labels]
        return ValidationGuard(f"valid_{metric}", base_rate_loss(binary, *labels), at_start[metric])

    def _diverged(self, reason, record, best_state, restore_sound):
        """Stop a fit that diverged in record's epoch: the lowest validation loss's epoch comes back where
        there is one, else restore_sound() (False: nothing could be restored)."""
        self.stopped_because = "diverged"
        if best_state is not None:
            self._restore(best_state)
            restored = f"epoch {self.epoch}'s parameters (the lowest validation loss) are restored"
        elif restore_sound():
            restored = (f"epoch {self.epoch}'s parameters are" if self.epoch else "the initial parameters are") + \
                " restored"
        else:
            restored = "the model is too large to snapshot in host memory: its last parameters are kept, not restored"
        raise TrainingDiverged(f"training diverged in epoch {record['epoch']} ({reason}); {restored}. {ADVICE} "
                               f"(The learning rate is {self.lr:g}.)")

    def _checkpoint_in_memory(self):
        """What a divergence restores: the state and the counters that go with it; None for a model
        whose rows live in host memory and take more than half of what is free there (a copy of a
        table larger than the GPU would not fit beside it)."""
        if not self.executor.snapshots:
            return None
        state = self.executor.state
        if self.executor.host_rows:
            size = sum(v.numel() * v.element_size() for v in [*state.params.values(), *state.states.values()])
            if not self._snapshot_fits(size):
                return None
        return state.clone(), self.epoch, self.executor.batches_done, len(self.history)

    def _snapshot_fits(self, size):
        """Whether a snapshot of `size` bytes takes at most half of the host memory free now (a fit keeps
        up to three: each one's check sees the others'); said once where not."""
        free = available_bytes("cpu")
        fits = self._agreed(free is None or size <= free // 2)
        if not fits and not self._said_no_snapshots:
            self._said(f"alac: the model's {size / 2**30:,.1f} GiB of rows are too large to snapshot in host memory: a "
                       "diverged or early-stopped run keeps its last parameters")
            self._said_no_snapshots = True
        return fits

    @staticmethod
    def _agreed(fits):
        """Whether every process training this model fits its snapshot (one process here)."""
        return fits

    @staticmethod
    def _said(text):
        print(text, file=sys.stderr)

    def _restore_sound(self, snapshots, start, lowest, labels):
        """Restore the newest snapshot whose parameters' sample loss has not diverged (the fit's
        start is taken as it is); False when there are no snapshots to restore."""
        if snapshots[0] is None:
            return False
        for saved in reversed([saved for saved in snapshots[1:] if saved is not None]):
            self._restore(saved)
            if not diverged(self._sample_loss(labels), start, lowest):
                return True
        self._restore(snapshots[0])
        return True

    def _restore(self, saved):
        state, self.epoch, self.executor.batches_done, records = saved
        self.executor.state = state
        del self.history[records:]

    @staticmethod
    def _group_size(grouped, remaining, seconds):
        """Epochs to queue next: one to start with (it measures an epoch), then QUEUE_SECONDS' worth."""
        if not grouped or seconds is None:
            return 1
        return max(1, min(remaining, MAX_QUEUED_EPOCHS, int(QUEUE_SECONDS / max(seconds, 1e-9))))

    def _finite_state(self):
        state = self.executor.state
        # a sum is NaN or infinite when a value is: pieces of FINITE_CHECK_VALUES, no mask the size of the table
        return all(math.isfinite(float(piece.sum())) for v in [*state.params.values(), *state.globals.values()]
                   for piece in v.reshape(-1).split(FINITE_CHECK_VALUES))

    def zero_share(self):
        """The share of exactly-zero values among the per-feature params (L1's sparsity)."""
        values = [p.reshape(-1) for p in self.executor.state.params.values()]
        total = sum(v.numel() for v in values)
        return sum(int((v == 0).sum()) for v in values) / max(total, 1)

    def predict_layout(self, layout):
        return self.executor.predict(layout)

    def predict(self, dataset):
        """Predictions (probability, score or value, as the model says) in the data set's row order."""
        if not self._has_state():
            raise AlacError("the model is not trained yet: call fit first (or load a checkpoint)")
        return self.predict_layout(self.layout_of(dataset))

    def evaluate_layout(self, layout, dataset):
        prediction = self.predict_layout(layout)
        labels = dataset.labels.to(prediction.device)
        if self.executor.ir.labels == "binary":
            return metrics.classification_metrics(prediction, self.labels.positive_mask(labels),
                                                  self.executor.ir.prediction_kind)
        return metrics.regression_metrics(prediction, labels)

    def evaluate(self, dataset):
        return self.evaluate_layout(self.layout_of(dataset), dataset)

    def parameters(self):
        """Params in the order of the user's feature ids (numpy), and the globals: row i is feature i,
        or, of a renumbered space, the feature feature_ids[i]."""
        order = self.feature_order.long()
        params = {}
        for name, value in self.executor.state.params.items():
            original = torch.empty_like(value)
            original[order.to(value.device)] = value
            params[name] = original.cpu().numpy()
        return params, {name: float(v) for name, v in self.executor.state.globals.items()}

