"""How a block store's block files hold their packed bytes: as they are, or compressed.

A zstd block is a run of independent frames of FRAME_BYTES of the packed block each, so that one
block's frames decompress on several threads at once (DECODERS of them, shared by the readers) into
the ring buffer the copy stream takes it from; zstandard's C code leaves the GIL meanwhile (as one
frame, a block would be decompressed on one thread after its read, and an epoch of a few large blocks
would wait on them in turn). The store's checksum of a block is over what is stored, so a damaged file
is refused before it is decompressed. Frames hold their bytes as byte planes; the threads leave them so,
and `from_planes` undoes them where the block is copied to (one copy of the block on a GPU; on the
host's threads the regroup took longer than zstd: benchmarks/streaming.py's zstd arms).
"""

from __future__ import annotations

import functools
import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch

from alac.errors import OptionError
from alac.optional import need

CODECS = (None, "zstd")
# zstd's fastest level: the readers must decompress faster than the disk reads (benchmarks/streaming.py,
# the arms streamed from disk with and without it)
ZSTD_LEVEL = 1
# Bytes of a packed block per frame: small enough that a block's frames keep every decoder busy, large
# enough that zstd's per-frame cost stays negligible.
FRAME_BYTES = 4 << 20
# threads decompressing frames, shared by every open store's readers
DECODERS = min(16, os.cpu_count() or 1)
# A frame's bytes regrouped as this many planes (every PLANES-th byte together) before zstd: the high
# bytes of ids, rows and bounds are mostly alike (benchmarks/block_codecs.py's whole blocks).
PLANES = 4


def check_codec(codec):
    if codec not in CODECS:
        raise OptionError(f"a block store's codec is one of {', '.join(str(c) for c in CODECS)}, got {codec!r}")
    if codec == "zstd":
        need("zstandard", "a zstd-compressed block store")
    return codec


def byte_planes(frame, planes=PLANES):
    """A uint8 array as `planes` planes (every planes-th byte together), a tail shorter than a row kept."""
    whole = frame.size - frame.size % planes
    return np.concatenate([np.ascontiguousarray(frame[:whole].reshape(-1, planes).T).ravel(), frame[whole:]])


def from_planes(block, planes):
    """A packed block (a uint8 tensor, on any device) whose FRAME_BYTES frames hold their bytes as
    `planes` planes (byte_planes), as it was packed."""
    if planes == 1:
        return block
    out = torch.empty_like(block)
    full = block.numel() // FRAME_BYTES * FRAME_BYTES
    out[:full].view(-1, FRAME_BYTES // planes, planes).copy_(
        block[:full].view(-1, planes, FRAME_BYTES // planes).transpose(1, 2))
    rest = block.numel() - full
    whole = full + rest - rest % planes
    out[full:whole].view(-1, planes).copy_(block[full:whole].view(planes, -1).t())
    out[whole:] = block[whole:]
    return out


def encode(buffer, codec, planes=PLANES):
    """(the bytes a block file stores of a packed block, a uint8 numpy array; the stored size of each
    of its frames, or None as they are). zstd frames hold their bytes as `planes` planes."""
    if codec is None:
        return buffer.tobytes(), None
    compressor = need("zstandard", "a zstd-compressed block store").ZstdCompressor(level=ZSTD_LEVEL)
    frames = [compressor.compress(byte_planes(buffer[start:start + FRAME_BYTES], planes))
              for start in range(0, buffer.size, FRAME_BYTES)]
    return b"".join(frames), [len(frame) for frame in frames]


@functools.cache
def _decoders():
    return ThreadPoolExecutor(DECODERS, thread_name_prefix="alac-decode")


def decode_into(stored, out, codec, frames=None):
    """A block file's bytes `stored` decompressed into `out` (a uint8 numpy array of the packed
    block's size), each frame's bytes left as the store's planes (from_planes undoes them); frames: the
    stored size of each frame of FRAME_BYTES (None: one frame, as stores written before frames hold
    them). A ValueError where they do not decompress to exactly `out`."""
    zstandard = need("zstandard", "a zstd-compressed block store")
    frames = [len(stored)] if frames is None else frames
    size = FRAME_BYTES if len(frames) > 1 else out.size
    ends = np.cumsum(frames)
    if ends[-1] != len(stored) or -(-out.size // size) != len(frames):
        raise ValueError(f"{len(frames)} frames of {int(ends[-1]):,} bytes, not a block of {out.size:,}")

    def decode(index):
        target = out[index * size:(index + 1) * size]
        try:
            block = zstandard.ZstdDecompressor().decompress(stored[ends[index] - frames[index]:ends[index]],
                                                            max_output_size=target.size)
        except zstandard.ZstdError as error:
            raise ValueError(str(error)) from None
        if len(block) != target.size:
            raise ValueError(f"frame {index}: {len(block):,} bytes, not {target.size:,}")
        target[:] = np.frombuffer(block, dtype=np.uint8)

    list(_decoders().map(decode, range(len(frames))))
