"""The field-aware FM arms of benchmarks/fields.py (in results/fields.json):

- speed: FFM k = 4 on the Criteo-shaped synthetic set (`--ffm-rows`, `--ffm-fields` one-hot fields)
  for one epoch, a plain PyTorch FFM (nn.Embedding of F k values per feature with sparse gradients,
  row-wise AdaGrad, the pairs' dot products from one [B, F, F, k] gather) against
  alac.nn.field_aware.FFM (its tables stepped inside backward); ms_per_epoch;
- quality: on iPinYou (16 fields by position) and criteo-tiny (39 Criteo fields hashed into 2^12 ids
  each, split 70/15/15), FFM against FM trained the same way (alac.train.deep: the FFM of one field is
  the FM), their test logloss and AUC at the best validation epoch (early stopping keeps it).
"""

from __future__ import annotations

import dataclasses
import math

import torch

from alac.data import formats, load_libsvm
from alac.data.field_map import from_positions
from alac.data.split import hold_out, split
from alac.data.synthetic import criteo_like
from alac.nn.field_aware import FFM
from alac.train.deep import DeepSettings, DeepTrainer
from benchmarks import fields as host
from benchmarks.fields import MLP_LR, SEED, TABLE_LR, OneHotFields, RowwiseAdagrad, arm, kernels_backend

FFM_K = 4
# the quality arms' settings: the best test logloss of lr 0.05 / 0.1 / 0.2 at batches of 256 on iPinYou
# (CPU look, FFM 0.0208 / 0.0199 / 0.0188, FM of one field 0.0212 / 0.0212 / 0.0213)
QUALITY = DeepSettings(model="ffm", k=FFM_K, lr=0.1, epochs=15, batch_size=256, patience=3, seed=SEED)


class PlainFFM(torch.nn.Module):
    """FFM in plain PyTorch on one-hot ids [B, F]: bias + sum of w + sum over field pairs i < j of
    <v[id_i, field j], v[id_j, field i]>."""

    def __init__(self, n_features, n_fields, k, batch_size):
        super().__init__()
        self.n_fields, self.k, self.batch_size = n_fields, k, batch_size
        self.w = torch.nn.Embedding(n_features, 1, sparse=True)
        self.v = torch.nn.Embedding(n_features, n_fields * k, sparse=True)
        torch.nn.init.zeros_(self.w.weight)
        torch.nn.init.normal_(self.v.weight, std=0.1)
        self.bias = torch.nn.Parameter(torch.zeros(1))

    def forward(self, ids):
        rows, fields = ids.shape
        v = self.v(ids).view(rows, fields, fields, self.k)      # v[b, i, g]: field i's feature, for field g
        across = (v * v.transpose(1, 2)).sum(-1).triu(1).sum((1, 2))
        return self.bias + self.w(ids).sum((1, 2)) + across

    def optimizers(self):
        return [RowwiseAdagrad([self.w.weight, self.v.weight], TABLE_LR, self.batch_size),
                torch.optim.Adam([self.bias], lr=MLP_LR)]


class AlacFFM(OneHotFields):
    """alac.nn.field_aware.FFM on the one-hot ids (no pairs within a field)."""

    def __init__(self, n_features, n_fields, k, device, backend="reference", semantics="sync"):
        super().__init__(FFM(n_features, n_fields, k=k, optimizer="adagrad", lr=TABLE_LR, seed=SEED, device=device,
                             one_hot=True, backend=backend, semantics=semantics))

    def optimizers(self):
        return [self.dense_optimizer([self.model.bias])]


def speed_arms(args):
    rows = args.ffm_rows + args.valid_rows
    data = criteo_like(rows, n_fields=args.ffm_fields, seed=SEED, model="fm", device=args.device)
    ids, labels = data.indices.long().view(rows, args.ffm_fields), data.labels.float()
    train_ids, train_labels = ids[:args.ffm_rows], labels[:args.ffm_rows]

    def batch_of(first, count):
        picked = (first + torch.arange(count, device=ids.device)) % train_ids.shape[0]
        return train_ids[picked], train_labels[picked]

    steps = math.ceil(args.ffm_rows / args.batch_size)
    arms = []
    for name, make in (("pytorch_ffm", lambda: PlainFFM(data.n_features, args.ffm_fields, FFM_K,
                                                         args.batch_size).to(args.device)),
                       ("alac_ffm", lambda: AlacFFM(data.n_features, args.ffm_fields, FFM_K, args.device)),
                       ("alac_ffm_kernels", lambda: AlacFFM(data.n_features, args.ffm_fields, FFM_K, args.device,
                                                            kernels_backend(args))),
                       ("alac_ffm_kernels_async", lambda: AlacFFM(data.n_features, args.ffm_fields, FFM_K,
                                                                  args.device, kernels_backend(args), "async"))):
        torch.manual_seed(SEED)
        model = make()
        result = arm(name, model, model, batch_of, (ids[args.ffm_rows:], labels[args.ffm_rows:]), args,
                     "criteo_like_ffm", steps)
        result["ms_per_epoch"] = 1000 * result["seconds"] * args.ffm_rows / (steps * args.batch_size)
        arms.append(result)
    return arms


def _quality_sets():
    """{name: (train, valid, test)} with every entry's field, of the shared data present."""
    sets = {}
    ipinyou = host.SHARED_DATA / "ipinyou"
    if ipinyou.exists():
        train, test = (load_libsvm(ipinyou / name) for name in ("train.fm.txt", "test.fm.txt"))
        fields = from_positions(train)
        train, valid = hold_out(fields.apply(train), 0.1, SEED)
        sets["ipinyou_ffm"] = (train, valid, fields.apply(test, unlisted_ok=True))
    tiny = host.SHARED_DATA / "criteo-tiny" / "train.txt"
    if tiny.exists():
        sets["criteo_tiny_ffm"] = split(formats.load(tiny, "criteo", hash_bits=12), (0.7, 0.15, 0.15), seed=SEED)
    return sets


def _one_field(dataset):
    return dataclasses.replace(dataset, fields=torch.where(dataset.fields >= 0, 0, -1).int(), n_fields=1)


def quality_arms(args):
    from alac import metrics

    arms = []
    for data, (train, valid, test) in _quality_sets().items():
        for name, view in (("alac_ffm", lambda d: d), ("alac_fm_one_field", _one_field)):
            trainer = DeepTrainer(QUALITY, args.device)
            history = trainer.fit(view(train), view(valid))
            probability = trainer.predict(view(test))
            positive = test.labels.to(probability.device) > 0.5
            best = min(range(len(history)), key=lambda i: history[i]["valid_logloss"])
            arms.append({"name": name, "data": data, "fields": int(view(train).n_fields), "kernels_per_step": None,
                         "samples_per_s": sum(r["rows_per_s"] for r in history) / len(history),
                         "seconds": sum(r["seconds"] for r in history), "steps": None, "best_epoch": best + 1,
                         "auc": float(metrics.auc(probability, positive)),
                         "logloss": float(metrics.logloss(probability, positive))})
            print(arms[-1], flush=True)
    return arms
