"""A sparse matrix held along one compressed axis (rows as CSR, or columns as CSC) as the SCD
kernels read it, and its float64 products A x and A^T a computed over chunks of entries.

The solvers' certificates need A x and A^T a in float64. A float64 copy of A would not fit for the
problems SCD is for (a 200M x 75M binary Criteo-shaped problem has 6.4 billion entries: 25 GB of
int32 ids, 51 GB as float64 values), so the products gather and add one chunk of entries at a time.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

# entries per chunk of a product: about 0.8 GB of float64 and int64 temporaries
CHUNK_ENTRIES = 1 << 25


@dataclass
class CompressedAxis:
    """A compressed along one axis: coordinate c's entries are start[c]:start[c + 1] (int64) of
    index (int32, the other axis) and value (None: all ones); norm[c] = ||a_c||^2."""

    start: torch.Tensor
    index: torch.Tensor
    value: torch.Tensor | None
    norm: torch.Tensor | None

    @classmethod
    def of(cls, start, index, value, dtype, device):
        start, index = start.to(device, torch.int64), index.to(device, torch.int32)
        value = None if value is None else value.to(device, dtype)
        axis = cls(start, index, value, None)
        axis.norm = reduce_entries(axis, lambda _, value: value * value if value is not None else None,
                                   dtype=dtype)
        return axis

    @property
    def n_coordinates(self):
        return self.start.numel() - 1

    def lengths(self):
        """Every coordinate's number of entries."""
        return self.start[1:] - self.start[:-1]

    def chunks(self):
        """(coordinate of every entry, index, value or None) of consecutive chunks of entries."""
        total = int(self.start[-1])
        for first in range(0, total, CHUNK_ENTRIES):
            positions = torch.arange(first, min(total, first + CHUNK_ENTRIES), device=self.start.device)
            coordinate = torch.searchsorted(self.start, positions, right=True) - 1
            value = None if self.value is None else self.value[first:first + positions.numel()]
            yield coordinate, self.index[first:first + positions.numel()].long(), value


def transposed(start, index, value, n_other, chunk_entries=CHUNK_ENTRIES):
    """(start, index, value) of the same matrix along its other axis (CSR to CSC), by a counting
    sort one chunk of entries at a time: torch's to_sparse_csc takes and makes int64 indices, 51 GB
    each for the 6.4 billion entries of the Criteo-shaped problem. Within each new coordinate the
    entries keep their order along the old axis (rows ascending for a CSR's columns)."""
    device, total = start.device, int(start[-1])
    counts = torch.zeros(n_other, dtype=torch.int64, device=device)
    for first in range(0, total, chunk_entries):
        counts += torch.bincount(index[first:first + chunk_entries].long(), minlength=n_other)
    new_start = torch.zeros(n_other + 1, dtype=torch.int64, device=device)
    torch.cumsum(counts, 0, out=new_start[1:])
    cursor = new_start[:-1].clone()
    new_index = torch.empty(total, dtype=torch.int32, device=device)
    new_value = None if value is None else torch.empty(total, dtype=value.dtype, device=device)
    for first in range(0, total, chunk_entries):
        positions = torch.arange(first, min(total, first + chunk_entries), device=device)
        old = torch.searchsorted(start, positions, right=True) - 1
        other = index[first:first + positions.numel()].long()
        other, order = torch.sort(other, stable=True)
        # each entry's rank among the chunk's entries of its new coordinate
        run_start = torch.searchsorted(other, other, right=False)
        destination = cursor[other] + (torch.arange(other.numel(), device=device) - run_start)
        new_index[destination] = old[order].int()
        if value is not None:
            new_value[destination] = value[first:first + positions.numel()][order]
        cursor += torch.bincount(other, minlength=n_other)
    return new_start, new_index, new_value


