"""Text patches of generated kernel source for the benchmarks that time rewritten kernels: a patch
that no longer matches the generator's output is an error, never a silent timing of the unpatched
kernel."""

from __future__ import annotations


def replace_checked(source, old, new, count=-1, what="patch"):
    """source with old replaced by new (the first count times; every time by default); ValueError
    naming `what` when old is not in source."""
    if old not in source:
        raise ValueError(f"{what} does not apply to the generated kernel: {old!r}")
    return source.replace(old, new, count)
