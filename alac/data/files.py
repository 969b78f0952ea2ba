"""Reading data files as byte buffers: whole, or in blocks cut at line ends; compressed files and standard
input read transparently; content hashes; line lookup."""

from __future__ import annotations

import bz2
import gzip
import io
import lzma
import mmap
import os
import stat
import sys
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import xxhash

from alac.errors import DataError
from alac.optional import need

# 64 MiB keeps a block's parse arrays (a few times the text) well inside a laptop's memory while a
# block is long enough to scan that per-block overhead is negligible (benchmarks/parse_speed.py).
DEFAULT_BLOCK_BYTES = 64 << 20
# The longest line a data file may have, far past any row of data (a million LIBSVM entries); a
# "line" past this is not data (a file without line ends, a device read by mistake).
MAX_LINE_BYTES = 256 << 20


def _check_regular(path, mode):
    """A DataError unless the stat mode is a regular file's: a device, FIFO or socket would be read
    without end (/dev/zero) or consumed."""
    if stat.S_ISDIR(mode):
        raise DataError("is a directory, not a data file", path=path)
    if not stat.S_ISREG(mode):
        kind = "a character device" if stat.S_ISCHR(mode) else "a FIFO" if stat.S_ISFIFO(mode) else \
            "a socket" if stat.S_ISSOCK(mode) else "a block device" if stat.S_ISBLK(mode) else "not a file"
        raise DataError(f"is {kind}, not a regular file: alac reads data from files", path=path)


# the path that names standard input
STDIN = "-"
# magic bytes of the compressed files read transparently, streamed through their decompressor
_MAGIC = ((b"\x1f\x8b", "gzip"), (b"BZh", "bz2"), (b"\x28\xb5\x2f\xfd", "zstd"), (b"\xfd7zXZ\x00", "xz"))
_stdin = None


def _stdin_bytes():
    """Standard input, read once and held in memory (a loader reads its data more than once: the
    format's detection, the parse, an error's line)."""
    global _stdin
    if _stdin is None:
        _stdin = sys.stdin.buffer.read()
    return _stdin


def is_stdin(path):
    return str(path) == STDIN


def _compression_of(raw):
    """The compression of a seekable raw reader by its first bytes (left at its start), or None."""
    head = raw.read(6)
    raw.seek(0)
    return next((name for magic, name in _MAGIC if head.startswith(magic)), None)


def compression(path):
    """"gzip", "bz2", "zstd", "xz" for a compressed file (by its first bytes), else None."""
    with _open_raw_or_stdin(path) as raw:
        return _compression_of(raw)


def _decompressed(source, kind, path):
    """A reader of the decompressed bytes of source (a file's name, or a file object)."""
    if kind == "zstd":
        zstandard = need("zstandard", f"{path}: reading zstd-compressed data")
        raw = source if hasattr(source, "read") else _open_raw(source)
        return zstandard.ZstdDecompressor().stream_reader(raw, closefd=True)
    return {"gzip": gzip.open, "bz2": bz2.open, "xz": lzma.open}[kind](source, "rb")


def _open_raw(path):
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise DataError("file not found", path=path) from None
    except OSError as error:
        raise DataError(f"cannot read it ({error.strerror or error})", path=path) from None
    _check_regular(path, mode)
    try:
        return open(path, "rb")
    except FileNotFoundError:
        raise DataError("file not found", path=path) from None
    except IsADirectoryError:
        raise DataError("is a directory, not a data file", path=path) from None
    except PermissionError:
        raise DataError("permission denied", path=path) from None
    except OSError as error:
        raise DataError(f"cannot read it ({error.strerror or error})", path=path) from None


def open_data(path):
    """A binary reader of a data file's content: standard input for "-", a gzip, bz2, zstd or xz file
    decompressed as it is read (never unpacked to disk), else the file itself."""
    raw = _open_raw_or_stdin(path)
    kind = _compression_of(raw)
    if kind is None or is_stdin(path):
        return raw if kind is None else _decompressed(raw, kind, path)
    # a file is opened again by its name: gzip's, bz2's and lzma's readers leave a file object open
    raw.close()
    return _decompressed(path, kind, path)


def _open_raw_or_stdin(path):
    return io.BytesIO(_stdin_bytes()) if is_stdin(path) else _open_raw(path)


def head(path, size):
    """The first `size` bytes of a data file's content (decompressed)."""
    with open_data(path) as handle:
        return _read(handle, size, path)


def read_bytes(path):
    """The whole file as a uint8 array (a DataError if a line is longer than MAX_LINE_BYTES)."""
    with open_data(path) as handle:
        data = _read(handle, -1, path)
    _check_line_lengths(data, path)
    return np.frombuffer(data, dtype=np.uint8)


def _read(handle, size, path):
    """handle.read(size), a corrupt compressed file's error as a DataError."""
    try:
        return handle.read(size)
    except (OSError, EOFError, lzma.LZMAError) as error:
        raise DataError(f"cannot decompress it ({error})", path=path) from None


def _check_line_lengths(data, path):
    """A DataError at the first stretch of MAX_LINE_BYTES without a line end: each step jumps to the
    last line end of the next stretch, so a file takes a few memrchr calls, not one per line."""
    start = 0
    while len(data) - start > MAX_LINE_BYTES:
        end = data.rfind(b"\n", start, start + MAX_LINE_BYTES + 1)
        if end < 0:
            line = data.count(b"\n", 0, start) + 1
            raise DataError(f"line {line} is longer than {MAX_LINE_BYTES >> 20} MiB: not a file of data lines",
                            path=path, line=line)
        start = end + 1


def iter_line_blocks(path, block_bytes=DEFAULT_BLOCK_BYTES):
    """Yield (buffer, first_line) with each buffer ending at a line end (except the file's last).

    first_line is the 1-based number of the buffer's first line in the file. A line longer than
    block_bytes is yielded whole in one larger buffer.
    """
    first_line = 1
    carry = b""
    with open_data(path) as handle:
        while True:
            data = _read(handle, block_bytes, path)
            if not data:
                if carry:
                    yield np.frombuffer(carry, dtype=np.uint8), first_line
                return
            data = carry + data
            cut = data.rfind(b"\n")
            if cut < 0:
                if len(data) > MAX_LINE_BYTES:
                    raise DataError(f"line {first_line} is longer than {MAX_LINE_BYTES >> 20} MiB: not a file of "
                                    "data lines", path=path, line=first_line)
                carry = data
                continue
            block = np.frombuffer(data, dtype=np.uint8, count=cut + 1)
            carry = data[cut + 1:]
            yield block, first_line
            first_line += int(np.count_nonzero(block == 10))


def content_hash(path):
    """A 128-bit hash of the file's bytes (xxh3: far faster than a parse), read through a
    memory map so no copy of the file is made."""
    digest = xxhash.xxh3_128()
    if is_stdin(path):
        digest.update(_stdin_bytes())
        return digest.hexdigest()
    with _open_raw(path) as handle:
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
    """The size of a regular file as stored (compressed where it is; a DataError for anything else but
    standard input)."""
    if is_stdin(path):
        return len(_stdin_bytes())
    try:
        info = os.stat(path)
    except FileNotFoundError:
        raise DataError("file not found", path=path) from None
    except OSError as error:
        raise DataError(f"cannot read it ({error.strerror or error})", path=path) from None
    _check_regular(path, info.st_mode)
    return info.st_size


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


# Pieces below 4 MiB are not worth a thread (benchmarks/parse_speed.py).
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