def _coordinate_pieces(start, index, n_other, chunk_entries):
    """(first, end, keys) of whole coordinates first .. end - 1, about chunk_entries entries at a time
    (at least one coordinate): keys = coordinate offset * n_other + index of each entry."""
    first = 0
    while first < start.numel() - 1:
        end = max(int(torch.searchsorted(start, start[first] + chunk_entries, right=True)) - 1, first + 1)
        lo, hi = int(start[first]), int(start[end])
        positions = torch.arange(lo, hi, device=start.device)
        coordinate = torch.searchsorted(start[first:end + 1], positions, right=True) - 1
        yield first, end, lo, hi, coordinate * n_other + index[lo:hi].long()
        first = end


def summed_duplicates(start, index, value, n_other, chunk_entries=CHUNK_ENTRIES):
    """(start, index, value) with the entries a coordinate has more than once at one index (a LIBSVM
    row that names a feature twice) summed into one: a coordinate's curvature ||a_c||^2 is that of its
    summed entries, which the products see. Unchanged (the same tensors) where there are none; else
    each coordinate's entries by index, values made (2.0 for two ones) where there were none. A piece
    of coordinates at a time: a first pass finds whether any piece has a repeat, keeping nothing."""
    if not any(torch.unique(keys).numel() < hi - lo for _, _, lo, hi, keys in
               _coordinate_pieces(start, index, n_other, chunk_entries)):
        return start, index, value
    new_start = torch.zeros_like(start)
    new_index, new_value, offset = [], [], 0
    for first, end, lo, hi, keys in _coordinate_pieces(start, index, n_other, chunk_entries):
        unique, inverse = torch.unique(keys, sorted=True, return_inverse=True)
        summed = torch.zeros(unique.numel(), dtype=torch.float32 if value is None else value.dtype,
                             device=start.device)
        summed.index_add_(0, inverse, torch.ones(hi - lo, device=start.device) if value is None else value[lo:hi])
        new_start[first + 1:end + 1] = offset + torch.bincount(unique // n_other, minlength=end - first).cumsum(0)
        offset += unique.numel()
        new_index.append((unique % n_other).to(index.dtype))
        new_value.append(summed)
    return new_start, torch.cat(new_index), torch.cat(new_value)


def reduce_entries(axis, term, dtype=torch.float64):
    """out[c] = sum over coordinate c's entries of term(index, value) (term None: the value, or 1)."""
    out = torch.zeros(axis.n_coordinates, dtype=dtype, device=axis.start.device)
    for coordinate, index, value in axis.chunks():
        terms = term(index, value)
        if terms is None:
            terms = torch.ones(index.numel(), dtype=dtype, device=index.device)
        out.index_add_(0, coordinate, terms.to(dtype))
    return out


class CompressedMatrix:
    """A (shape N x M) through one compressed axis: by "rows" (CSR) or "columns" (CSC)."""

    def __init__(self, axis, by, shape):
        self.axis, self.by, self.shape = axis, by, tuple(shape)

    def _gathered(self, vector):
        def term(index, value):
            gathered = vector[index].double()
            return gathered if value is None else gathered * value.double()
        return reduce_entries(self.axis, term)

    def _scattered(self, vector, length):
        out = torch.zeros(length, dtype=torch.float64, device=self.axis.start.device)
        for coordinate, index, value in self.axis.chunks():
            spread = vector[coordinate].double()
            out.index_add_(0, index, spread if value is None else spread * value.double())
        return out

    def __matmul__(self, x):
        """A x, in float64."""
        return self._gathered(x) if self.by == "rows" else self._scattered(x, self.shape[0])

    def t_matmul(self, a):
        """A^T a, in float64."""
        return self._scattered(a, self.shape[1]) if self.by == "rows" else self._gathered(a)

    def to_dense(self):
        """A as a dense float64 tensor (small problems: closed forms and tests)."""
        dense = torch.zeros(self.shape, dtype=torch.float64, device=self.axis.start.device)
        for coordinate, index, value in self.axis.chunks():
            ones = torch.ones(index.numel(), dtype=torch.float64, device=index.device)
            at = (coordinate, index) if self.by == "rows" else (index, coordinate)
            dense.index_put_(at, ones if value is None else value.double(), accumulate=True)
        return dense
