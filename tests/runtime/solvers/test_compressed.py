"""alac.runtime.solvers.compressed: products through either compressed axis equal the dense matrix's, in
chunks of entries as small as one."""

import pytest
import torch

from alac.runtime.solvers import compressed
from alac.runtime.solvers.compressed import CompressedAxis, CompressedMatrix
from tests.runtime.scd_problems import planted


@pytest.mark.parametrize("chunk", [1, 7, 1 << 25])
@pytest.mark.parametrize("binary", [False, True])
def test_products_through_rows_or_columns_equal_the_dense_matrix(chunk, binary, monkeypatch):
    monkeypatch.setattr(compressed, "CHUNK_ENTRIES", chunk)
    data = planted(n=40, m=15, binary_values=binary)
    values = torch.ones(data.indices.numel()) if data.values is None else data.values
    csr = torch.sparse_csr_tensor(data.indptr, data.indices.long(), values.double(), (40, 15))
    dense = csr.to_dense()
    csc = csr.to_sparse_csc()
    by_rows = CompressedMatrix(CompressedAxis.of(data.indptr, data.indices, data.values, torch.float64, "cpu"),
                               "rows", (40, 15))
    by_columns = CompressedMatrix(CompressedAxis.of(csc.ccol_indices(), csc.row_indices(),
                                                    None if binary else csc.values(), torch.float64, "cpu"),
                                  "columns", (40, 15))
    x, a = torch.randn(15, dtype=torch.float64), torch.randn(40, dtype=torch.float64)
    for matrix in (by_rows, by_columns):
        torch.testing.assert_close(matrix @ x, dense @ x)
        torch.testing.assert_close(matrix.t_matmul(a), dense.t() @ a)
        torch.testing.assert_close(matrix.to_dense(), dense)
    torch.testing.assert_close(by_rows.axis.norm, (dense ** 2).sum(1))
    torch.testing.assert_close(by_columns.axis.norm, (dense ** 2).sum(0))


@pytest.mark.parametrize("chunk", [1, 5, 64, 1 << 25])
def test_the_chunked_transpose_is_torchs_csc_with_rows_in_order(chunk):
    """Empty rows and columns, repeated ids within a row, chunks cutting rows: the CSC of a stable
    sort of the entries by column, rows ascending within each."""
    g = torch.Generator().manual_seed(0)
    lengths = torch.randint(0, 6, (30,), generator=g)
    indptr = torch.zeros(31, dtype=torch.int64)
    indptr[1:] = lengths.cumsum(0)
    indices = torch.randint(0, 12, (int(indptr[-1]),), generator=g, dtype=torch.int32) * 2   # odd ids empty
    values = torch.rand(indices.numel(), generator=g)
    start, index, value = compressed.transposed(indptr, indices, values, 25, chunk_entries=chunk)
    coo = torch.stack([torch.repeat_interleave(torch.arange(30), lengths), indices.long()])
    order = torch.sort(coo[1] * 30 + coo[0], stable=True).indices
    counts = torch.bincount(indices.long(), minlength=25)
    assert torch.equal(start, torch.cat([torch.zeros(1, dtype=torch.int64), counts.cumsum(0)]))
    assert index.dtype == torch.int32 and torch.equal(index.long(), coo[0][order])
    assert torch.equal(value, values[order])
    assert compressed.transposed(indptr, indices, None, 25, chunk_entries=chunk)[2] is None


@pytest.mark.parametrize("chunk", [1, 5, 1 << 25])
@pytest.mark.parametrize("binary", [False, True])
def test_entries_named_twice_in_a_coordinate_are_summed_as_scipy_sums_them(chunk, binary):
    sparse = pytest.importorskip("scipy.sparse")
    indptr = torch.tensor([0, 3, 3, 7, 9])
    index = torch.tensor([2, 0, 2, 1, 1, 1, 4, 3, 0], dtype=torch.int32)
    value = None if binary else torch.arange(1.0, 10.0)
    start, summed_index, summed_value = compressed.summed_duplicates(indptr, index, value, 5, chunk)
    reference = sparse.csr_matrix(((torch.ones(9) if binary else value).numpy(), index.numpy(), indptr.numpy()),
                                  shape=(4, 5))
    reference.sum_duplicates()
    assert start.tolist() == reference.indptr.tolist() and summed_index.tolist() == reference.indices.tolist()
    assert summed_value.tolist() == reference.data.tolist()
    axis = CompressedAxis.of(start, summed_index, summed_value, torch.float64, "cpu")
    assert axis.norm.tolist() == list(reference.multiply(reference).sum(axis=1).A1)


def test_a_matrix_without_entries_named_twice_is_returned_as_it_is():
    indptr, index = torch.tensor([0, 2, 3]), torch.tensor([1, 0, 1], dtype=torch.int32)
    assert compressed.summed_duplicates(indptr, index, None, 2, 1)[1] is index
