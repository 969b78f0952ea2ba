"""The chunk order of an epoch: a keyed pseudo-random permutation of [0, n), one launch on a GPU.

The order is a 4-round Feistel network over the 2 h-bit numbers (2 h >= the bits of n - 1), walked
until it lands below n (cycle walking: a permutation of the larger domain restricted to [0, n) stays a
permutation; the domain is at most 4 n, so a position walks fewer than 4 steps on average). The round
keys come from (seed, epoch), so every epoch has its own order and any device draws the same one.

Why not an argsort of random keys (what alac did before): a hash and a sort are about two dozen
small launches, and on the H100 machine each costs 40-50 us of host time; with about 1.4 ms of host
work per epoch, a 1M-row async LR epoch (a 1.2 ms kernel) waited for its host. The Feistel order is
one Triton launch on a GPU. The CPU computes it with torch integer arithmetic: the same numbers.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

ROUNDS = 4
# Odd multipliers below 2**31 (so that a 32-bit value times one fits int64 in torch; the Triton side
# multiplies uint32 modulo 2**32, the same numbers): the two of Wellons' lowbias32 hash that fit,
# the second one's top bit cleared. Constexprs, so that the Triton functions read the same values.
FIRST_MULTIPLIER = tl.constexpr(0x7FEB352D)
SECOND_MULTIPLIER = tl.constexpr(0x046CA68B)
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
    x = (x * FIRST_MULTIPLIER.value) & _MASK32
    x = x ^ (x >> 15)
    x = (x * SECOND_MULTIPLIER.value) & _MASK32
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


@triton.jit
def _mix(right, key):
    x = right ^ key
    x = x * FIRST_MULTIPLIER
    x = x ^ (x >> 15)
    x = x * SECOND_MULTIPLIER
    return x ^ (x >> 16)


@triton.jit
def feistel(x, bits, mask, key0, key1, key2, key3):
    """One pass of the 4-round Feistel network over uint32 values x (see the module docstring)."""
    left = x >> bits
    right = x & mask
    left, right = right, left ^ (_mix(right, key0) & mask)
    left, right = right, left ^ (_mix(right, key1) & mask)
    left, right = right, left ^ (_mix(right, key2) & mask)
    left, right = right, left ^ (_mix(right, key3) & mask)
    return (left << bits) | right


# no argument is specialized on its value: Triton would turn an n, bits or key of 1 into a constant
@triton.jit(do_not_specialize=["n", "bits", "key0", "key1", "key2", "key3"])
def _chunk_order_kernel(order_ptr, n, bits, key0, key1, key2, key3, BLOCK: tl.constexpr):
    position = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    inside = position < n
    limit = n.to(tl.uint32)
    bits = bits.to(tl.uint32)
    mask = (tl.full([], 1, tl.uint32) << bits) - 1
    key0 = key0.to(tl.uint32)
    key1 = key1.to(tl.uint32)
    key2 = key2.to(tl.uint32)
    key3 = key3.to(tl.uint32)
    x = feistel(tl.where(inside, position, 0).to(tl.uint32), bits, mask, key0, key1, key2, key3)
    walking = inside & (x >= limit)
    while tl.max(walking.to(tl.int32), axis=0) > 0:
        x = tl.where(walking, feistel(x, bits, mask, key0, key1, key2, key3), x)
        walking = inside & (x >= limit)
    tl.store(order_ptr + position, x.to(tl.int64), mask=inside)


def chunk_order(n, seed, epoch, device, use_triton=None):
    """The order of epoch under seed: an int64 permutation of [0, n) on device. A CUDA device draws
    it with one Triton launch (use_triton=True forces that path, e.g. under TRITON_INTERPRET=1)."""
    bits = half_bits(n)
    keys = round_keys(seed, epoch)
    device = torch.device(device)
    if use_triton is None:
        use_triton = device.type == "cuda"
    if not use_triton:
        return permute_torch(torch.arange(n, dtype=torch.int64, device=device), n, keys)
    order = torch.empty(n, dtype=torch.int64, device=device)
    _chunk_order_kernel[(triton.cdiv(n, ORDER_BLOCK),)](order, n, bits, *keys, BLOCK=ORDER_BLOCK)
    return order
