"""The plan: every *how* decision, kept apart from the model's *what* (as in Halide)."""

from __future__ import annotations

from dataclasses import dataclass

SEMANTICS = ("sync",)
KERNEL_FAMILIES = ("fused", "stage")


@dataclass(frozen=True)
class Plan:
    # 128 samples per program: 4 warps each own 32 rows; the performance issue tunes C per model,
    # data shape and GPU. The batch size is a multiple of C (each batch is B / C chunks).
    chunk_size: int = 128
    batch_size: int = 1024
    kernels: str = "fused"
    num_warps: int = 4
    semantics: str = "sync"

    def __post_init__(self):
        if self.kernels not in KERNEL_FAMILIES:
            raise ValueError(f"plan kernels must be one of {KERNEL_FAMILIES}, got {self.kernels!r}")
        if self.semantics not in SEMANTICS:
            raise ValueError(f"plan semantics must be one of {SEMANTICS}, got {self.semantics!r}")
        if self.chunk_size < 1 or self.chunk_size & (self.chunk_size - 1):
            raise ValueError(f"chunk_size must be a power of two (a Triton block), got {self.chunk_size}")
        if self.batch_size < self.chunk_size or self.batch_size % self.chunk_size:
            raise ValueError(f"batch_size ({self.batch_size}) must be a multiple of chunk_size ({self.chunk_size})")

    @property
    def chunks_per_batch(self):
        return self.batch_size // self.chunk_size

    def describe(self):
        return (f"semantics={self.semantics} kernels={self.kernels} chunk_size={self.chunk_size} "
                f"batch_size={self.batch_size} num_warps={self.num_warps}")
