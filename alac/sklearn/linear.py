"""scikit-learn estimators over alac: the models of the zoo, or any DSL model, as drop-in
classifiers and regressors (fit, predict, predict_proba, decision_function, score, partial_fit,
coef_, intercept_, classes_, n_features_in_), usable in Pipeline and GridSearchCV.

Inputs are scipy.sparse matrices or dense arrays; fit also takes a block store (a folder written by
alac.runtime.movement.block_store, or an opened DiskBlocks / PinnedBlocks), streamed from disk or host memory
and never loaded whole: its labels are the targets, and early stopping watches the training loss
(no rows are held out). The estimators default to optimizer="auto", as
`alac train` does (alac.train.race): AdaGrad, whose step does not depend on the features' scale, and plain
SGD train on the validation rows' early stopping and the better is kept (optimizer_, learning_rate_
and alpha_ say which); without validation rows or with a learning_rate, AdaGrad trains alone.
optimizer="sgd" and the rest are one parameter away. Binary classifiers only (as the wide models are):
y must have two classes; classes_[1] is the positive one. Fitted estimators pickle (the trained
arrays are kept; the compiled kernels are rebuilt on first use).
"""

from __future__ import annotations

import argparse
import warnings

import numpy as np
import torch
from sklearn.base import BaseEstimator, ClassifierMixin, RegressorMixin
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils.metaestimators import available_if
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, validate_data

from alac import defaults
from alac.data.split import hold_out
from alac.models.fm import DEFAULT_L2 as _FM_L2
from alac.sklearn.fm_coordinate import coordinate_raw, fit_coordinate
from alac.sklearn.inputs import (
    block_source,
    predict_dataset,
    sparse_dataset,
    training_dataset,
)
from alac.sklearn.scd import fit_scd, scd_raw
from alac.train.race import ADAPTIVE, AUTO, Arm, race
from alac.train.race import arms as race_arms


def _zoo(name):
    """A zoo model class (alac.models): the estimators train the same models as the command line."""
    from alac.models import zoo_module

    return zoo_module(name).MODEL


def _fit(trainer, train, valid=None, epochs=None):
    """trainer.fit; returns the divergence (the last good parameters are restored) or None."""
    from alac.train.trainer import TrainingDiverged

    try:
        trainer.fit(train, valid, **({} if epochs is None else {"epochs": epochs}))
    except TrainingDiverged as error:
        return error
    return None


def _warn_on_divergence(diverged):
    """A divergence becomes a ConvergenceWarning, as scikit-learn's solvers report training that did not
    converge."""
    if diverged is not None:
        warnings.warn(str(diverged), ConvergenceWarning, stacklevel=3)


