"""A field model's settings (alac.train.deep.DeepSettings) and the torch module they build."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from alac.errors import OptionError
from alac.nn.deep_models import DeepFM, DLRMLike, WideAndDeep
from alac.nn.field_aware import FFM
from alac.nn.table_rows import ONE_DEVICE
from alac.optimizers import get_optimizer
from alac.train.deep_ranks import MODES as RANK_MODES


def field_model(settings, n_features, n_fields, device, one_hot=False, rows=ONE_DEVICE):
    """The torch module of a field model of n_fields sparse fields and the settings' dense ones
    (one_hot: no sample has two entries in a field, FFM then skips pairs within a field), its tables'
    rows placed as `rows` says (alac.nn.table_rows)."""
    s = settings
    # the generated kernels on a GPU; elsewhere the reference programs compute the same tables
    backend = "triton" if s.tables == "kernels" and torch.device(device).type == "cuda" else "reference"
    options = {"k": s.k, "optimizer": s.optimizer, "lr": s.table_lr(n_fields), "seed": s.seed, "device": device,
               "backend": backend, "rows": rows}
    if s.model == "ffm":
        return FFM(n_features, n_fields, one_hot=one_hot, **options)
    if s.model == "dlrm":
        return DLRMLike(n_features, n_fields, len(s.dense_fields), bottom=s.bottom, top=s.hidden, **options)
    return DEEP_MODELS[s.model](n_features, n_fields, hidden=s.hidden, n_dense=len(s.dense_fields), **options)


# The tables' AdaGrad step when none is given: TABLE_LR_FIELDS / (sparse fields), at most TABLE_LR_MAX.
# A first step moves every embedding by about lr, and the pairwise terms of F fields then move a logit
# by about (F lr)^2 k: a step that suits two fields blows up 39 (benchmarks/deep_defaults.py: lr 0.5 is
# the best arm on MovieLens' two fields; criteo-tiny's 39 diverge at 0.05; iPinYou's 16 lose at 0.2).
TABLE_LR_FIELDS = 1.0
TABLE_LR_MAX = 0.5

# field models: the deep ones, and the field-aware FM (k per field; no MLP, its bias trained by Adam)
DEEP_MODELS = {"deepfm": DeepFM, "wide_deep": WideAndDeep, "dlrm": DLRMLike, "ffm": FFM}


@dataclass(frozen=True)
class DeepSettings:
    """model: deepfm, wide_deep, dlrm or ffm; k: the field embeddings' size (FFM: per field; None: 4 for FFM as
    libffm, else 16); hidden: the MLP's layers (DLRM's top MLP; not FFM's); bottom: DLRM's bottom MLP;
    dense_fields: the fields whose entries' values are dense features (one value per row and field, 0 where
    absent; DLRM needs some, FFM takes none); lr: the tables' step (None: table_lr()'s, scaled to the data's
    fields); dense_lr: Adam's on the MLPs and bias; batch_size: the rows of a step on each rank (under
    torchrun a step takes W × batch_size rows, as DDP's and TorchRec's per-process batches do); patience:
    epochs without a better validation logloss before training stops; cuda_graphs: on a GPU, replay full
    batches' steps from CUDA graphs (alac.nn.GraphedStep: batches whose entries are as many as the previous
    ones', e.g. one-hot fields; models without dense fields); tables: "kernels" (their generated kernels on
    a GPU, alac.codegen.bag_kernels; the torch programs elsewhere) or "reference" (the torch programs);
    rank_tables: under torchrun, the tables' rows replicated, sharded or hybrid (auto: the planner's,
    alac.train.deep_ranks); gpu_memory: bytes the tables may take on a GPU (None: a quarter of its free
    memory): larger tables live in host memory, their most-read rows cached on the GPU
    (alac.train.table_memory), and over ranks the budget of each rank's share (alac.train.deep_ranks);
    stream_data: the training rows stay in host memory and reach the GPU an epoch part at a time (None:
    where they take more than half its free memory; alac.train.deep_steps); micro_batches: PICASSO's
    D-interleaving of a step (alac.nn.interleave; None: by Eq. 2, a step in micro-batches only where its
    measured activations would take more than half the GPU's free memory, alac.train.deep_steps;
    benchmarks/fields.py measured the whole step faster where it fits); side_stream: K-interleaving (off by
    default, for the same reason)."""

    model: str = "deepfm"
    k: int | None = None
    hidden: tuple = (256, 128)
    lr: float | None = None
    dense_lr: float = 1e-3
    epochs: int = 10
    batch_size: int = 4096
    optimizer: str = "adagrad"
    patience: int = 2
    seed: int = 0
    dense_fields: tuple = ()
    bottom: tuple = (64,)
    cuda_graphs: bool = True
    tables: str = "kernels"
    rank_tables: str = "auto"
    gpu_memory: int | None = None
    stream_data: bool | None = None
    micro_batches: int | None = None
    side_stream: bool = False

    def __post_init__(self):
        for name in ("hidden", "bottom", "dense_fields"):
            object.__setattr__(self, name, tuple(getattr(self, name)))
        if self.k is None:
            # FFM's k is per field pair, libffm's default; the deep models' one embedding per feature
            object.__setattr__(self, "k", 4 if self.model == "ffm" else 16)
        if self.model not in DEEP_MODELS:
            raise OptionError(f"unknown deep model {self.model!r}: one of {', '.join(sorted(DEEP_MODELS))}")
        numbers = {"k": self.k, "epochs": self.epochs, "batch_size": self.batch_size, "patience": self.patience,
                   "micro_batches": 1 if self.micro_batches is None else self.micro_batches}
        if any(not isinstance(v, int) or v < 1 for v in numbers.values()) or \
                any(not isinstance(h, int) or h < 1 for h in self.hidden) or not 0 < self.dense_lr < math.inf or \
                (self.lr is not None and not 0 < self.lr < math.inf):
            raise OptionError(f"k, epochs, batch_size, patience and every hidden size are integers >= 1 and "
                              f"lr (where given) and dense_lr finite numbers > 0, got {self}")
        get_optimizer(self.optimizer)       # an unknown name is refused before any data is read
        if any(not isinstance(h, int) or h < 1 for h in self.bottom) or \
                any(not isinstance(f, int) or f < 0 for f in self.dense_fields) or \
                len(set(self.dense_fields)) != len(self.dense_fields):
            raise OptionError(f"bottom sizes are integers >= 1 and dense_fields distinct field ids >= 0, got {self}")
        if self.model == "dlrm" and not self.dense_fields:
            raise OptionError("dlrm needs dense features: name the fields that hold them (dense_fields, "
                              "alac train --dense-fields)")
        if self.tables not in ("reference", "kernels"):
            raise OptionError(f"tables run on their reference programs or kernels, got {self.tables!r}")
        if self.model == "ffm" and self.dense_fields:
            raise OptionError("ffm takes no dense features (dense_fields)")
        if self.gpu_memory is not None and (not isinstance(self.gpu_memory, int) or self.gpu_memory < 1):
            raise OptionError(f"gpu_memory is a number of bytes >= 1 (or None), got {self.gpu_memory!r}")
        if self.rank_tables not in RANK_MODES:
            raise OptionError(f"rank_tables is one of {', '.join(RANK_MODES)}, got {self.rank_tables!r}")

    def table_lr(self, n_fields):
        """The tables' learning rate for n_fields sparse fields: lr, else for AdaGrad TABLE_LR_FIELDS /
        n_fields (at most TABLE_LR_MAX), and the optimizer's own default for the others."""
        if self.lr is not None:
            return self.lr
        if self.optimizer == "adagrad":
            return min(TABLE_LR_MAX, TABLE_LR_FIELDS / max(n_fields, 1))
        return get_optimizer(self.optimizer).default_lr


DEFAULT_SETTINGS = DeepSettings()
