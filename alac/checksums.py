"""Checksums of files (xxh3, the hash alac's content keys use: far faster than any parse), recorded by
the writers of block stores and of the disk cache and checked by their readers."""

from __future__ import annotations

import xxhash

READ_BYTES = 1 << 24


def file_checksum(path):
    """{"bytes", "xxh3"} of a file's contents."""
    digest = xxhash.xxh3_64()
    size = 0
    with open(path, "rb") as handle:
        while chunk := handle.read(READ_BYTES):
            digest.update(chunk)
            size += len(chunk)
    return {"bytes": size, "xxh3": digest.hexdigest()}
