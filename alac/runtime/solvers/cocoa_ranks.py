"""CoCoA over ranks (TPA-SCD Alg. 3 and 4): the dual's rows or the primal's columns split over the
ranks (alac.runtime.ranks.distributed), each rank running one local epoch of its share per epoch with the
single-GPU kernels (ScdSolver's CoCoA epoch, its _reduce an all-reduce): one all-reduce of the shared
vector's change and one of the adaptive gamma's two sums over the coordinates; gamma is computed on
every rank from the same reduced sums (no master). The shares and every epoch's orders are the
virtual workers' (ScdSolver(workers=K)): the same seeded permutation split K ways, the same draws, so
that K ranks step as K virtual workers do. The certificates add up each rank's share of the
objectives' sums (alac.runtime.solvers.duality's reduce). One rank is ScdSolver itself."""

from __future__ import annotations

import dataclasses

import torch

from alac.errors import OptionError
from alac.runtime.ranks.distributed import check_rows, init_ranks
from alac.runtime.solvers.cocoa import resolve_aggregation
from alac.runtime.solvers.scd import ScdSolver

# rows taken into a rank's share at a time (the Criteo-shaped set's 200M rows at once would want
# int64 temporaries of its 6.4 billion entries)
TAKE_ROWS = 1 << 22


class DistributedScdSolver(ScdSolver):
    def __init__(self, data, form="primal", loss="squared", l2=1e-3, l1=0.0, backend="auto",
                 aggregation=None, seed=0, device=None, ranks=None, rows="whole", **options):
        """ScdSolver's problem over `ranks` (default alac.runtime.ranks.distributed.init_ranks()): the
        dual's rows or the primal's columns of `data` (every rank given the whole set) split as
        ScdSolver(workers=ranks.world) splits them; aggregation as its virtual workers'. On NCCL
        ranks the solver runs on the rank's GPU. rows="own" (the dual): `data` is this rank's own
        rows, made or read by each rank for a problem no rank holds whole; the epochs' orders are
        still the virtual workers', so that ranks given their parts step as they do."""
        ranks = ranks or init_ranks()
        check_rows(rows)
        if rows == "own" and form != "dual" and ranks.world > 1:
            raise OptionError("ranks given their own rows solve the dual (split by rows); the primal splits the "
                              "columns: give every rank the whole set (rows=\"whole\")")
        # checked before any rank takes its share of the data
        if ranks.world > 1 and options.get("workers", 1) > 1:
            raise OptionError("under torchrun the ranks are CoCoA's workers: leave out the virtual workers")
        aggregation = resolve_aggregation(aggregation, loss, l1, max(ranks.world, options.get("workers", 1)))
        if device is None and ranks.backend == "nccl":
            device = ranks.device
        self.ranks, self.total_features = ranks, data.n_features
        if ranks.world == 1:
            super().__init__(data, form, loss, l2, l1, backend, seed=seed, device=device, aggregation=aggregation,
                             **options)
            return
        generator_device = torch.device(device) if device is not None else torch.device(
            "cuda" if torch.cuda.is_available() and backend in ("auto", "triton") else "cpu")
        generator = torch.Generator(device=generator_device).manual_seed(seed)
        if rows == "own":
            share, self.mine, self.part_sizes = data, None, self._own_parts(data, generator, generator_device)
            problem_rows = sum(self.part_sizes)
        else:
            n = data.n_rows if form == "dual" else data.n_features
            parts = [p.sort().values for p in torch.randperm(n, generator=generator, device=generator_device)
                     .tensor_split(ranks.world)]
            self.mine, self.part_sizes = parts[ranks.rank], [p.numel() for p in parts]
            share = (rows_of(data, self.mine.to(data.device)) if form == "dual"
                     else columns_of(data, self.mine.to(data.device)))
            problem_rows = data.n_rows
        super().__init__(share, form, loss, l2, l1, backend, seed=seed, device=device, problem_rows=problem_rows,
                         aggregation=aggregation, **options)
        # the ranks are its workers (ScdSolver's CoCoA epoch), the parts drawn with this generator
        self.generator, self.workers = generator, ranks.world

    def _own_parts(self, data, generator, generator_device):
        """Every rank's row count (one all-reduce), the feature spaces checked alike; the generator
        drawn past the split the whole set's solver would draw, so that the epochs' orders follow."""
        self.ranks.check_one_feature_space(data.n_features)
        counts = torch.zeros(self.ranks.world, dtype=torch.int64, device=self.ranks.device)
        counts[self.ranks.rank] = data.n_rows
        sizes = self.ranks.all_reduce(counts).tolist()
        torch.randperm(sum(sizes), generator=generator, device=generator_device)
        return sizes

    def _local_orders(self):
        """This rank's part's order, every part's drawn as the virtual workers draw them in turn (one
        rank: the virtual workers' own orders)."""
        if self.ranks.world == 1:
            return super()._local_orders()
        orders = [torch.randperm(n, generator=self.generator, device=self.generator.device) for n in self.part_sizes]
        return [orders[self.ranks.rank].to(self.device)]

    def _reduce(self, tensor, op="sum"):
        return self.ranks.all_reduce(tensor, op)

    def _whole_beta(self, beta):
        if self.ranks.world == 1:
            return beta
        whole = torch.zeros(self.total_features, dtype=torch.float64, device=beta.device)
        whole[self.mine.to(beta.device)] = beta
        return self.ranks.all_reduce(whole)


def solver_over_ranks(data, form, loss, l1=0.0, **options):
    """The solver of a run: ScdSolver on one rank, else DistributedScdSolver over the ranks with the
    default aggregation (alac.runtime.solvers.cocoa.resolve_aggregation)."""
    return DistributedScdSolver(data, form, loss, l1=l1, ranks=init_ranks(), **options)


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
