"""Training a DSL model on data sets: layouts, label mapping, epochs, evaluation."""

from __future__ import annotations

import dataclasses
import time

import torch

from alac import metrics
from alac.plan import Plan
from alac.runtime.executor import Executor, LabelMap
from alac.runtime.layout import LayoutOptions, build_layout


class Trainer:
    def __init__(self, model, lr=0.5, epochs=10, plan=Plan(), backend="triton", device=None, seed=0,
                 log=None, optimizer="sgd", schedule=None, exact_l2=False):
        self.model = model
        self.lr = lr
        self.epochs = epochs
        self.plan = plan
        self.executor = Executor(model, plan, backend, device, seed, optimizer, schedule, exact_l2)
        self.log = log
        self.history = []
        self.train_layout = None
        self.labels = None

    @property
    def backend(self):
        return self.executor.backend_name

    @property
    def device(self):
        return self.executor.device

    def layout_of(self, dataset):
        """The layout of a data set in the training feature space (ids re-indexed as in training)."""
        if dataset is None:
            return None
        if self.train_layout is None:
            return build_layout(dataset, LayoutOptions(chunk_size=self.plan.chunk_size), self.device)
        reference = self.train_layout
        if dataset.n_features != reference.n_features:
            if dataset.n_features > reference.n_features:
                dataset.check_feature_space(reference.n_features)
            dataset = dataclasses.replace(dataset, n_features=reference.n_features)
        return build_layout(dataset, LayoutOptions(chunk_size=self.plan.chunk_size), self.device,
                            feature_order=reference.new_to_old)

    def prepare(self, train):
        """Fit the label mapping and lay the training data out; returns (layout, model labels)."""
        self.labels = LabelMap.fit(self.executor.ir.labels, train.labels, train.source.path or "the training data")
        self.train_layout = None
        self.train_layout = self.layout_of(train)
        return self.train_layout, self.labels.model_labels(self.train_layout.labels)

    def fit(self, train, valid=None):
        _, layout_labels = self.prepare(train)
        valid_layout = self.layout_of(valid)
        for epoch in range(self.epochs):
            started = time.perf_counter()
            loss = self.executor.train_epoch(self.train_layout, layout_labels, epoch, self.lr)
            if self.device.type == "cuda":
                torch.cuda.synchronize()
            record = {"epoch": epoch + 1, "train_loss": loss, "seconds": time.perf_counter() - started}
            if valid_layout is not None:
                record.update({f"valid_{k}": v for k, v in self.evaluate_layout(valid_layout, valid).items()})
            self.history.append(record)
            if self.log:
                self.log(record)
            if not torch.isfinite(torch.tensor(loss)):
                break
        return self.history

    def zero_share(self):
        """The share of exactly-zero values among the per-feature params (L1's sparsity)."""
        values = [p.reshape(-1) for p in self.executor.state.params.values()]
        total = sum(v.numel() for v in values)
        return sum(int((v == 0).sum()) for v in values) / max(total, 1)

    def predict_layout(self, layout):
        return self.executor.predict(layout)

    def predict(self, dataset):
        """Predictions (probability, score or value, as the model says) in the data set's row order."""
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
