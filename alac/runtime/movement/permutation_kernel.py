"""The chunk order's Triton kernel (alac.runtime.movement.permutation has the algorithm, its constants
and its torch twin, and launches this); a module of its own so that the CPU path does not need Triton."""

import triton
import triton.language as tl


@triton.jit
def _mix(right, key, FIRST: tl.constexpr, SECOND: tl.constexpr):
    x = right ^ key
    x = x * FIRST
    x = x ^ (x >> 15)
    x = x * SECOND
    return x ^ (x >> 16)


@triton.jit
def feistel(x, bits, mask, key0, key1, key2, key3, FIRST: tl.constexpr, SECOND: tl.constexpr):
    """One pass of the 4-round Feistel network over uint32 values x (see the module docstring)."""
    left = x >> bits
    right = x & mask
    left, right = right, left ^ (_mix(right, key0, FIRST, SECOND) & mask)
    left, right = right, left ^ (_mix(right, key1, FIRST, SECOND) & mask)
    left, right = right, left ^ (_mix(right, key2, FIRST, SECOND) & mask)
    left, right = right, left ^ (_mix(right, key3, FIRST, SECOND) & mask)
    return (left << bits) | right


# no argument is specialized on its value: Triton would turn an n, bits or key of 1 into a constant
@triton.jit(do_not_specialize=["n", "bits", "key0", "key1", "key2", "key3"])
def chunk_order_kernel(order_ptr, n, bits, key0, key1, key2, key3, FIRST: tl.constexpr, SECOND: tl.constexpr,
                       BLOCK: tl.constexpr):
    position = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    inside = position < n
    limit = n.to(tl.uint32)
    bits = bits.to(tl.uint32)
    mask = (tl.full([], 1, tl.uint32) << bits) - 1
    key0 = key0.to(tl.uint32)
    key1 = key1.to(tl.uint32)
    key2 = key2.to(tl.uint32)
    key3 = key3.to(tl.uint32)
    x = feistel(tl.where(inside, position, 0).to(tl.uint32), bits, mask, key0, key1, key2, key3, FIRST, SECOND)
    walking = inside & (x >= limit)
    while tl.max(walking.to(tl.int32), axis=0) > 0:
        x = tl.where(walking, feistel(x, bits, mask, key0, key1, key2, key3, FIRST, SECOND), x)
        walking = inside & (x >= limit)
    tl.store(order_ptr + position, x.to(tl.int64), mask=inside)
