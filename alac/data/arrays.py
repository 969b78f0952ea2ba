"""In-memory inputs: scipy.sparse matrices, dense numpy arrays, torch tensors, (indices, offsets) pairs."""

from __future__ import annotations

import numpy as np
import torch

from alac.data.dataset import DataSource, SparseDataset
from alac.errors import DataError


def _first_bad(mask):
    positions = np.flatnonzero(np.asarray(mask))
    return None if positions.size == 0 else int(positions[0])


def _labels(y, n_rows, name):
    if y is None:
        return np.zeros(n_rows, dtype=np.float32)
    if isinstance(y, torch.Tensor):
        y = y.detach().cpu().numpy()
    y = np.asarray(y)
    if y.ndim != 1 or y.shape[0] != n_rows:
        raise DataError(f"{name}: y has shape {y.shape}, expected ({n_rows},): one label per row")
    try:
        labels = y.astype(np.float32)
    except (TypeError, ValueError):
        raise DataError(f"{name}: labels must be numbers, got dtype {y.dtype}") from None
    bad = _first_bad(~np.isfinite(labels))
    if bad is not None:
        raise DataError(f"{name}: label of row {bad} is {y[bad]!r}: labels must be finite")
    return labels


def from_csr_arrays(indptr, indices, values, y=None, n_features=None, name="array"):
    """The shared constructor: validate CSR arrays and build the SparseDataset."""
    indptr = np.asarray(indptr, dtype=np.int64)
    indices = np.asarray(indices)
    if indptr.ndim != 1 or indptr.size == 0 or indptr[0] != 0 or (np.diff(indptr) < 0).any() \
            or indptr[-1] != indices.size:
        raise DataError(f"{name}: offsets must start at 0, never decrease and end at nnz={indices.size}")
    if indices.size and not np.issubdtype(indices.dtype, np.integer):
        raise DataError(f"{name}: feature ids must be integers, got dtype {indices.dtype}")
    bad = _first_bad(indices < 0)
    if bad is not None:
        raise DataError(f"{name}: feature id at entry {bad} is {int(indices[bad])}: ids must be >= 0")
    limit = int(indices.max()) + 1 if indices.size else 0
    if n_features is None:
        n_features = limit
    elif limit > n_features:
        bad = _first_bad(indices >= n_features)
        raise DataError(f"{name}: feature id at entry {bad} is {int(indices[bad])}, beyond n_features={n_features}")
    if n_features > 2**31 - 1:
        raise DataError(f"{name}: n_features={n_features} does not fit int32 feature ids")
    if values is not None:
        values = np.asarray(values, dtype=np.float32)
        if values.shape != indices.shape:
            raise DataError(f"{name}: {values.size} values for {indices.size} feature ids")
        bad = _first_bad(~np.isfinite(values))
        if bad is not None:
            raise DataError(f"{name}: value at entry {bad} is {values[bad]}: values must be finite")
        if (values == 1).all():
            values = None
    n_rows = indptr.size - 1
    return SparseDataset(indptr=torch.from_numpy(indptr),
                         indices=torch.from_numpy(np.ascontiguousarray(indices, dtype=np.int32)),
                         values=None if values is None else torch.from_numpy(np.ascontiguousarray(values)),
                         labels=torch.from_numpy(_labels(y, n_rows, name)), n_features=n_features,
                         source=DataSource(format=name))


def from_indices_offsets(indices, offsets, values=None, y=None, n_features=None):
    """`nn.EmbeddingBag`-style input: flat feature ids and the start of every row (n_rows or n_rows+1)."""
    indices = _numpy(indices)
    offsets = np.asarray(_numpy(offsets), dtype=np.int64)
    if offsets.size == 0 or offsets[-1] != indices.size:
        offsets = np.append(offsets, indices.size)
    return from_csr_arrays(offsets, indices, None if values is None else _numpy(values), y, n_features,
                           "indices/offsets")


def _numpy(x):
    return x.detach().cpu().numpy() if isinstance(x, torch.Tensor) else np.asarray(x)


def from_arrays(X, y=None, n_features=None):
    """A SparseDataset from scipy.sparse, a dense 2-D array/tensor, a sparse torch tensor, or
    an (indices, offsets[, values]) tuple. Dense zeros are not stored; stored sparse zeros are kept."""
    if isinstance(X, SparseDataset):
        return X
    if isinstance(X, tuple):
        if len(X) not in (2, 3):
            raise DataError("a tuple input must be (indices, offsets) or (indices, offsets, values)")
        return from_indices_offsets(*X, y=y, n_features=n_features)
    try:
        import scipy.sparse
        if scipy.sparse.issparse(X):
            csr = scipy.sparse.csr_matrix(X)
            return from_csr_arrays(csr.indptr, csr.indices, csr.data, y,
                                   n_features if n_features is not None else csr.shape[1], "scipy.sparse")
    except ImportError:
        pass
    if isinstance(X, torch.Tensor) and X.layout == torch.sparse_csr:
        X = X.detach().cpu()
        return from_csr_arrays(X.crow_indices().numpy(), X.col_indices().numpy(), X.values().numpy(),
                               y, n_features if n_features is not None else X.shape[1], "torch sparse")
    if isinstance(X, torch.Tensor) and X.layout == torch.sparse_coo:
        import scipy.sparse

        X = X.detach().cpu().coalesce()
        rows, columns = X.indices().numpy()
        csr = scipy.sparse.csr_matrix((X.values().numpy(), (rows, columns)), shape=tuple(X.shape))
        return from_csr_arrays(csr.indptr, csr.indices, csr.data, y,
                               n_features if n_features is not None else X.shape[1], "torch sparse")
    dense = _numpy(X)
    if dense.ndim != 2:
        raise DataError(f"dense input must be 2-D (rows x features), got shape {dense.shape}")
    try:
        dense = dense.astype(np.float32)
    except (TypeError, ValueError):
        raise DataError(f"dense input must hold numbers, got dtype {dense.dtype}") from None
    bad = _first_bad(~np.isfinite(dense).ravel())
    if bad is not None:
        row, column = divmod(bad, dense.shape[1])
        raise DataError(f"dense input: value at row {row}, column {column} is {dense[row, column]}: "
                        "values must be finite")
    rows, columns = np.nonzero(dense)
    indptr = np.zeros(dense.shape[0] + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows, minlength=dense.shape[0]), out=indptr[1:])
    return from_csr_arrays(indptr, columns, dense[rows, columns], y,
                           n_features if n_features is not None else dense.shape[1], "dense")
