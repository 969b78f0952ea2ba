"""The epoch chunk order (a keyed Feistel permutation): a permutation of [0, n), the same from the
Triton kernel (interpreted on the CPU, compiled on a GPU) as from torch, and shuffled well enough."""

import pytest
import torch

from alac.runtime.movement.permutation import MAX_CHUNKS, chunk_order, half_bits, round_keys

SIZES = [1, 2, 3, 4, 5, 16, 17, 255, 1000, 4097]


@pytest.mark.parametrize("n", SIZES)
def test_every_order_is_a_permutation(n):
    for epoch in range(3):
        assert torch.equal(chunk_order(n, 5, epoch, "cpu").sort().values, torch.arange(n))


@pytest.mark.parametrize("n", SIZES)
def test_the_triton_kernel_draws_the_torch_order(n):
    # interpreted on the CPU when there is no GPU (conftest), compiled on a GPU
    device = "cuda" if torch.cuda.is_available() else "cpu"
    for seed, epoch in ((0, 0), (5, 1), (2**40 + 3, 2**20)):
        drawn = chunk_order(n, seed, epoch, device, use_triton=True)
        assert torch.equal(drawn.cpu(), chunk_order(n, seed, epoch, "cpu"))


@pytest.mark.gpu
@pytest.mark.parametrize("n", [1, 17, 125_000, 2_000_003])
def test_the_gpu_draws_the_cpu_order(n):
    assert torch.equal(chunk_order(n, 7, 3, "cuda").cpu(), chunk_order(n, 7, 3, "cpu"))


def test_epochs_and_seeds_give_other_orders():
    orders = [chunk_order(500, seed, epoch, "cpu") for seed in (0, 1) for epoch in (0, 1)]
    assert all(not torch.equal(a, b) for i, a in enumerate(orders) for b in orders[i + 1:])
    assert len(set(round_keys(0, 0) + round_keys(0, 1) + round_keys(1, 0))) == 12


def test_positions_are_uniform_over_epochs():
    # chunk -> position counts over 400 epochs: Pearson's chi-square per cell is 1 in expectation for
    # uniform positions (an identity order or a fixed rotation would give 199)
    n, epochs = 200, 400
    counts = torch.zeros(n, n)
    for epoch in range(epochs):
        counts[chunk_order(n, 3, epoch, "cpu"), torch.arange(n)] += 1
    expected = epochs / n
    assert ((counts - expected) ** 2 / expected).mean().item() == pytest.approx(1.0, abs=0.05)


def test_consecutive_epochs_are_uncorrelated():
    # the sample correlation of two independent permutations of 10,000 has a standard deviation of 0.01
    a, b = (chunk_order(10_000, 0, epoch, "cpu").double() for epoch in (0, 1))
    assert abs(torch.corrcoef(torch.stack([a, b]))[0, 1].item()) < 0.04


def test_domain_limits():
    assert half_bits(1) == 1 and half_bits(4) == 1 and half_bits(5) == 2 and half_bits(MAX_CHUNKS) == 16
    for n in (0, MAX_CHUNKS + 1):
        with pytest.raises(ValueError, match="chunks"):
            chunk_order(n, 0, 0, "cpu")
