"""alac.runtime.compressed: products through either compressed axis equal the dense matrix's, in
chunks of entries as small as one."""

import pytest
import torch

from alac.runtime import compressed
from alac.runtime.compressed import CompressedAxis, CompressedMatrix
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
