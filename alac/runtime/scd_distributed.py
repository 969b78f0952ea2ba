"""CoCoA over ranks (TPA-SCD Alg. 3 and 4): the dual's rows or the primal's columns split over the
ranks (alac.runtime.distributed), each rank running one local epoch of its share per epoch with the
single-GPU kernels, then one all-reduce of the shared vector's change and one of the adaptive
gamma's two sums over the coordinates; gamma is computed on every rank from the same reduced sums
(no master). The shares and every epoch's orders are the virtual workers' (ScdSolver(workers=K)):
the same seeded permutation split K ways, the same draws, so that K ranks step as K virtual workers
do. The certificates add up each rank's share of the objectives' sums (one vector and one small
all-reduce). One rank is ScdSolver itself."""

from __future__ import annotations

import dataclasses
import time

import torch

from alac.errors import OptionError
from alac.runtime import duality
from alac.runtime.distributed import init_ranks
from alac.runtime.scd import AGGREGATIONS, ScdSolver, cocoa_gamma, coordinate_dots, shared_dots

# rows taken into a rank's share at a time (the Criteo-shaped set's 200M rows at once would want
# int64 temporaries of its 6.4 billion entries)
TAKE_ROWS = 1 << 22


class DistributedScdSolver(ScdSolver):
    def __init__(self, data, form="primal", loss="squared", l2=1e-3, l1=0.0, backend="auto",
                 aggregation="adaptive", seed=0, device=None, ranks=None, **options):
        """ScdSolver's problem over `ranks` (default alac.runtime.distributed.init_ranks()): the
        dual's rows or the primal's columns of `data` (every rank given the whole set) split as
        ScdSolver(workers=ranks.world) splits them; aggregation as its virtual workers'. On NCCL
        ranks the solver runs on the rank's GPU."""
        ranks = ranks or init_ranks()
        if aggregation not in AGGREGATIONS:
            raise OptionError(f"aggregation is one of {', '.join(AGGREGATIONS)}, got {aggregation!r}")
        if ranks.world > 1 and aggregation == "adaptive" and (loss != "squared" or l1 > 0):
            raise OptionError("adaptive aggregation is the squared loss's line search (no l1): choose averaging "
                              "or adding for this problem")
        if device is None and ranks.backend == "nccl":
            device = ranks.device
        self.ranks, self.total_rows, self.total_features = ranks, data.n_rows, data.n_features
        if ranks.world == 1:
            super().__init__(data, form, loss, l2, l1, backend, seed=seed, device=device, **options)
            return
        generator_device = torch.device(device) if device is not None else torch.device(
            "cuda" if torch.cuda.is_available() and backend in ("auto", "triton") else "cpu")
        generator = torch.Generator(device=generator_device).manual_seed(seed)
        n = data.n_rows if form == "dual" else data.n_features
        parts = [p.sort().values for p in torch.randperm(n, generator=generator, device=generator_device)
                 .tensor_split(ranks.world)]
        self.mine, self.part_sizes = parts[ranks.rank], [p.numel() for p in parts]
        share = (rows_of(data, self.mine.to(data.device)) if form == "dual"
                 else columns_of(data, self.mine.to(data.device)))
        super().__init__(share, form, loss, l2, l1, backend, seed=seed, device=device, problem_rows=data.n_rows,
                         **options)
        self.generator, self.workers, self.aggregation = generator, ranks.world, aggregation

    def epoch(self, order=None):
        """One epoch of every rank's share, aggregated; returns gamma (None for one rank)."""
        if self.ranks.world == 1:
            return super().epoch(order)
        if order is not None:
            raise OptionError("an explicit order is for one rank")
        start = _now(self.device)
        before, shared_before = self.coordinates.clone(), self.shared
        # every share's order drawn on every rank, as the virtual workers draw them one after another
        orders = [torch.randperm(n, generator=self.generator, device=self.generator.device)
                  for n in self.part_sizes]
        local = shared_before.clone()
        self._local_epoch(orders[self.ranks.rank].to(self.device), local)
        change = self.ranks.all_reduce(local - shared_before)
        step = self.coordinates - before
        if self.aggregation != "adaptive":
            gamma = cocoa_gamma(self.aggregation, self.workers)
        else:
            labels = self.problem.labels
            gamma = cocoa_gamma(self.aggregation, self.workers, self.form, self.total_rows, self.l2,
                                self.ranks.all_reduce(coordinate_dots(self.form, before, step, labels)),
                                shared_dots(self.form, shared_before, change, labels))
        self.coordinates = before + gamma * step
        self.shared = shared_before + gamma * change
        self.seconds += _now(self.device) - start
        self.epochs += 1
        return gamma

    def objectives(self):
        """(P, D) of the whole problem: each rank's share of their sums, all-reduced."""
        if self.ranks.world == 1:
            return super().objectives()
        A, y = self.evaluation
        x, y = self.coordinates.to(y.device, torch.float64), y.double()
        n, l2, reduce = self.total_rows, self.l2, self.ranks.all_reduce
        if self.form == "dual":
            v = reduce(duality.columns_product(A, x))
            beta = v / (l2 * n)
            sums = reduce(torch.stack([duality.loss_values(A @ beta, y, self.loss).sum(),
                                       duality.conjugate_terms(x, y, self.loss).sum()]))
            return (float(sums[0] / n + 0.5 * l2 * beta.dot(beta)),
                    float(-sums[1] / n - v.dot(v) / (2 * l2 * n * n)))
        margins = reduce(A @ x)
        if self.loss == "squared":
            theta = (y - margins) / n
            correlation = duality.columns_product(A, theta)
            if l2 == 0:
                # the lasso's dual point scaled into ||A^T theta||_inf <= l1 over every rank's columns
                largest = float(reduce(correlation.abs().max().reshape(1), op="max")[0])
                theta = theta * (1.0 if largest <= self.l1 else self.l1 / largest)
                conjugate = torch.zeros((), dtype=torch.float64, device=y.device)
            else:
                conjugate = (torch.clamp(correlation.abs() - self.l1, min=0) ** 2).sum() / (2 * l2)
            sums = reduce(torch.stack([x.dot(x), x.abs().sum(), conjugate]))
            dual = float(-0.5 * n * theta.dot(theta) + theta.dot(y) - sums[2])
        else:
            alpha = duality.alpha_of_margins(margins, y, self.loss)
            v = duality.columns_product(A, alpha)
            sums = reduce(torch.stack([x.dot(x), x.abs().sum(), v.dot(v)]))
            dual = float(-duality.conjugate_terms(alpha, y, self.loss).mean() - sums[2] / (2 * l2 * n * n))
        primal = float(duality.loss_values(margins, y, self.loss).mean() + 0.5 * l2 * sums[0] + self.l1 * sums[1])
        return primal, dual

    def drift(self):
        if self.ranks.world == 1:
            return super().drift()
        A, y = self.evaluation
        x = self.coordinates.to(y.device, torch.float64)
        exact = self.ranks.all_reduce(A @ x if self.form == "primal" else A.t_matmul(x))
        kept = self.shared.to(y.device, torch.float64)
        return float((exact - kept).abs().max() / exact.abs().max().clamp_min(1e-300))

    @property
    def coef_(self):
        """The whole problem's primal weights, on every rank."""
        if self.ranks.world == 1:
            return super().coef_
        A, y = self.evaluation
        x = self.coordinates.to(y.device, torch.float64)
        if self.form == "dual":
            return self.ranks.all_reduce(duality.columns_product(A, x)) / (self.l2 * self.total_rows)
        full = torch.zeros(self.total_features, dtype=torch.float64, device=y.device)
        full[self.mine.to(y.device)] = x
        return self.ranks.all_reduce(full)


