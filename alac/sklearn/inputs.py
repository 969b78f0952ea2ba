"""The estimators' inputs: validated arrays as alac's SparseDataset."""

from __future__ import annotations

import numpy as np

from alac.data.arrays import from_csr_arrays


def sparse_dataset(X, y=None):
    """A SparseDataset from validated input (CSR or dense float)."""
    import scipy.sparse

    csr = scipy.sparse.csr_matrix(X, dtype=np.float32)
    labels = np.zeros(csr.shape[0], np.float32) if y is None else np.asarray(y, np.float32)
    return from_csr_arrays(csr.indptr, csr.indices, csr.data, labels, csr.shape[1])
