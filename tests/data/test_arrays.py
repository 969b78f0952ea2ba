import numpy as np
import pytest
import scipy.sparse
import torch

from alac import DataError
from alac.data.arrays import from_arrays


def _reference(seed=0):
    generator = np.random.default_rng(seed)
    dense = generator.standard_normal((6, 5)).astype(np.float32) * (generator.random((6, 5)) < 0.4)
    dense[2] = 0  # an empty row
    return dense, generator.choice([0.0, 1.0], 6)


@pytest.mark.parametrize("kind", ["scipy", "dense", "torch", "torch_sparse", "tuple"])
def test_every_input_kind_gives_the_same_dataset(kind):
    dense, y = _reference()
    csr = scipy.sparse.csr_matrix(dense)
    X = {"scipy": csr, "dense": dense, "torch": torch.from_numpy(dense),
         "torch_sparse": torch.from_numpy(dense).to_sparse(),
         "tuple": (torch.from_numpy(csr.indices), torch.from_numpy(csr.indptr[:-1]), csr.data)}[kind]
    dataset = from_arrays(X, y, n_features=5)
    assert dataset.n_rows == 6 and dataset.n_features == 5
    np.testing.assert_array_equal(dataset.to_scipy().toarray(), dense)
    np.testing.assert_array_equal(dataset.labels.numpy(), y)


def test_scipy_keeps_stored_zeros_and_duplicates():
    X = scipy.sparse.csr_matrix((np.array([1.0, 0.0, 2.0]), np.array([1, 1, 3]), np.array([0, 3])), shape=(1, 4))
    dataset = from_arrays(X)
    assert dataset.nnz == 3 and dataset.indices.tolist() == [1, 1, 3]


@pytest.mark.parametrize("X, y, words", [
    (np.array([[1.0, np.nan]]), [1], "row 0, column 1"),
    (np.array([[1.0, 2.0]]), [np.inf], "label of row 0"),
    (np.array([[1.0, 2.0]]), [1, 0], "one label per row"),
    (np.array([1.0, 2.0]), None, "must be 2-D"),
    ((np.array([0, -1]), np.array([0, 1])), None, "ids must be >= 0"),
    ((np.array([0, 1]), np.array([0, 3])), None, "offsets"),
])
def test_bad_arrays(X, y, words):
    with pytest.raises(DataError, match=words):
        from_arrays(X, y)