def solver_over_ranks(data, form, loss, l1=0.0, **options):
    """The solver of a run: ScdSolver on one rank, else DistributedScdSolver over the ranks with the
    adaptive gamma where it is the line search (the squared loss, no l1), averaging otherwise."""
    ranks = init_ranks()
    aggregation = "adaptive" if loss == "squared" and not l1 else "averaging"
    return DistributedScdSolver(data, form, loss, l1=l1, aggregation=aggregation, ranks=ranks, **options)


def rows_of(data, rows):
    """The SparseDataset of `rows` (sorted row ids), TAKE_ROWS at a time."""
    pieces = [data.take(chunk) for chunk in rows.split(TAKE_ROWS)]
    lengths = torch.cat([p.row_lengths() for p in pieces])
    indptr = torch.zeros(rows.numel() + 1, dtype=torch.int64, device=data.device)
    torch.cumsum(lengths, 0, out=indptr[1:])

    def joined(name):
        parts = [getattr(p, name) for p in pieces]
        return None if parts[0] is None else torch.cat(parts)

    return dataclasses.replace(pieces[0], indptr=indptr, indices=joined("indices"), values=joined("values"),
                               labels=joined("labels"), fields=joined("fields"),
                               source=dataclasses.replace(data.source, row_lines=None))


def columns_of(data, columns):
    """The SparseDataset of `columns` (sorted feature ids) renumbered 0..len - 1, every row kept."""
    position = torch.full((data.n_features,), -1, dtype=torch.int64, device=data.device)
    position[columns] = torch.arange(columns.numel(), device=data.device)
    mapped = position[data.indices.long()]
    keep = mapped >= 0
    share = data.with_entries(keep)
    return dataclasses.replace(share, indices=mapped[keep].int(), n_features=columns.numel(), fields=None,
                               n_fields=0)


def _now(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter()
