"""How a block store's block files hold their packed bytes: as they are, or compressed.

A compressed block is decompressed by the reader thread that read it, into the ring buffer the copy
stream takes it from; zstandard's C code leaves the GIL to the other readers meanwhile. The store's
checksum of a block is over what is stored, so a damaged file is refused before it is decompressed.
"""

from __future__ import annotations

import numpy as np

from alac.errors import OptionError
from alac.optional import need

CODECS = (None, "zstd")
# zstd's fastest level: the readers must decompress faster than the disk reads (benchmarks/streaming.py,
# the arms streamed from disk with and without it)
ZSTD_LEVEL = 1


def check_codec(codec):
    if codec not in CODECS:
        raise OptionError(f"a block store's codec is one of {', '.join(str(c) for c in CODECS)}, got {codec!r}")
    if codec == "zstd":
        need("zstandard", "a zstd-compressed block store")
    return codec


def encode(buffer, codec):
    """The bytes a block file stores of a packed block (a uint8 numpy array)."""
    if codec is None:
        return buffer.tobytes()
    return need("zstandard", "a zstd-compressed block store").ZstdCompressor(level=ZSTD_LEVEL).compress(buffer)


def decode_into(stored, out, codec):
    """The packed block of a block file's bytes `stored` written into `out` (a uint8 numpy array of
    its size); a ValueError where they do not decompress to exactly that many bytes."""
    zstandard = need("zstandard", "a zstd-compressed block store")
    try:
        block = zstandard.ZstdDecompressor().decompress(stored, max_output_size=out.size)
    except zstandard.ZstdError as error:
        raise ValueError(str(error)) from None
    if len(block) != out.size:
        raise ValueError(f"{len(block):,} bytes, not {out.size:,}")
    out[:] = np.frombuffer(block, dtype=np.uint8)
