"""Reading files as byte buffers: whole, or in blocks cut at line ends; content hashes; line lookup."""

from __future__ import annotations

import mmap
import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import xxhash

from alac.errors import DataError

# 64 MiB keeps a block's parse arrays (about 3x the text) well inside a laptop's memory while a
# block still takes ~0.2 s to scan, so per-block overhead stays under 1 %.
DEFAULT_BLOCK_BYTES = 64 << 20


def _open(path):
    try:
        return open(path, "rb")
    except FileNotFoundError:
        raise DataError("file not found", path=path) from None
    except IsADirectoryError:
        raise DataError("is a directory, not a data file", path=path) from None
    except PermissionError:
        raise DataError("permission denied", path=path) from None


def read_bytes(path):
    """The whole file as a uint8 array."""
    with _open(path) as handle:
        return np.frombuffer(handle.read(), dtype=np.uint8)


def iter_line_blocks(path, block_bytes=DEFAULT_BLOCK_BYTES):
    """Yield (buffer, first_line) with each buffer ending at a line end (except the file's last).

    first_line is the 1-based number of the buffer's first line in the file. A line longer than
    block_bytes is yielded whole in one larger buffer.
    """
    first_line = 1
    carry = b""
    with _open(path) as handle:
        while True:
            data = handle.read(block_bytes)
            if not data:
                if carry:
                    yield np.frombuffer(carry, dtype=np.uint8), first_line
                return
            data = carry + data
            cut = data.rfind(b"\n")
            if cut < 0:
                carry = data
                continue
            block = np.frombuffer(data, dtype=np.uint8, count=cut + 1)
            carry = data[cut + 1:]
            yield block, first_line
            first_line += int(np.count_nonzero(block == 10))


def content_hash(path):
    """A 128-bit hash of the file's bytes (xxh3: ~20 GB/s, far below parse cost), read through a
    memory map so no copy of the file is made."""
    digest = xxhash.xxh3_128()
    with _open(path) as handle:
        if os.fstat(handle.fileno()).st_size:
            with mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
                digest.update(mapped)
    return digest.hexdigest()


def line_text(path, line):
    """The bytes of 1-based line `line` of `path`, without its line end (error messages only)."""
    seen = 1
    for block, first in iter_line_blocks(path):
        ends = np.flatnonzero(block == 10)
        last = first + len(ends)
        if line <= last:
            index = line - first
            start = 0 if index == 0 else int(ends[index - 1]) + 1
            stop = int(ends[index]) if index < len(ends) else len(block)
            return bytes(block[start:stop]).rstrip(b"\r")
        seen = last
    raise DataError(f"line {line} is past the end of the file ({seen} lines)", path=path)


def file_size(path):
    if os.path.isdir(path):
        raise DataError("is a directory, not a data file", path=path)
    try:
        return os.path.getsize(path)
    except OSError:
        raise DataError("file not found", path=path) from None


def pieces_at_line_ends(buf, count):
    """Split `buf` into about `count` pieces that end at line ends, with their 1-based first lines."""
    if buf.size == 0:
        return [(buf, 1)]
    pieces = []
    start = 0
    first_line = 1
    step = max(1, buf.size // count)
    while start < buf.size:
        cut = min(buf.size, start + step)
        if cut < buf.size:
            next_end = np.flatnonzero(buf[cut:] == 10)
            cut = buf.size if next_end.size == 0 else cut + int(next_end[0]) + 1
        piece = buf[start:cut]
        pieces.append((piece, first_line))
        first_line += int(np.count_nonzero(piece == 10))
        start = cut
    return pieces


# Pieces below 4 MiB are not worth a thread: scanning one takes ~10 ms.
_MIN_PIECE_BYTES = 4 << 20


def map_line_pieces(buf, scan):
    """Apply scan(piece, first_line) to line-aligned pieces of `buf` in threads; results in order.

    The scanners are numba functions that release the GIL, so threads scale with cores. The
    environment variable ALAC_PARSE_THREADS caps the thread count (default: all cores).
    """
    threads = int(os.environ.get("ALAC_PARSE_THREADS") or os.cpu_count() or 1)
    pieces = pieces_at_line_ends(buf, max(1, min(threads, buf.size // _MIN_PIECE_BYTES)))
    if len(pieces) == 1:
        return [scan(*pieces[0])]
    with ThreadPoolExecutor(len(pieces)) as pool:
        return list(pool.map(lambda piece: scan(*piece), pieces))
