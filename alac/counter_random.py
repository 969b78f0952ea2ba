"""Counter-based random numbers: each a hash (splitmix64) of (seed, stream, counter) in int64 torch
arithmetic, so the same on the CPU and on any GPU, and any range of counters drawn on its own (the
synthetic data sets, the initial values of tables too large to draw with one CPU generator)."""

from __future__ import annotations

import math

import torch

_GOLDEN = 0x9E3779B97F4A7C15 - 2**64
_MIX1 = 0xBF58476D1CE4E5B9 - 2**64
_MIX2 = 0x94D049BB133111EB - 2**64


def _shift_right_logical(x, bits):
    return (x >> bits) & ((1 << (64 - bits)) - 1)


def _splitmix64(x):
    x = x + _GOLDEN
    x = (x ^ _shift_right_logical(x, 30)) * _MIX1
    x = (x ^ _shift_right_logical(x, 27)) * _MIX2
    return x ^ _shift_right_logical(x, 31)


def _stream_key(seed, stream):
    return int(_splitmix64(torch.tensor([seed * 64 + stream], dtype=torch.int64))[0])


def uniform(seed, stream, counters):
    """U[0, 1) float64 numbers, one per int64 counter, from a hash of (seed, stream, counter)."""
    return _shift_right_logical(_splitmix64(counters ^ _stream_key(seed, stream)), 11).double() * 2.0**-53


def normal(seed, streams, counters):
    """N(0, 1) float64 numbers by Box-Muller over two uniform streams."""
    u1 = uniform(seed, streams[0], counters)
    u2 = uniform(seed, streams[1], counters)
    return torch.sqrt(-2.0 * torch.log1p(-u1)) * torch.cos(2.0 * math.pi * u2)
