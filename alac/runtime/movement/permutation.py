"""The chunk order of an epoch: a keyed pseudo-random permutation of [0, n), one launch on a GPU.

The order is a 4-round Feistel network over the 2 h-bit numbers (2 h >= the bits of n - 1), walked
until it lands below n (cycle walking: a permutation of the larger domain restricted to [0, n) stays a
permutation; the domain is at most 4 n, so a position walks fewer than 4 steps on average). The round
keys come from (seed, epoch), so every epoch has its own order and any device draws the same one.

Why not an argsort of random keys: a hash and a sort are about two dozen small launches, whose host
time a short epoch (1M-row async LR, benchmarks/fit_queue.py) waited for. The Feistel order is one
Triton launch on a GPU. The CPU computes it with torch integer arithmetic: the same numbers.
"""

from __future__ import annotations

import torch

from alac.codegen import triton_installed

ROUNDS = 4
# Odd multipliers below 2**31 (so that a 32-bit value times one fits int64 in torch; the Triton side,
# alac.runtime.movement.permutation_kernel, multiplies uint32 modulo 2**32, the same numbers): the two of
# Wellons' lowbias32 hash that fit, the second one's top bit cleared.
FIRST_MULTIPLIER = 0x7FEB352D
SECOND_MULTIPLIER = 0x046CA68B
_MASK32 = (1 << 32) - 1
# positions per program of the order kernel: 1,024 keeps a program's walk loop short (it runs until
# its slowest position lands) and a 4M-row epoch's 125,000 chunks in 123 programs
ORDER_BLOCK = 1024
# 2 h bits of Feistel domain hold n <= 2**32 chunks (1.3e11 rows at C = 32)
MAX_CHUNKS = 1 << 32


def _splitmix64(x):
    x = (x + 0x9E3779B97F4A7C15) & ((1 << 64) - 1)
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & ((1 << 64) - 1)
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & ((1 << 64) - 1)
    return x ^ (x >> 31)


def round_keys(seed, epoch):
    """The ROUNDS round keys of (seed, epoch): 31-bit ints (a Triton int argument stays int32)."""
    base = _splitmix64((int(seed) << 32) ^ int(epoch))
    return tuple(_splitmix64(base + index) & 0x7FFFFFFF for index in range(ROUNDS))


def half_bits(n):
    """h: the Feistel domain is [0, 2**(2 h)) with 2**(2 h) >= n (h >= 1)."""
    if not 0 < n <= MAX_CHUNKS:
        raise ValueError(f"a chunk order needs 1 to {MAX_CHUNKS} chunks, got {n}")
    return max(1, ((n - 1).bit_length() + 1) // 2)


def _mix_torch(right, key):
    x = right ^ key
    x = (x * FIRST_MULTIPLIER) & _MASK32
    x = x ^ (x >> 15)
    x = (x * SECOND_MULTIPLIER) & _MASK32
    return x ^ (x >> 16)


def _feistel_torch(x, bits, keys):
    mask = (1 << bits) - 1
    left, right = x >> bits, x & mask
    for key in keys:
        left, right = right, left ^ (_mix_torch(right, key) & mask)
    return (left << bits) | right


def permute_torch(positions, n, keys):
    """The chunks at the given positions (int64 tensor) of the order keyed by keys, in torch."""
    bits = half_bits(n)
    x = _feistel_torch(positions, bits, keys)
    walking = x >= n
    while bool(walking.any()):
        x = torch.where(walking, _feistel_torch(x, bits, keys), x)
        walking = x >= n
    return x


def chunk_order(n, seed, epoch, device, use_triton=None):
    """The order of epoch under seed: an int64 permutation of [0, n) on device. A CUDA device draws
    it with one Triton launch (use_triton=True forces that path, e.g. under TRITON_INTERPRET=1)."""
    bits = half_bits(n)
    keys = round_keys(seed, epoch)
    device = torch.device(device)
    if use_triton is None:
        use_triton = device.type == "cuda" and triton_installed()
    if not use_triton:
        return permute_torch(torch.arange(n, dtype=torch.int64, device=device), n, keys)
    from alac.runtime.movement.permutation_kernel import chunk_order_kernel

    order = torch.empty(n, dtype=torch.int64, device=device)
    chunk_order_kernel[(-(-n // ORDER_BLOCK),)](order, n, bits, *keys, FIRST=FIRST_MULTIPLIER,
                                                 SECOND=SECOND_MULTIPLIER, BLOCK=ORDER_BLOCK)
    return order
