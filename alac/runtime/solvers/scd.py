"""Stochastic coordinate descent (TPA-SCD): the primal solver over A's columns (squared loss with l1
and l2: ridge, lasso, elastic net; squared hinge and logistic with l2, by Newton steps, the shared
vector the rows' margins) and the dual (SDCA) over its rows (squared, hinge, squared hinge,
logistic with l2), every epoch a fresh permutation of the coordinates, the gap of
alac.runtime.solvers.duality evaluated in float64 after each epoch.

Backends: "triton" (the generated kernels on the GPU: one program per few coordinates, the shared
vector updated with float atomics), "interpret" (the same kernels in Triton's interpreter, which
runs the programs one after the other: exactly sequential SCD, its data in float32), "sequential" (the
float64 reference, alac.runtime.solvers.scd_sequential) and "auto" (triton on a GPU, else sequential).

Virtual workers (CoCoA with sigma = 1): the coordinates cut into `workers` parts, each part's local
epoch run in turn from the same shared vector, their changes aggregated with gamma: 1 / K
("averaging"), 1 ("adding"), the exact line search of the squared loss ("adaptive", with the
corrected formulas of TPA-SCD's errata: y in the primal numerator, ||dv||^2 / lambda + N ||dalpha||^2
in the dual denominator, beta and w taken before the epoch) or its exact search over the plane of
this direction and the previous step ("subspace"; alac.runtime.solvers.cocoa).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import time

import torch

from alac.errors import OptionError
from alac.runtime.device.host_copy import to_device
from alac.runtime.solvers import duality
from alac.runtime.solvers.cocoa import SEARCHES, cocoa_gammas, coordinate_dots, resolve_aggregation, shared_dots
from alac.runtime.solvers.compressed import (
    CompressedAxis,
    CompressedMatrix,
    reduce_entries,
    summed_duplicates,
    transposed,
)
from alac.runtime.solvers.scd_launcher import ScdLauncher, band_programs, bands
from alac.runtime.solvers.scd_sequential import LOSS_CODES, dual_epoch, margin_epoch, primal_epoch

# the conjugate losses' curvature in alpha, per lambda N, credited against the coupling: the squared
# loss's 1 and the squared hinge's 1/2; none for the hinge, nor for the logistic, whose least (4, at
# b = 1/2) let 300 rows in flight take several times sequential SCD's epochs (tests/runtime/solvers/test_scd.py)
CONJUGATE_CURVATURE = {"squared": 1.0, "squared_hinge": 0.5, "logistic": 0.0, "hinge": 0.0}
# "auto" steps on the CPU below this many coordinates in flight: a9a's dual logistic, one at a time,
# ran far slower on a GPU than the float64 CPU solver (benchmarks/scd.py)
MIN_GPU_IN_FLIGHT = 32
BACKENDS = ("auto", "triton", "interpret", "sequential")
# the primal's losses: the squared loss's exact steps, Newton steps of the smooth classification ones
PRIMAL_LOSSES = ("squared", "squared_hinge", "logistic")


class ScdProblem:
    """A SparseDataset as a solver reads it, on `device`: its labels and the axis the form steps
    over (columns, CSC, for the primal; rows, CSR, for the dual), through which the objectives'
    float64 products are computed (alac.runtime.solvers.compressed: no float64 copy of the data)."""

    def __init__(self, data, form, loss, device, dtype=torch.float32):
        if data.n_rows == 0 or data.indices.numel() == 0:
            raise OptionError("SCD needs a data set with at least one row and one entry")
        self.n_rows, self.n_features, self.loss = data.n_rows, data.n_features, loss
        self.labels = signed_labels(data.labels, loss).to(device, dtype)
        # on the device first, where the primal's CSC is made (slow on the CPU for the webspam-shaped set)
        data = dataclasses.replace(data, indptr=to_device(data.indptr, device), indices=to_device(data.indices, device),
                                   values=to_device(data.values, device), fields=None)
        # a row naming a column twice steps with the curvature of its summed entries (SDCA diverged without)
        indptr, indices, values = summed_duplicates(data.indptr, data.indices, data.values, data.n_features)
        data = dataclasses.replace(data, indptr=indptr, indices=indices, values=values)
        if form == "dual":
            self.axis = CompressedAxis.of(data.indptr, data.indices, data.values, dtype, device)
        else:
            self.axis = CompressedAxis.of(*transposed(data.indptr, data.indices, data.values, data.n_features),
                                          dtype, device)
        self.matrix = CompressedMatrix(self.axis, "rows" if form == "dual" else "columns",
                                       (data.n_rows, data.n_features))


def _moved(problem, device):
    """(the problem's matrix, its labels) on `device`, for the certificates' products."""
    if device == problem.labels.device:
        return problem.matrix, problem.labels
    a = problem.axis
    axis = CompressedAxis(a.start.to(device), a.index.to(device), None if a.value is None else a.value.to(device),
                          a.norm.to(device))
    return CompressedMatrix(axis, problem.matrix.by, problem.matrix.shape), problem.labels.to(device)


def signed_labels(labels, loss):
    """The labels a loss reads: as given for the squared loss, +-1 for the classification losses
    (from 0/1 or -1/+1 labels; anything else is refused)."""
    if loss == "squared":
        return labels
    seen = set(torch.unique(labels).tolist())
    if not seen <= {0.0, 1.0} and not seen <= {-1.0, 1.0}:
        raise OptionError(f"the {loss} loss takes two classes labelled 0/1 or -1/+1, got labels {sorted(seen)[:5]}")
    return torch.where(labels > 0, 1.0, -1.0).to(labels.dtype)


def with_constant_feature(data):
    """The rows with a constant 1 appended (feature n_features): an intercept regularized like the
    other weights, as LIBLINEAR fits one."""
    from alac.data.dataset import SparseDataset

    position = torch.arange(data.nnz, device=data.device) + data.entry_rows()   # each entry moves down by its row
    indices = torch.full((data.nnz + data.n_rows,), data.n_features, dtype=torch.int32, device=data.device)
    indices[position] = data.indices
    values = torch.ones(indices.numel(), device=data.device)
    values[position] = data.values_or_ones()
    return SparseDataset(data.indptr + torch.arange(data.n_rows + 1, device=data.device), indices, values, data.labels,
                         data.n_features + 1)


class Overlap:
    """How the steps of coordinates in flight together add up: the expected separable
    over-approximation of Richtarik and Takac for tau-nice sampling. Each step is computed as if its
    coordinate moved alone, so the steps of coordinates in flight together add up on their common
    entries (Criteo-shaped rows share their popular ids with a tenth of all rows) and, divided by
    ||a_m||^2 alone, overshoot and diverge. With tau in flight the curvature
    c_m = sum over m's entries j of a^2 (1 + (omega_j - 1)(tau - 1) / (n - 1)), omega_j the
    coordinates sharing entry j, keeps them from it in expectation; tau = 1 gives ||a_m||^2, the
    exact step. members: the coordinates stepping together (a mask; None: all), the others' entries
    not counted in omega and their c left ||a||^2. One pass over the entries, made once."""

    def __init__(self, axis, n_shared, members=None):
        sharing = torch.zeros(n_shared, dtype=torch.float64, device=axis.start.device)
        for coordinate, index, _ in axis.chunks():
            sharing.index_add_(0, index, torch.ones(index.numel(), dtype=torch.float64, device=index.device)
                               if members is None else members[coordinate].double())
        extra = reduce_entries(axis, lambda index, value: (sharing[index] - 1).clamp_min(0) * (
            1.0 if value is None else value.double() ** 2))
        self.axis, self.members = axis, members
        self.extra = extra if members is None else torch.where(members, extra, 0.0)
        self.n = axis.n_coordinates if members is None else int(members.sum())

    def curvature(self, in_flight):
        """c for `in_flight` coordinates stepping at once (in the axis's dtype)."""
        if in_flight <= 1:
            return self.axis.norm
        return (self.axis.norm.double() + self.extra * ((in_flight - 1) / max(1, self.n - 1))).to(self.axis.norm.dtype)

    def coupling(self, regularizer=0.0):
        """The mean share of c - ||a||^2 per extra coordinate in flight, of ||a||^2 plus `regularizer`."""
        norm = self.axis.norm.double()
        inside = norm.sum() if self.members is None else norm[self.members].sum()
        return float(self.extra.sum() / (max(1, self.n - 1) * (inside + self.n * regularizer).clamp_min(1e-300)))


class ScdSolver:
    def __init__(self, data, form="primal", loss="squared", l2=1e-3, l1=0.0, backend="auto", wild=False,
                 workers=1, aggregation=None, seed=0, device=None, evaluate_on=None, in_flight=None,
                 problem_rows=None):
        """form: "primal" (columns; squared loss with l1 and l2, or squared hinge and logistic with
        l2 > 0) or "dual" (rows; any loss, l2 > 0);
        wild: non-atomic shared updates (a negative control); workers, aggregation: CoCoA's
        virtual workers (alac.runtime.solvers.cocoa: "subspace" or "adaptive" for the squared loss without l1,
        "averaging" or "adding" for any; None: resolve_aggregation's; one worker steps plainly unless
        given a search); evaluate_on: the
        device of the certificates' float64 products (default the solver's: the sequential solver
        on the CPU may have its gaps computed on a GPU, much faster on large problems);
        in_flight: the kernels' concurrent coordinates (default: alac.runtime.solvers.scd_launcher.programs,
        from the problem's size, its longest coordinate and its coupling; their steps are damped
        by Overlap's curvatures); problem_rows: N of the whole problem where `data` is a rank's share
        of its rows (alac.runtime.solvers.cocoa_ranks; the dual's steps scale with lambda N)."""
        if form not in ("primal", "dual"):
            raise OptionError(f"SCD form is primal or dual, got {form!r}")
        if loss not in duality.LOSSES or (form == "primal" and loss not in PRIMAL_LOSSES):
            raise OptionError(f"SCD loss: the primal solves one of {', '.join(PRIMAL_LOSSES)}, the dual one of "
                              f"{', '.join(duality.LOSSES)}; got {form} {loss!r}")
        if l2 < 0 or l1 < 0 or ((form == "dual" or loss != "squared") and (l2 <= 0 or l1 > 0)):
            raise OptionError(f"SCD needs l1, l2 >= 0, and the dual l2 > 0 without l1 (the primal too, but for "
                              f"its squared loss); got l1={l1}, l2={l2}")
        if backend not in BACKENDS:
            raise OptionError(f"SCD backend is one of {', '.join(BACKENDS)}, got {backend!r}")
        if not isinstance(workers, int) or workers < 1:
            raise OptionError(f"workers is an integer >= 1, got {workers!r}")
        aggregation = resolve_aggregation(aggregation, loss, l1, workers)
        if in_flight is not None and (not isinstance(in_flight, int) or in_flight < 1):
            raise OptionError(f"in_flight is a number of coordinates >= 1, got {in_flight!r}")
        on_gpu = torch.cuda.is_available() and backend in ("auto", "triton")
        device = torch.device(device) if device is not None else torch.device("cuda" if on_gpu else "cpu")
        chosen = backend == "auto"
        if chosen:
            backend = "triton" if device.type == "cuda" else "sequential"
        if (backend == "triton") != (device.type == "cuda"):
            raise OptionError(f"SCD backend {backend!r} runs {'on a GPU' if backend == 'triton' else 'on the CPU'}, "
                              f"not on {device}")
        if wild and backend == "sequential":
            raise OptionError("the wild control is a kernel variant: backend triton or interpret")
        self.form, self.loss, self.l2, self.l1 = form, loss, float(l2), float(l1)
        self.workers, self.aggregation, self.wild = workers, aggregation, wild
        self._previous = None     # the last CoCoA step (coordinates, shared), which "subspace" searches beside
        # N of the whole problem (a rank's share of the dual's rows has fewer)
        self.problem_rows = problem_rows or data.n_rows
        self.scale = self.problem_rows * (1.0 if form == "primal" else self.l2)
        self._build(data, backend, device, evaluate_on)
        self.bands, self._overlaps = [], []
        if backend != "sequential":
            self.bands = bands(self.axis, backend == "interpret", split=form == "primal" and not wild)
            # a split band's coordinates step one at a time: nothing overlaps them
            self._overlaps = [None if band.split else Overlap(self.axis, self.n_shared, band.members)
                              for band in self.bands]
            for band, overlap in zip(self.bands, self._overlaps):
                band.in_flight = 1 if band.split else in_flight or band_programs(
                    self.axis, band, self._coupling(overlap), backend == "interpret")
            if chosen and in_flight is None and max(b.in_flight for b in self.bands) < MIN_GPU_IN_FLIGHT:
                backend, device, self.bands, self._overlaps = "sequential", torch.device("cpu"), [], []
                self._build(data, backend, device, evaluate_on if evaluate_on is not None else self.device)
        self.backend = backend
        self.launcher = None if backend == "sequential" else ScdLauncher(form, loss, wild, backend == "interpret",
                                                                         self.bands)
        self._use_bands()
        self.generator = torch.Generator(device=device).manual_seed(seed)
        # CoCoA's parts (one worker: none; its epochs permute every coordinate)
        self.parts = None if workers == 1 else [p.sort().values for p in torch.randperm(
            self.coordinates.numel(), generator=self.generator, device=device).tensor_split(workers)]
        # the sequential solver's entry values, all ones spelled out for binary data (made once)
        self._values = None if backend != "sequential" else (
            self.axis.value if self.axis.value is not None else torch.ones_like(self.axis.index,
                                                                                dtype=self.coordinates.dtype))
        self.epochs, self.seconds, self.history = 0, 0.0, []

    @property
    def in_flight(self):
        """The most coordinates in flight at once (of any band; 1 for the sequential solver)."""
        return max((b.in_flight for b in self.bands), default=1)

    @functools.cached_property
    def coupling(self):
        """The whole problem's coupling (_coupling), as reports show it."""
        whole = next((o for o in self._overlaps if o is not None and o.members is None), None)
        return self._coupling(whole or Overlap(self.axis, self.n_shared))

    def _use_bands(self):
        """The steps' curvatures for the bands' coordinates in flight."""
        self.curvature = self.axis.norm
        for band, overlap in zip(self.bands, self._overlaps):
            if band.in_flight > 1:
                mine = overlap.curvature(band.in_flight)
                self.curvature = mine if band.members is None else torch.where(band.members, mine, self.curvature)

    def _build(self, data, backend, device, evaluate_on):
        """The problem, its certificates' copy and the zero point, for `backend` on `device`."""
        # the data in float32 for the kernels; their coordinates and shared vector in float64 (alac.codegen.scd_kernels)
        dtype = torch.float64 if backend == "sequential" else torch.float32
        self.device = device
        self.problem = ScdProblem(data, self.form, self.loss, device, dtype)
        self.axis = self.problem.axis
        self.evaluation = _moved(self.problem, torch.device(evaluate_on) if evaluate_on is not None else device)
        primal = self.form == "primal"
        self.n_shared = self.problem.n_rows if primal else self.problem.n_features
        # the coordinates (beta or alpha) and the shared vector (w = A beta or v = A^T alpha), both 0
        self.coordinates = torch.zeros(self.problem.n_features if primal else self.problem.n_rows,
                                       dtype=torch.float64, device=device)
        self.shared = torch.zeros(self.n_shared, dtype=torch.float64, device=device)
        self.curvature = self.axis.norm

    def _coupling(self, overlap):
        """An Overlap's coupling against the whole curvature of a coordinate's 1-D problem: the
        data's plus the regularizer's (N l2 for the primal; the conjugate loss's,
        CONJUGATE_CURVATURE times lambda N, for the dual), which keeps the steps apart: a large
        lambda decouples them."""
        if self.form == "primal":
            return overlap.coupling(regularizer=self.scale * self.l2)
        return overlap.coupling(regularizer=CONJUGATE_CURVATURE[self.loss] * self.scale)

    # -- one epoch -------------------------------------------------------------------------------
    def _local_epoch(self, order, shared):
        if self.launcher is not None:
            self.launcher.epoch(self.axis, order, self.problem.labels, self.coordinates, shared, self.curvature,
                                self.scale, self.l1, self.l2)
            return
        a, value = self.axis, self._values.numpy()
        if self.form == "primal" and self.loss == "squared":
            primal_epoch(order.numpy(), a.start.numpy(), a.index.numpy(), value, a.norm.numpy(),
                         self.problem.labels.numpy(), self.coordinates.numpy(), shared.numpy(),
                         float(self.problem.n_rows), self.l1, self.l2)
        elif self.form == "primal":
            margin_epoch(order.numpy(), a.start.numpy(), a.index.numpy(), value, self.problem.labels.numpy(),
                         self.coordinates.numpy(), shared.numpy(), float(self.problem.n_rows), self.l2,
                         LOSS_CODES[self.loss])
        else:
            dual_epoch(order.numpy(), a.start.numpy(), a.index.numpy(), value, a.norm.numpy(),
                       self.problem.labels.numpy(), self.coordinates.numpy(), shared.numpy(), self.scale,
                       LOSS_CODES[self.loss])

    def epoch(self, order=None):
        """One epoch (order: the coordinates' order, one worker stepping plainly; default a fresh
        permutation of each worker's part); returns gamma (None for one worker stepping plainly). One
        worker with a search ("adaptive", "subspace") searches along its epoch's change as CoCoA does
        along the workers' sum: the plane search then extrapolates across epochs."""
        start = time.perf_counter()
        if self.workers == 1 and self.aggregation not in SEARCHES:
            if order is None:
                order = torch.randperm(self.coordinates.numel(), generator=self.generator, device=self.device)
            self._local_epoch(order, self.shared)
            gamma = None
        else:
            if order is not None:
                raise OptionError("an explicit order is for one worker stepping plainly")
            gamma = self._cocoa_epoch()
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        self.seconds += time.perf_counter() - start
        self.epochs += 1
        return gamma

    def _cocoa_epoch(self):
        """CoCoA: a local epoch of each part from the same shared vector, their changes summed (over the
        ranks: _reduce) and applied times gamma (alac.runtime.solvers.cocoa; "subspace": with the previous
        epoch's step beside them, times gamma_2); returns this epoch's direction's gamma."""
        before, shared_before = self.coordinates.clone(), self.shared
        change = torch.zeros_like(self.shared)
        for order in self._local_orders():
            local = shared_before.clone()
            self._local_epoch(order, local)
            change += local - shared_before
        change = self._reduce(change)
        directions = [(self.coordinates - before, change)]
        if self.aggregation == "subspace" and self._previous is not None:
            directions.append(self._previous)
        gammas = self._gammas(before, shared_before, directions)
        step = gammas[0] * directions[0][0]
        taken = gammas[0] * directions[0][1]
        for gamma, (coordinates, shared) in zip(gammas[1:], directions[1:]):
            step, taken = step + gamma * coordinates, taken + gamma * shared
        self.coordinates, self.shared = before + step, shared_before + taken
        self._previous = (step, taken) if self.aggregation == "subspace" else None
        return gammas[0]

    def _local_orders(self):
        """The epoch's order of each part this process steps: every virtual worker's, one after another
        (one worker: every coordinate, drawn as a plain epoch draws them)."""
        if self.parts is None:
            return [torch.randperm(self.coordinates.numel(), generator=self.generator, device=self.device)]
        return [part[torch.randperm(part.numel(), generator=self.generator, device=self.device)]
                for part in self.parts]

    def _reduce(self, tensor, op="sum"):
        """The sum (or max) of every rank's share of a tensor: one process holds the whole problem."""
        return tensor

    def _gammas(self, x, shared, directions):
        if self.aggregation not in SEARCHES:
            return cocoa_gammas(self.aggregation, self.workers)
        labels = self.problem.labels
        return cocoa_gammas(self.aggregation, self.workers, self.form, self.problem_rows, self.l2,
                            self._reduce(coordinate_dots(self.form, x, [d[0] for d in directions], labels)),
                            shared_dots(self.form, shared, [d[1] for d in directions], labels))

    # -- certificates ----------------------------------------------------------------------------
    def objectives(self):
        """(P, D): the primal and dual objectives in float64 at the current point."""
        A, y = self.evaluation
        x = self.coordinates.to(y.device)
        if self.form == "primal" and self.loss == "squared":
            return duality.primal_objectives(A, y, x, self.l2, self.l1, reduce=self._reduce)
        if self.form == "primal":
            return duality.margin_objectives(A, y, x, self.loss, self.l2, reduce=self._reduce)
        return duality.dual_objectives(A, y, x, self.loss, self.l2, n=self.problem_rows, reduce=self._reduce)

    def gap(self):
        """The duality gap in float64 (its primal objective minus its dual's)."""
        primal, dual = self.objectives()
        return primal - dual

    def drift(self):
        """max |A beta - w| / max |w| (primal), or of A^T alpha against v (dual): how far the shared
        vector the kernels kept has moved from the one their coordinates define."""
        A, y = self.evaluation
        x = self.coordinates.to(y.device, torch.float64)
        exact = self._reduce(A @ x if self.form == "primal" else A.t_matmul(x))
        kept = self.shared.to(y.device, torch.float64)
        return float((exact - kept).abs().max() / exact.abs().max().clamp_min(1e-300))

    @property
    def coef_(self):
        """The primal weights: beta, or beta(alpha) = A^T alpha / (l2 N)."""
        if self.form == "primal":
            return self._whole_beta(self.coordinates.double())
        A, y = self.evaluation
        return duality.beta_of_alpha(A, self.coordinates.to(y.device), self.l2, self.problem_rows, self._reduce)

    def _whole_beta(self, beta):
        """The whole problem's beta from this process's coordinates (all of them)."""
        return beta

    def resume_point(self):
        """Where the solver stands (plain data and host tensors), for a checkpoint: continue_from on a
        solver built alike continues its epochs exactly."""
        previous = None if self._previous is None else [t.cpu() for t in self._previous]
        return {"coordinates": self.coordinates.cpu(), "shared": self.shared.cpu(),
                "generator": self.generator.get_state(), "epochs": self.epochs, "seconds": self.seconds,
                "history": list(self.history), "in_flight": [band.in_flight for band in self.bands],
                "previous": previous, "stopped_because": getattr(self, "stopped_because", None)}

    def continue_from(self, point):
        """Take up a resume_point of a solver of the same problem and settings."""
        if point["coordinates"].shape != self.coordinates.shape or point["shared"].shape != self.shared.shape or \
                len(point["in_flight"]) != len(self.bands):
            raise OptionError("the saved solver's coordinates do not fit this problem: continue it on its own data")
        self.coordinates.copy_(point["coordinates"])
        self.shared.copy_(point["shared"])
        self.generator.set_state(point["generator"])
        self.epochs, self.seconds, self.history = point["epochs"], point["seconds"], list(point["history"])
        for band, in_flight in zip(self.bands, point["in_flight"]):
            band.in_flight = in_flight
        self._use_bands()
        previous = point["previous"]
        self._previous = None if previous is None else tuple(t.to(self.device) for t in previous)

    def fit(self, max_epochs=100, tol=1e-6, log=None):
        """Epochs until the gap is below tol, or is no longer finite (diverged: CoCoA's adding can),
        or max_epochs have run; history: per epoch its gap, the training seconds so far (gap
        evaluations not counted), gamma and the coordinates in flight; stopped_because: "tol",
        "diverged" or "max_epochs".

        An epoch of the kernels that worsens the objective the solver descends (P for the primal, D
        for the dual) by more than half the gap before it had too many coordinates in flight for
        this problem's coupling: it is undone, and the next runs with half as many (the epoch is
        counted, marked undone in the history)."""
        self.stopped_because = "max_epochs"
        primal, dual = self.objectives()
        for _ in range(max_epochs):
            # the wild control keeps its lost updates: undoing them would hide what it shows
            saved = (self.coordinates.clone(), self.shared.clone()) if self.in_flight > 1 and not self.wild else None
            gamma = self.epoch()
            new_primal, new_dual = self.objectives()
            worsened = new_primal - primal if self.form == "primal" else dual - new_dual
            undone = saved is not None and not worsened <= 0.5 * (primal - dual)
            if undone:
                self.coordinates, self.shared, self._previous = (*saved, None)
                for band in self.bands:
                    band.in_flight = max(1, band.in_flight // 2)
                self._use_bands()
            else:
                primal, dual = new_primal, new_dual
            gap = primal - dual
            self.history.append({"epoch": self.epochs, "gap": gap, "seconds": self.seconds, "gamma": gamma,
                                 "in_flight": self.in_flight, "undone": undone})
            if log is not None:
                log(f"epoch {self.epochs}: gap {gap:.3e}" + ("" if gamma is None else f", gamma {gamma:.3f}")
                    + (f" (undone: too many coordinates in flight overshot; now at most {self.in_flight})"
                       if undone else ""))
            if gap <= tol or not math.isfinite(gap):
                self.stopped_because = "tol" if gap <= tol else "diverged"
                break
        return self