class _WideEstimator(BaseEstimator):
    """Shared machinery: the Trainer behind fit / partial_fit / predict, kept as arrays when pickled."""

    _kind = None  # "classifier" or "regressor"
    _solvers = ("sgd",)   # sgd: the Trainer; scd: alac.sklearn.scd; als, mcmc: alac.sklearn.fm_coordinate

    def _build_model(self, l2):
        raise NotImplementedError

    # the L2 coefficient where alpha is None (the model's default)
    _default_alpha = 0.0

    def _model_options(self):
        """The zoo module and its options (for the model's SGD rate), or None for a user's DSL model."""
        return None

    def _alpha(self, value_scale):
        """(the L2 coefficient, whether it was given): alpha, or where it is None the model's default in
        units of the training rows' mean |value| (value_scale; alac.models.default_l2)."""
        alpha = getattr(self, "alpha", None)
        return (self._default_alpha * value_scale, False) if alpha is None else (alpha, True)

    def _lr(self, optimizer):
        if self.learning_rate is not None:
            return self.learning_rate
        from alac.optimizers import get_optimizer

        lr = get_optimizer(optimizer).default_lr
        if lr is None:
            raise ValueError(f"optimizer {optimizer!r} has no default learning rate: give learning_rate")
        return lr

    def _single_arm(self, value_scale):
        """What trains without a race: the optimizer named (AdaGrad for auto), its rate and the L2."""
        optimizer = ADAPTIVE if self.optimizer == AUTO else self.optimizer
        return Arm(optimizer, self._lr(optimizer), self._alpha(value_scale)[0])

    def _contestants(self, value_scale):
        """The auto race's arms, or None: an optimizer named, a learning rate given or a user's model."""
        options = self._model_options()
        if self.optimizer != AUTO or self.learning_rate is not None or options is None:
            return None
        from alac.cli.train import default_lr

        module, arguments = options
        return race_arms(self._lr(ADAPTIVE), default_lr(module, arguments, "sgd"), *self._alpha(value_scale))

    def _keep_arm(self, arm):
        self.optimizer_, self.learning_rate_, self.alpha_ = arm.optimizer, arm.lr, arm.l2

    def _plan(self, data=None):
        """The plan `alac train` would run before its planning step (the Trainer's, which picks the hot
        segment from the training data on a GPU): its chunk size for the mode and backend (a block
        store's own: its chunks are its batches' units); once fitted and without data, the fit's plan."""
        from alac.plan import Plan
        from alac.runtime.movement.blocks import is_block_source
        from alac.runtime.planning.planner import default_chunk_size

        if data is None and "plan" in getattr(self, "_fitted", {}):
            return self._fitted["plan"]
        batch = max(16, int(self.batch_size) // 16 * 16)
        chunk_size = data.meta.chunk_size if is_block_source(data) else default_chunk_size(self.mode, batch,
                                                                                            self.backend)
        return Plan(chunk_size=chunk_size, batch_size=batch, semantics=self.mode, param_mode=self.param_mode,
                    memory_budget=None if self.memory_budget is None else int(self.memory_budget))

    def _new_trainer(self, arm, data=None):
        """A Trainer (its plan's chunks those of data where given); under torchrun (several ranks) a
        DataParallelTrainer: fit(X, y) given the whole set on every rank trains each rank's share of
        its rows."""
        from alac.optimizers import get_optimizer
        from alac.runtime.ranks.distributed import init_ranks
        from alac.train.data_parallel import DataParallelTrainer
        from alac.train.trainer import Trainer

        options = dict(lr=arm.lr, epochs=self.epochs, plan=self._plan(data), backend=self.backend,
                       seed=self.random_state or 0, optimizer=get_optimizer(arm.optimizer),
                       early_stopping="patience" if self.early_stopping else None, patience=self.n_iter_no_change,
                       choose_hot_segment=True)
        ranks = init_ranks()
        if ranks.world > 1:
            return DataParallelTrainer(self._build_model(arm.l2), ranks=ranks, **options)
        return Trainer(self._build_model(arm.l2), **options)

    def _trainer_for_use(self):
        trainer = getattr(self, "_trainer", None)
        if trainer is None:
            from alac.runtime.execution.executor import LabelMap
            from alac.runtime.execution.state import ModelState

            trainer = self._new_trainer(Arm(self.optimizer_, self.learning_rate_, self.alpha_))
            saved = self._fitted
            device = trainer.device
            tensors = {part: {k: torch.from_numpy(v) for k, v in saved[part].items()}
                       for part in ("params", "globals", "states")}
            trainer.executor.state = ModelState.placed(tensors["params"], tensors["globals"], tensors["states"], device,
                                                       trainer.executor.plan.host_params)
            trainer.feature_order = torch.from_numpy(saved["feature_order"])
            trainer.labels = LabelMap(saved["label_kind"], saved["positive"])
            trainer.epoch = saved["epoch"]
            trainer.executor.batches_done = saved["batches_done"]
            trainer.executor.value_scale = saved["value_scale"]
            self._trainer = trainer
        return trainer

    def _snapshot(self, trainer):
        state = trainer.executor.state
        self._fitted = {
            "params": {k: v.cpu().numpy() for k, v in state.params.items()},
            "globals": {k: v.cpu().numpy() for k, v in state.globals.items()},
            "states": {k: v.cpu().numpy() for k, v in state.states.items()},
            "feature_order": trainer.feature_order.cpu().numpy(), "label_kind": trainer.labels.kind,
            "positive": trainer.labels.positive, "epoch": trainer.epoch,
            "batches_done": trainer.executor.batches_done, "value_scale": trainer.executor.value_scale,
            "plan": trainer.plan}
        params, globals_ = trainer.parameters()
        weights = params["w"]
        weights = weights.astype(np.float64)
        self.coef_ = weights.reshape(1, -1) if self._kind == "classifier" else weights
        self.intercept_ = np.array([globals_["b"]])
        if "v" in params:
            self.factors_ = params["v"]

    def __getstate__(self):
        state = dict(self.__dict__)
        state.pop("_trainer", None)
        return state

    def _targets(self, y, first):
        if self._kind == "classifier":
            if first:
                check_classification_targets(y)
                given = getattr(self, "_partial_classes", None)
                self.classes_ = np.unique(y) if given is None else given
                if len(self.classes_) > 2:
                    raise ValueError(f"Only binary classification is supported: {type(self).__name__} is a wide "
                                     f"binary model and y has {len(self.classes_)} classes")
                if len(self.classes_) < 2:
                    raise ValueError(f"{type(self).__name__} needs two classes in y, got 1 class")
            unknown = ~np.isin(y, self.classes_)
            if unknown.any():
                raise ValueError(f"y has labels not seen in the first fit: {np.unique(y[unknown])[:5]}")
            return (y == self.classes_[1]).astype(np.float32)
        return np.asarray(y, dtype=np.float64)

    def fit(self, X, y=None):
        self._scd_fit = self._coordinate_fit = False
        solver = getattr(self, "solver", "sgd")
        if solver not in self._solvers:
            raise ValueError(f"{type(self).__name__}: solver is one of {', '.join(map(repr, self._solvers))}, "
                             f"got {solver!r}")
        if solver == "scd":
            return fit_scd(self, X, y)
        if solver in ("als", "mcmc"):
            return fit_coordinate(self, X, y)
        if not getattr(self, "fit_intercept", True):
            raise ValueError(f"{type(self).__name__}: fit_intercept=False needs solver='scd' (the SGD models carry "
                             "a bias)")
        source = block_source(X)
        if source is not None:
            return self._fit_blocks(source, y)
        # a DataFrame's columns as tables are read (categorical ids one-hot per field)
        train, valid = training_dataset(self, X, y), None
        if self.early_stopping:
            # like SGDClassifier(early_stopping=True): a random validation_fraction of the rows
            train, valid = hold_out(train, self.validation_fraction, self.random_state or 0)
        contestants = self._contestants(train.value_scale()) if valid is not None else None
        if contestants:
            runs = []

            def train_arm(arm):
                trainer = self._new_trainer(arm, train)
                runs.append((trainer, _fit(trainer, train, valid)))
                return runs[-1]

            winner = race(contestants, train_arm)
            (trainer, diverged), arm = runs[winner], contestants[winner]
        else:
            arm = self._single_arm(train.value_scale())
            trainer = self._new_trainer(arm, train)
            diverged = _fit(trainer, train, valid)
        _warn_on_divergence(diverged)
        self._keep_arm(arm)
        self._trainer = trainer
        self._snapshot(trainer)
        return self

    def _fit_blocks(self, source, y):
        """fit on a block source: one arm (no validation rows to race on), the targets its labels."""
        if y is not None:
            raise ValueError("a block store holds its own labels: fit(store) takes no y")
        arm = self._single_arm(source.value_scale)
        trainer = self._new_trainer(arm, source)
        diverged = _fit(trainer, source)
        _warn_on_divergence(diverged)
        self.n_features_in_ = source.meta.n_features
        if self._kind == "classifier":
            # the classes the label map was fit on (the first block's; classes_[1] the positive)
            self.classes_ = np.array(trainer.labels.classes, dtype=np.float64)
        self._keep_arm(arm)
        self._trainer = trainer
        self._snapshot(trainer)
        return self

    def _sgd(self):
        return getattr(self, "solver", "sgd") == "sgd"

    @available_if(_sgd)
    def partial_fit(self, X, y, classes=None):
        """One epoch over (X, y), continuing the model of earlier calls (the first call fixes the
        feature space and, for classifiers, needs classes); SGD only."""
        first = not hasattr(self, "_fitted")
        X, y = validate_data(self, X, y, accept_sparse="csr", dtype=[np.float64, np.float32], reset=first,
                             y_numeric=self._kind == "regressor")
        if first and self._kind == "classifier":
            if classes is None:
                raise ValueError("the first partial_fit of a classifier needs classes=[negative, positive]")
            self._partial_classes = np.asarray(classes)
        targets = self._targets(y, first)
        data = sparse_dataset(X, targets)
        if first:
            arm = self._single_arm(data.value_scale())
            self._keep_arm(arm)
            trainer = self._new_trainer(arm, data)
        else:
            trainer = self._trainer_for_use()
        trainer.early_stopping = None   # one epoch on the data given, as scikit-learn's partial_fit
        _warn_on_divergence(_fit(trainer, data, epochs=1))
        self._trainer = trainer
        self._snapshot(trainer)
        return self

    def _raw(self, X):
        if getattr(self, "_scd_fit", False):
            return scd_raw(self, X)
        if getattr(self, "_coordinate_fit", False):
            return coordinate_raw(self, X)
        check_is_fitted(self, "_fitted")
        return self._trainer_for_use().predict(predict_dataset(self, X)).cpu().double().numpy()

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        # the generated kernels add gradients with float atomics on a GPU, in a different order every
        # run: two fits agree to rounding, not bit for bit (scikit-learn's idempotency checks failed on
        # a GPU); the reference executor on the CPU is deterministic
        tags.non_deterministic = self.backend == "triton" and torch.cuda.is_available()
        return tags


_COMMON_DOC = """

    learning_rate: the step on the batch-mean gradient (None: the optimizer's default); epochs: the
    most epochs; batch_size; optimizer (auto, the default of alac.defaults: AdaGrad and SGD raced on
    the validation rows; or adagrad, sgd, ftrl, momentum, adam); alpha: the L2 coefficient (FM: None
    is 0.01, and none for SGD in the auto race); l1: the L1 coefficient (with ftrl or sgd);
    early_stopping: hold out validation_fraction of the rows (random, random_state) and stop after
    n_iter_no_change epochs without a better validation loss, keeping the best epoch's model; mode:
    sync or async; backend: triton on a GPU (the PyTorch reference without one); random_state;
    memory_budget: bytes of GPU memory the data and the rows may take (alac train --gpu-memory; None: a
    share of the free memory); param_mode: rows over it behind a HybridHash cache or FAE's (auto).
    Fitted: optimizer_, learning_rate_ and alpha_ (what trained the model, the auto race's winner).
    solver: "sgd", or "scd" (coordinate descent to a duality gap below tol in at most epochs epochs;
    alpha is then the L2 of mean loss + alpha/2 ||w||^2, fit_intercept adds a regularized constant
    feature, verbose > 0 prints the gap after every epoch, dual: the form ("auto", True, False: Ridge's
    and LogisticRegression's; LinearSVC solves the dual); alac.sklearn.scd); the FMs' "als" and "mcmc"
    (libFM's solvers, epochs sweeps, burn_in; FMClassifier by probit MCMC: alac.sklearn.fm_coordinate).
"""


class _BinaryClassifier(ClassifierMixin, _WideEstimator):
    _kind = "classifier"

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.classifier_tags.multi_class = False
        return tags

    def decision_function(self, X):
        raw = self._raw(X)
        if self._probabilistic:
            raw = np.clip(raw, 1e-12, 1 - 1e-12)
            return np.log(raw) - np.log1p(-raw)
        return raw

    def _has_proba(self):
        return self._probabilistic

    @available_if(_has_proba)
    def predict_proba(self, X):
        p = self._raw(X)
        return np.column_stack([1 - p, p])

    def predict(self, X):
        scores = self.decision_function(X)
        return self.classes_[(scores > 0).astype(int)]


class _Regressor(RegressorMixin, _WideEstimator):
    _kind = "regressor"

    def predict(self, X):
        return self._raw(X)


class _Linear:
    """The linear estimators' parameters (scikit-learn reads them from this __init__)."""

    _solvers = ("sgd", "scd")

    def __init__(self, learning_rate=None, epochs=defaults.EPOCHS, batch_size=defaults.BATCH_SIZE,
                 optimizer=defaults.OPTIMIZER, alpha=0.0, l1=0.0, early_stopping=True,
                 validation_fraction=defaults.VALID_SPLIT, n_iter_no_change=defaults.PATIENCE, mode="sync",
                 backend="triton", random_state=None, solver="sgd", tol=1e-6, fit_intercept=True, verbose=0,
                 dual="auto", memory_budget=None, param_mode="auto"):
        self.memory_budget, self.param_mode = memory_budget, param_mode
        self.learning_rate, self.epochs, self.batch_size, self.optimizer = learning_rate, epochs, batch_size, optimizer
        self.alpha, self.l1, self.early_stopping = alpha, l1, early_stopping
        self.validation_fraction, self.n_iter_no_change = validation_fraction, n_iter_no_change
        self.mode, self.backend, self.random_state = mode, backend, random_state
        self.solver, self.tol, self.fit_intercept, self.verbose, self.dual = solver, tol, fit_intercept, verbose, dual

    def _build_model(self, l2):
        return _zoo(self._zoo_name)(l2=l2, l1=self.l1)

    def _model_options(self):
        from alac.models import zoo_module

        return zoo_module(self._zoo_name), argparse.Namespace()


class LogisticRegression(_Linear, _BinaryClassifier):
    __doc__ = "L2/L1-regularised logistic regression trained by alac's kernels." + _COMMON_DOC
    _probabilistic = True
    _zoo_name = "lr"


class LinearSVC(_Linear, _BinaryClassifier):
    __doc__ = "Linear SVM (hinge loss) trained by alac's kernels." + _COMMON_DOC
    _probabilistic = False
    _zoo_name = "lsvm"


class Ridge(_Linear, _Regressor):
    __doc__ = "Least squares with L2 (alpha) trained by alac's kernels." + _COMMON_DOC
    _zoo_name = "lsr"


class Lasso(_Regressor):
    """Least squares with L1, 1/(2N) ||y - X w||^2 + alpha ||w||_1 (scikit-learn's Lasso), by
    coordinate descent on alac's SCD kernels to a duality gap below tol (alac.sklearn.scd); epochs:
    the most epochs; fit_intercept: a regularized constant feature; backend: triton on a GPU (the
    float64 sequential solver without one, or with "reference"); verbose > 0: the gap every epoch."""

    _solvers = ("scd",)

    solver = "scd"

    def __init__(self, alpha=1.0, epochs=1000, tol=1e-6, fit_intercept=True, backend="triton", random_state=None,
                 verbose=0):
        self.alpha, self.epochs, self.tol, self.fit_intercept = alpha, epochs, tol, fit_intercept
        self.backend, self.random_state, self.verbose = backend, random_state, verbose


class _FactorizationMachine:
    """The FM estimators' parameters."""

    def __init__(self, n_factors=8, init_std=0.01, learning_rate=None, epochs=defaults.EPOCHS,
                 batch_size=defaults.BATCH_SIZE, optimizer=defaults.OPTIMIZER, alpha=None, l1=0.0,
                 early_stopping=True, validation_fraction=defaults.VALID_SPLIT, n_iter_no_change=defaults.PATIENCE,
                 mode="sync", backend="triton", random_state=None, memory_budget=None, param_mode="auto",
                 solver="sgd", burn_in=None):
        self.n_factors, self.init_std = n_factors, init_std
        self.solver, self.burn_in = solver, burn_in
        self.memory_budget, self.param_mode = memory_budget, param_mode
        self.learning_rate, self.epochs, self.batch_size, self.optimizer = learning_rate, epochs, batch_size, optimizer
        self.alpha, self.l1, self.early_stopping = alpha, l1, early_stopping
        self.validation_fraction, self.n_iter_no_change = validation_fraction, n_iter_no_change
        self.mode, self.backend, self.random_state = mode, backend, random_state

    def _build_model(self, l2):
        return _zoo("fm")(k=self.n_factors, loss=self._loss, l2=l2, l1=self.l1, init_std=self.init_std)

    def _model_options(self):
        from alac.models import zoo_module

        return zoo_module("fm"), argparse.Namespace(loss=self._loss)

    # alpha=None: the model's L2, except for SGD in the auto race (alac.train.race)
    _default_alpha = _FM_L2
    _solvers = ("sgd", "als", "mcmc")


class FMClassifier(_FactorizationMachine, _BinaryClassifier):
    __doc__ = "Factorization machine (k factors, logistic loss). factors_ holds V." + _COMMON_DOC
    _probabilistic = True
    _loss = "logistic"


class FMRegressor(_FactorizationMachine, _Regressor):
    __doc__ = "Factorization machine (k factors, squared loss). factors_ holds V." + _COMMON_DOC
    _loss = "squared"


class _Wide:
    """The parameters of estimators over any DSL model."""

    def __init__(self, model=None, learning_rate=None, epochs=defaults.EPOCHS, batch_size=defaults.BATCH_SIZE,
                 optimizer=defaults.OPTIMIZER, early_stopping=True, validation_fraction=defaults.VALID_SPLIT,
                 n_iter_no_change=defaults.PATIENCE, mode="sync", backend="triton", random_state=None,
                 memory_budget=None, param_mode="auto"):
        self.model, self.learning_rate, self.epochs, self.batch_size = model, learning_rate, epochs, batch_size
        self.memory_budget, self.param_mode = memory_budget, param_mode
        self.optimizer, self.early_stopping = optimizer, early_stopping
        self.validation_fraction, self.n_iter_no_change = validation_fraction, n_iter_no_change
        self.mode, self.backend, self.random_state = mode, backend, random_state

    def _build_model(self, l2):
        if self.model is None:
            raise ValueError(f"{type(self).__name__} needs model=<an alac.dsl.Model>")
        return self.model


class WideClassifier(_Wide, _BinaryClassifier):
    """Any binary DSL model (an alac.dsl.Model instance with labels = "binary") as a classifier.
    The model must have a scalar param `w` (coef_) and a global `b` (intercept_)."""

    @property
    def _probabilistic(self):
        return self.model.prediction == "probability"


class WideRegressor(_Wide, _Regressor):
    """Any real-valued DSL model as a regressor (see WideClassifier)."""
