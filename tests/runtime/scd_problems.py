"""Small sparse problems for the SCD tests: A with a planted linear model, every row non-empty."""

import torch

from alac.data.dataset import SparseDataset


def planted(n=200, m=50, density=0.2, seed=0, classes=False, binary_values=False):
    """n x m sparse rows, labels from a planted beta plus noise (classes: their signs as 0/1)."""
    g = torch.Generator().manual_seed(seed)
    pattern = torch.rand(n, m, generator=g) < density
    pattern[torch.arange(n), torch.randint(0, m, (n,), generator=g)] = True
    dense = pattern.float() if binary_values else pattern * torch.randn(n, m, generator=g)
    y = dense @ torch.randn(m, generator=g) + 0.1 * torch.randn(n, generator=g)
    if classes:
        y = (y > y.median()).float()
    csr = dense.to_sparse_csr()
    return SparseDataset(csr.crow_indices(), csr.col_indices().int(), None if binary_values else csr.values(),
                         y.float(), m)
