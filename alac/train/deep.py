"""Training the field models (alac.nn.deep_models: Wide & Deep, DeepFM; alac.nn.field_aware: FFM) on
a SparseDataset whose entries carry field ids: the loop a PyTorch user writes (shuffled batches of
rows, the logistic loss, Adam on the MLP), the tables stepped inside backward by alac.nn; a
validation pass after every epoch and early stopping on its logloss, the best epoch's weights kept.
The estimators of alac.sklearn.deep fit it. Where the rows live: over torchrun's ranks as
alac.train.deep_ranks plans them; in one process on the GPU, or past its budget in host memory with
the most-read rows cached (alac.train.table_memory); the training rows on the GPU, or past half its
memory streamed from host memory (alac.train.deep_steps).

Field ids come with the data (libffm, Criteo TSV, alac.data.load_featindex or from_positions). At
prediction, entries whose feature or field the model never trained are left out (unseen_entries
counts them), as the wide models' predictions ignore unseen features.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import pickle
import time
from dataclasses import asdict

import torch

from alac import metrics
from alac.data.dataset import same_numbering
from alac.data.read_options import check_feature_ids
from alac.errors import DataError, OptionError
from alac.nn import GraphedStep, SparseAggregate, whole_step
from alac.nn.table_rows import ONE_DEVICE, TableRows
from alac.runtime.execution.executor import LabelMap
from alac.runtime.movement.layout import default_device
from alac.runtime.ranks.distributed import doing, init_ranks
from alac.train.deep_checkpoint import checked_extras, checked_resume_point, state_copy
from alac.train.deep_ranks import (
    GradientMean,
    fix_exchanges,
    load_whole_weights,
    plan_rank_tables,
    table_exchange_shape,
    table_row_bytes,
    whole_predictions,
    whole_weights,
)
from alac.train.deep_settings import (
    DEEP_MODELS,
    DEFAULT_SETTINGS,
    TABLE_LR_FIELDS,
    TABLE_LR_MAX,
    DeepSettings,
    field_model,
)
from alac.train.deep_steps import (
    STEP_SHARE,
    batches,
    epoch_parts,
    in_host_memory,
    interleaved_loss,
    micro_batches_of,
    part_rows,
)
from alac.train.divergence import ADVICE, TrainingDiverged, ValidationGuard, base_rate_loss
from alac.train.table_memory import plan_table_memory

# rows a prediction batch takes in one process (a forward only: fewer, larger launches than the
# training batches'; benchmarks/deep_ranks.py, arm alac_1gpu's validation seconds)
PREDICT_ROWS = 1 << 16

# the settings and models are alac.train.deep_settings'; imported from here too
__all__ = ["DEEP_MODELS", "PREDICT_ROWS", "DeepSettings", "DeepTrainer"]


class DeepTrainer:
    def __init__(self, settings=DEFAULT_SETTINGS, device=None, log=None, ranks=None):
        """log: called with every epoch's record (a dict), e.g. to print progress; ranks: the ranks
        that train together (alac.runtime.ranks.distributed.Ranks; default torchrun's, or one)."""
        self.settings = settings
        self.device = torch.device(device) if device is not None else default_device()
        self.log = log
        self.network = None
        self.history = []
        self.unseen_entries = 0
        self.extras = {}
        self.one_hot = False        # the training rows had at most one entry per field
        self.feature_ids = None     # the files' ids of a renumbered training space (alac.data.compact)
        self.guard = None           # the last fit's validation guard (alac.train.divergence)
        self.stopped_because = None
        self.resume_point = None   # where the last fit ended, for a checkpoint's resume (DeepTrainer.resume)
        self.ranks = ranks         # under torchrun, the ranks that train together (alac.runtime.ranks)
        self.rank_tables = None    # and where the tables' rows live over them (alac.train.deep_ranks)
        self.table_rows = ONE_DEVICE   # where the tables' rows live (alac.nn.table_rows)
        self.say = None            # told the tables' placement over ranks or in host memory, e.g. print
        self._loss_scale = 1.0     # a step's summed loss to its share of the batch's mean (over ranks: times W)

    def fit(self, train, valid=None):
        """Train on `train` (binary labels, field ids), validating on `valid` after every epoch (early
        stopping, the best epoch kept); returns the history (a record per epoch)."""
        s = self.settings
        train.check_has_features()
        _check_fields(train, "the training data")
        self.labels = LabelMap.fit("binary", train.labels)
        self.n_features = train.n_features
        self.feature_ids = train.feature_ids
        self.n_fields = max(train.n_fields, int(train.fields.max()) + 1 if train.nnz else 1)
        self._split_fields()
        self.one_hot = _one_entry_per_field(train, self.n_fields)
        self._place_rows(train, math.ceil(train.n_rows / self._step_rows()))
        torch.manual_seed(s.seed)
        self.network = field_model(s, self.n_features, self.n_fields - len(s.dense_fields), self.device,
                                   self.one_hot, self.table_rows)
        # the bias starts at the training data's log-odds: from 0, rare clicks took Adam's small steps
        # many epochs to reach (FFM on iPinYou's rare clicks, benchmarks/deep_defaults.py)
        rate = float(self.labels.positive_mask(train.labels).float().mean().clamp(1e-6, 1 - 1e-6))
        # (DLRM's is its top MLP's last bias)
        bias = self.network.bias if hasattr(self.network, "bias") else self.network.top[-1].bias
        with torch.no_grad():
            bias.fill_(math.log(rate / (1 - rate)))
        self._trust_batches()
        if s.lr is None and s.optimizer == "adagrad" and self.say is not None:
            self.say(f"the tables' AdaGrad step {self.table_lr:g}: {TABLE_LR_FIELDS:g} / the data's "
                     f"{self.n_fields - len(s.dense_fields)} sparse fields, at most {TABLE_LR_MAX:g} (--lr sets it)")
        self.history = []
        self._generator = torch.Generator().manual_seed(s.seed)
        return self._epochs(train, valid, 1, s.epochs, (math.inf, None), 0, None)

    @property
    def table_lr(self):
        """The tables' learning rate (DeepSettings.table_lr for the data's sparse fields)."""
        return self.settings.table_lr(self.n_fields - len(self.settings.dense_fields))

    def _place_rows(self, dataset, batches):
        """The ranks of this fit (torchrun's, or one) and where the tables' rows live (self.table_rows):
        over several ranks, or beyond the GPU's budget in one process, planned from the rows' accesses in
        `dataset` (None: unknown, a restored model's)."""
        self.ranks = self.ranks or init_ranks()
        if self.device.type == "cuda" and self.ranks.device.type == "cuda":
            self.device = self.ranks.device
        s, indices = self.settings, None if dataset is None else dataset.indices
        row_bytes = table_row_bytes(s, self.n_fields)
        if self.ranks.world == 1:
            # a step's entries at most: its rows times the longest row's (the fields, one-hot)
            longest = self.n_fields if dataset is None or not dataset.n_rows else int(dataset.indptr.diff().max())
            memory = plan_table_memory(indices, self.n_features, row_bytes, self._step_rows() * max(1, longest),
                                       s.gpu_memory, self.device)
            self.table_rows = TableRows(hot=memory.hot, staging_rows=memory.staging_rows)
            if memory.hot is not None and self.say is not None:
                self.say(memory.describe())
            return
        self.ranks.check_one_feature_space(self.n_features)
        counts = None if indices is None else torch.bincount(indices.long(), minlength=self.n_features)
        self.rank_tables = plan_rank_tables(s.rank_tables, counts, row_bytes, batches, self.ranks, self.device,
                                            self.n_features, s.gpu_memory, table_exchange_shape(s, self.n_fields))
        self.table_rows = TableRows(self.ranks, self.rank_tables.replicated, self.rank_tables.order)
        if self.say is not None:
            self.say(self.rank_tables.describe())

    def resume(self, train, valid=None, epochs=None):
        """Continue the run whose checkpoint this trainer was loaded from (DeepTrainer.load), to `epochs`
        epochs in all (default: its settings'): from its last epoch's weights, the dense optimizer's state
        and the batches' order as they were, early stopping's patience counted across both parts."""
        point = self.resume_point
        if point is None:
            raise OptionError("this trainer holds no run to continue: load a checkpoint that alac wrote after a fit")
        best = (point["best_loss"], None if point["best_epoch"] is None else (state_copy(self.network),
                                                                             point["best_epoch"]))
        if point["last_weights"] is not None:
            load_whole_weights(self.network, point["last_weights"])
        self._generator = torch.Generator()
        self._generator.set_state(point["generator"])
        return self._epochs(train, valid, point["epoch"] + 1, epochs or self.settings.epochs, best, point["waited"],
                            point["dense"])

    def _epochs(self, train, valid, first, last, best, waited, dense_state):
        """Epochs first .. last; best: (the lowest validation loss so far, (its weights, its epoch) or
        None); waited: epochs since it; dense_state: the dense optimizer's state to continue from."""
        s = self.settings
        # the tables are buffers stepped in backward: the parameters are the MLP's and the bias
        ranks = self.ranks
        many = ranks.world > 1
        train = self._known_entries(train)      # entries of no field (-1) left out
        # rows larger than the GPU's share for them stream from host memory, an epoch part at a time
        self._part_rows = part_rows(train, self._step_rows(), self.device, s.stream_data)
        train = in_host_memory(train, self.device) if self._part_rows else train.to(self.device)
        self._micro_batches = s.micro_batches
        if self._micro_batches is None:
            self._micro_batches = micro_batches_of(self, train, s.batch_size)
            if self._micro_batches > 1 and self.say is not None:
                self.say(f"a step in {self._micro_batches} micro-batches (PICASSO's Eq. 2: its measured activations "
                         f"exceed {STEP_SHARE:.0%} of the GPU's free memory)")
        graphed = s.cuda_graphs and self.device.type == "cuda" and not s.dense_fields and self._micro_batches == 1 \
            and not s.side_stream and self.network.tables.graphable
        # over ranks: the dense part's gradients averaged by one all-reduce, the tables' by alac.nn.ranked
        mean = GradientMean(self.network, ranks) if many else None
        dense = torch.optim.Adam(self.network.parameters(), lr=s.dense_lr, capturable=graphed)
        if dense_state is not None:
            dense.load_state_dict(dense_state)
        # over ranks a step's graph is also one per size of the exchanges (which may grow between epochs)
        step = GraphedStep(self._step_of(dense, mean), max_graphs=4 if many else 2) if graphed else None
        (best, best_state), generator = best, self._generator
        guard, initial = None, None
        if valid is not None:
            valid = self._prepared(valid)           # once: every epoch's validation reads it as it is
            guard = ValidationGuard("valid_logloss", base_rate_loss(True, self.labels.positive_mask(train.labels),
                                                                    self.labels.positive_mask(valid.labels)),
                                    self._valid_metrics(valid)["valid_logloss"])
            initial = state_copy(self.network)
        self.guard, self.stopped_because = guard, None
        for epoch in range(first, last + 1):
            doing(f"training epoch {epoch}")       # named to the other ranks should this one fail
            started = time.perf_counter()
            order = torch.randperm(train.n_rows, generator=generator).to(self.device)
            loss_sum = torch.zeros((), device=self.device)
            for shuffled in epoch_parts(train, order, self._part_rows):
                if many:
                    fix_exchanges(self.network, shuffled, self._step_rows(), ranks)
                for batch in batches(shuffled, self._step_rows(), ranks if many else None):
                    loss_sum += self._train_batch(batch, step, dense, mean).detach()
            if many:
                ranks.all_reduce(loss_sum, in_place=True)
                self.network.tables.align()
                self.network.tables.check_exchanges()
            record = {"epoch": epoch, "train_loss": float(loss_sum) / train.n_rows}
            if not math.isfinite(record["train_loss"]):
                self._diverged(f"training loss {record['train_loss']}", epoch, best_state, initial)
            record["seconds"] = time.perf_counter() - started
            record["rows_per_s"] = train.n_rows / record["seconds"]
            if valid is not None:
                began = time.perf_counter()
                record.update(self._valid_metrics(valid))
                record["valid_seconds"] = time.perf_counter() - began
            self.history.append(record)
            if self.log is not None:
                self.log(record)
            reason = guard.check(record) if guard is not None else None
            if reason is not None:
                self._diverged(reason, epoch, best_state, initial)
            if valid is None:
                continue
            if record["valid_logloss"] < best:
                best, best_state, waited = record["valid_logloss"], (copy.deepcopy(self.network.state_dict()), epoch), 0
            else:
                waited += 1
                if waited >= s.patience:
                    self.stopped_because = "early stopping (patience)"
                    break
        # what a checkpoint keeps for a resume: the last epoch's weights where the best epoch's come back
        last_weights = None
        if best_state is not None and best_state[1] != len(self.history):
            # whole (every rank's rows assembled): a checkpoint resumes at any rank count
            last_weights = state_copy(self.network, whole_weights(self.network))
            self.network.load_state_dict(best_state[0])
        self.resume_point = {"epoch": len(self.history), "best_epoch": None if best_state is None else best_state[1],
                              "best_loss": best, "waited": waited, "stopped_because": self.stopped_because,
                              "generator": generator.get_state(), "dense": dense.state_dict(),
                              "last_weights": last_weights}
        return self.history

    def _train_batch(self, batch, step, dense, mean):
        """One step on a batch (over ranks: (the global batch's rows, this rank's share)) by its graph
        `step` or eagerly with the dense optimizer and the ranks' gradient mean; its summed loss."""
        many = mean is not None
        rows, part = batch if many else (batch.n_rows, batch)
        if many:
            self.network.tables.global_samples = rows
        # the part's share of the batch's mean loss, times the ranks the gradients are averaged over
        self._loss_scale = self.ranks.world / rows
        if step is not None:
            # a graph holds the global batch and the exchanges' size it was captured with
            constants = (rows, self.network.tables.entry_capacity) if many else (rows,)
            return step(part.indices, part.indptr, part.fields, part.values, part.labels, constants=constants)
        dense.zero_grad()
        if self._micro_batches > 1 or self.settings.side_stream:
            summed = interleaved_loss(self, part, self._loss_scale, self._micro_batches)
        else:
            summed = self._loss(self._logits(part), part.labels, reduction="sum")
            (summed * self._loss_scale).backward()
        if many:
            mean()
        dense.step()
        return summed

    def _valid_metrics(self, valid):
        """Validation logloss and AUC of a _prepared set, computed on the model's device."""
        probability = self._probabilities(valid)
        positive = self.labels.positive_mask(valid.labels.to(probability.device))
        return {"valid_logloss": float(metrics.logloss(probability, positive)),
                "valid_auc": float(metrics.auc(probability, positive))}

    def _diverged(self, reason, epoch, best_state, initial):
        """Stop a fit whose loss went wrong in `epoch`: the best epoch's weights, else the initial ones,
        come back (none without validation data: the last are kept)."""
        restored = "the last weights are kept"
        if best_state is not None:
            weights, best_epoch = best_state
            self.network.load_state_dict(weights)
            del self.history[best_epoch:]
            restored = f"epoch {best_epoch}'s weights (the lowest validation loss) are restored"
        elif initial is not None:
            self.network.load_state_dict(initial)
            self.history.clear()
            restored = "the initial weights are restored"
        raise TrainingDiverged(f"training diverged in epoch {epoch} ({reason}); {restored}. {ADVICE} (The tables' "
                               f"learning rate is {self.table_lr:g}, the dense layers' "
                               f"{self.settings.dense_lr:g}.)")

    def _loss(self, logit, labels, reduction="mean"):
        return torch.nn.functional.binary_cross_entropy_with_logits(logit, self.labels.positive_mask(labels).float(),
                                                                    reduction=reduction)

    def _step_of(self, dense, mean=None):
        """One step on a batch's tensors (a model without dense fields), for GraphedStep: returns the
        part's summed loss, its gradient scaled by _loss_scale; mean: the ranks' gradient mean."""
        def loss_of(indices, indptr, fields, values, labels):
            summed = self._loss(self.network(indices.long(), indptr, fields.long(), values), labels, reduction="sum")
            return summed * self._loss_scale

        def step(*tensors):
            return whole_step(loss_of, [dense], mean)(*tensors) / self._loss_scale
        return step

    def _trust_batches(self):
        """The entries reach the network checked (_known_entries): its tables skip their per-batch host
        round trip, so that the host queues steps ahead of the GPU."""
        for module in self.network.modules():
            if isinstance(module, SparseAggregate):
                module.check_batches = False

    def _split_fields(self):
        """Per field id of the data: its sparse field's id (-1 for a dense one) and its dense slot."""
        dense = self.settings.dense_fields
        if any(f >= self.n_fields for f in dense):
            raise DataError(f"dense_fields {list(dense)} name fields the data do not have (its {self.n_fields})")
        self._dense_slot = torch.full((self.n_fields,), -1, dtype=torch.int64, device=self.device)
        self._dense_slot[list(dense)] = torch.arange(len(dense), device=self.device)
        is_sparse = self._dense_slot < 0
        self._sparse_id = torch.where(is_sparse, torch.cumsum(is_sparse.long(), 0) - 1, -1)

    def _logits(self, batch):
        sparse, dense = self.inputs(batch)
        return self.network.logit(self.network.bags(*sparse), dense)

    def inputs(self, batch):
        """A batch as the network takes it: (its sparse entries' indices, offsets, fields and values;
        the dense fields' values as a [B, dense] matrix, or None without dense fields)."""
        indices, indptr, fields, values = batch.indices.long(), batch.indptr, batch.fields.long(), batch.values
        if not self.settings.dense_fields:
            return (indices, indptr, fields, values), None
        # the dense fields' entries become a [B, dense] matrix (their values), the rest the sparse rows
        rows = batch.entry_rows()
        slot = self._dense_slot[fields]
        dense = slot >= 0
        features = torch.zeros((batch.n_rows, len(self.settings.dense_fields)), device=indices.device)
        features.index_put_((rows[dense], slot[dense]), batch.values_or_ones()[dense], accumulate=True)
        sparse = batch.with_entries(~dense, rows)
        return (sparse.indices.long(), sparse.indptr, self._sparse_id[sparse.fields.long()], sparse.values), features

    def predict(self, dataset):
        """The probability of the positive class per row (CPU float32 tensor)."""
        return self._probabilities(self._prepared(dataset)).cpu()

    def _prepared(self, dataset):
        """`dataset` checked, in the model's numbering, on its device, its unknown entries left out."""
        if self.network is None:
            raise OptionError("predict needs a trained model: call fit first")
        _check_fields(dataset, "the data")
        if not same_numbering(dataset.feature_ids, self.feature_ids):
            dataset = dataset.in_space_of(self.feature_ids)
        return self._known_entries(dataset.to(self.device))

    @torch.no_grad()
    def _probabilities(self, dataset):
        """The positive class's probability per row of a _prepared dataset, on the model's device."""
        ranks = self.ranks
        if ranks is not None and ranks.world > 1:
            # each rank batch_size rows of every step (the tables' rows are fetched by all together)
            fix_exchanges(self.network, dataset, self._step_rows(), ranks)
            shares = list(batches(dataset, self._step_rows(), ranks))
            logits = [self._logits(part) for _, part in shares]
            local = torch.cat(logits) if logits else torch.zeros(0, device=self.device)
            self.network.tables.check_exchanges()
            return torch.sigmoid(whole_predictions(local, [rows for rows, _ in shares], ranks))
        # (host tables' cache stages one training step's rows)
        rows = self.settings.batch_size if self.table_rows.hot is not None else max(self.settings.batch_size,
                                                                                     PREDICT_ROWS)
        logits = [self._logits(batch) for batch in batches(dataset, rows)]
        return torch.sigmoid(torch.cat(logits)) if logits else torch.zeros(0, device=self.device)

    def _step_rows(self):
        """Rows a step takes over every rank: batch_size on each (DDP's and TorchRec's convention)."""
        return self.settings.batch_size * (self.ranks.world if self.ranks is not None else 1)

    def _known_entries(self, dataset):
        """The dataset without the entries of features or fields the model never trained."""
        ids, fields = dataset.indices.long(), dataset.fields.long()
        known = (ids < self.n_features) & (fields >= 0) & (fields < self.n_fields)
        self.unseen_entries = int((~known).sum())
        if not self.unseen_entries:
            return dataset
        return dataclasses.replace(dataset.with_entries(known), n_features=self.n_features, n_fields=self.n_fields)

    def checkpoint(self, extras=None):
        """The trained model as tensors and plain values (torch.save it; DeepTrainer.load reads it back
        with torch.load(weights_only=True), which runs no code); extras: tensors and plain values kept
        beside it (how to read data like the training data), given back as load's trainer.extras. Under
        several ranks every rank calls it (the tables are assembled whole, for any rank count)."""
        if self.network is None:
            raise OptionError("a checkpoint needs a trained model: call fit first")
        return {"settings": asdict(self.settings), "n_features": self.n_features, "n_fields": self.n_fields,
                "positive": float(self.labels.positive), "history": self.history, "extras": extras or {},
                "one_hot": self.one_hot, "feature_ids": self.feature_ids, "resume": self.resume_point,
                "weights": {name: t.detach().cpu() for name, t in whole_weights(self.network).items()}}

    @classmethod
    def load(cls, path, device=None):
        """The DeepTrainer a checkpoint file holds (OptionError naming the file if it is not one)."""
        try:
            saved = torch.load(path, map_location="cpu", weights_only=True)
            trainer = cls(device=device)
            trainer._restore(saved, str(path))
        except DataError as error:
            raise OptionError(f"{path}: a damaged deep model checkpoint: {str(error).removeprefix(f'{path}: ')}") \
                from None
        except (OSError, EOFError, pickle.UnpicklingError, RuntimeError, KeyError, TypeError, ValueError,
                AttributeError) as error:
            raise OptionError(f"{path}: not a deep model checkpoint ({type(error).__name__}: {error})") from None
        return trainer

    def _restore(self, saved, where="the checkpoint"):
        s = self.settings = DeepSettings(**saved["settings"])
        self.history = list(saved["history"])
        self.extras = checked_extras(saved.get("extras", {}), where)
        self.n_features, self.n_fields = int(saved["n_features"]), int(saved["n_fields"])
        self.feature_ids = check_feature_ids(saved.get("feature_ids"), self.n_features, where)
        self.resume_point = checked_resume_point(saved.get("resume"), where)
        self.labels = LabelMap("binary", saved["positive"])
        self._split_fields()
        self.one_hot = bool(saved.get("one_hot", False))
        self._place_rows(None, 0)
        self.network = field_model(s, self.n_features, self.n_fields - len(s.dense_fields), self.device,
                                   self.one_hot, self.table_rows)
        load_whole_weights(self.network, saved["weights"])
        self._trust_batches()

    def __getstate__(self):
        """Pickled as its checkpoint (the tables' programs are rebuilt) and the device."""
        return {"device": str(self.device), "settings": asdict(self.settings),
                "checkpoint": None if self.network is None else self.checkpoint(self.extras)}

    def __setstate__(self, state):
        device = state["device"] if torch.device(state["device"]).type != "cuda" or torch.cuda.is_available() \
            else "cpu"
        self.__init__(DeepSettings(**state["settings"]), device)
        if state["checkpoint"] is not None:
            self._restore(state["checkpoint"])


def _one_entry_per_field(dataset, n_fields):
    """Whether no row has two entries in one field (one host round trip)."""
    bag = dataset.entry_rows() * n_fields + dataset.fields.long().clamp(min=0)
    return not bool((torch.bincount(bag, minlength=dataset.n_rows * n_fields) > 1).any())


def _check_fields(dataset, what):
    if dataset.fields is None:
        raise DataError(f"{what} has no field ids, which deep models need: read libffm or Criteo files, or "
                        "give the fields (alac.data.load_featindex, alac.data.field_map.from_positions)",
                        path=dataset.source.path)
