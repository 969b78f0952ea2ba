"""Small Triton device functions that generated kernels use.

Generated modules carry a copy of these functions' source (so a dumped kernel file is complete on its
own, and the interpreter sees interpreted versions); this module is their single source of truth.
They use only core `tl` operations: libdevice functions are not available under TRITON_INTERPRET.
"""

import triton
import triton.language as tl


@triton.jit
def log1p(z):
    # Goldberg's trick: log(u) * z / (u - 1) with u = 1 + z cancels the rounding of 1 + z, so small
    # z keeps full relative accuracy (tl.log(1 + z) returns 0 below 6e-8).
    u = 1.0 + z
    return tl.where(u == 1.0, z, tl.log(u) * z / (u - 1.0))


@triton.jit
def softplus(z):
    # log(1 + exp(z)) without overflow: max(z, 0) + log1p(exp(-|z|)).
    return tl.maximum(z, 0.0) + log1p(tl.exp(-tl.abs(z)))


@triton.jit
def tanh(z):
    # (1 - e) / (1 + e) with e = exp(-2|z|); below |z| = 0.005 the two-term series is exact to
    # 1e-12 relative, where the quotient would lose digits to the cancellation in 1 - e.
    e = tl.exp(-2.0 * tl.abs(z))
    magnitude = tl.where(tl.abs(z) < 0.005, tl.abs(z) * (1.0 - z * z / 3.0), (1.0 - e) / (1.0 + e))
    return tl.where(z < 0.0, -magnitude, magnitude)


@triton.jit
def segment_sum(key_a, value_a, key_b, value_b):
    """Combine of a segmented sum over key-sorted pairs (for tl.associative_scan): the running sum
    restarts wherever the key changes."""
    return key_b, tl.where(key_a == key_b, value_a + value_b, value_b)


@triton.jit
def grid_barrier(arrivals_ptr, expected):
    """Every program of a persistent grid adds one to the arrival counter and waits until it reaches
    expected (the n-th barrier waits for n * P; all P programs resident). The CTA barriers make every
    thread's earlier writes part of the release, as CUDA's cooperative-groups grid sync does."""
    tl.debug_barrier()
    arrived = tl.atomic_add(arrivals_ptr, 1, sem="acq_rel", scope="gpu") + 1
    while arrived < expected:
        arrived = tl.atomic_add(arrivals_ptr, 0, sem="acquire", scope="gpu")
    tl.debug_barrier()


# in dependency order: a generated module copies the ones it calls (and the ones they call)
HELPERS = (log1p, softplus, tanh, segment_sum, grid_barrier)
