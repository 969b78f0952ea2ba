import numpy as np
import pytest
import torch

from alac.data.arrays import from_csr_arrays
from alac.data.split import split, split_rows


@pytest.mark.parametrize("n_rows", [0, 1, 10, 1001])
def test_split_rows_partition_the_rows(n_rows):
    parts = split_rows(n_rows, (0.7, 0.2, 0.1), seed=3)
    together = torch.cat(parts).sort().values
    assert torch.equal(together, torch.arange(n_rows))
    assert abs(len(parts[0]) - 0.7 * n_rows) <= 1


def test_split_is_seeded():
    assert all(torch.equal(a, b) for a, b in zip(split_rows(100, seed=1), split_rows(100, seed=1)))
    assert not torch.equal(split_rows(100, seed=1)[0], split_rows(100, seed=2)[0])


def test_split_datasets_hold_the_right_rows():
    generator = np.random.default_rng(0)
    lengths = generator.integers(0, 5, 30)
    dataset = from_csr_arrays(np.concatenate([[0], np.cumsum(lengths)]), generator.integers(0, 9, lengths.sum()),
                              generator.random(lengths.sum()), np.arange(30.0), 9)
    train, valid, test = split(dataset, (0.5, 0.25, 0.25), seed=0)
    dense = dataset.to_scipy().toarray()
    for part in (train, valid, test):
        rows = part.labels.long().numpy()
        np.testing.assert_array_equal(part.to_scipy().toarray(), dense[rows])


def test_bad_fractions():
    with pytest.raises(ValueError):
        split_rows(10, (0.5, 0.6))


def test_hold_out_keeps_every_row_once_and_declines_empty_sides():
    from alac.data.split import hold_out
    from alac.data.synthetic import criteo_like

    data = criteo_like(200, seed=1, device="cpu")
    rest, valid = hold_out(data, 0.1, seed=3)
    assert (rest.n_rows, valid.n_rows) == (180, 20)
    assert sorted(rest.labels.tolist() + valid.labels.tolist()) == sorted(data.labels.tolist())
    tiny = data.take(torch.arange(3))
    assert hold_out(tiny, 0.1) == (tiny, None)         # 0.3 rows would be held out
    one = data.take(torch.arange(1))
    assert hold_out(one, 0.9) == (one, None)           # nothing would be left to train on
    rest, valid = hold_out(tiny, 0.5)
    assert (rest.n_rows, valid.n_rows) == (2, 1)          # split_rows rounds the first bound
