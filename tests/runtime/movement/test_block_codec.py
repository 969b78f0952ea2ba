"""Block files' codecs: zstd blocks as independent frames, decompressed on several threads."""

import numpy as np
import pytest
import torch

from alac.runtime.movement import block_codec

zstandard = pytest.importorskip("zstandard")
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def _block(size, seed=0):
    # half random bytes, half runs: a block that compresses, as the ids' high bytes do
    generator = np.random.default_rng(seed)
    return np.concatenate([generator.integers(0, 256, size // 2, dtype=np.uint8), np.repeat(
        generator.integers(0, 8, size // 64 + 1, dtype=np.uint8), 32)[:size - size // 2]])


@pytest.mark.parametrize("size", [1, 1000, 4096, 4097, 10 * 1024 + 3])
def test_frames_round_trip_into_the_ring_buffer(monkeypatch, size):
    monkeypatch.setattr(block_codec, "FRAME_BYTES", 1024)
    block = _block(size)
    stored, frames = block_codec.encode(block, "zstd")
    assert len(frames) == -(-size // 1024) and sum(frames) == len(stored)
    # every frame is a zstd frame of its own, of the frame's bytes as planes
    first = zstandard.ZstdDecompressor().decompressobj().decompress(stored)[:min(size, 1024)]
    assert first == block_codec.byte_planes(block[:1024]).tobytes()
    out = np.zeros(size, dtype=np.uint8)
    block_codec.decode_into(np.frombuffer(stored, dtype=np.uint8), out, "zstd", frames)
    # the frames' bytes stay planes until the block is where it is copied to
    assert np.array_equal(out, block) == (size < 8)
    restored = block_codec.from_planes(torch.from_numpy(out).to(DEVICE), block_codec.PLANES)
    np.testing.assert_array_equal(restored.cpu().numpy(), block)


def test_a_store_written_as_one_frame_still_decodes_and_a_wrong_frame_list_is_refused():
    block = _block(5000)
    whole = zstandard.ZstdCompressor(level=1).compress(block.tobytes())
    out = np.zeros(block.size, dtype=np.uint8)
    block_codec.decode_into(np.frombuffer(whole, dtype=np.uint8), out, "zstd")
    np.testing.assert_array_equal(out, block)
    with pytest.raises(ValueError, match="2 frames"):
        block_codec.decode_into(np.frombuffer(whole, dtype=np.uint8), out, "zstd", [len(whole) - 1, 1])
    assert block_codec.encode(block, None) == (block.tobytes(), None)


def test_byte_planes_regroup_every_planes_th_byte_and_keep_a_short_tail():
    frame = np.arange(11, dtype=np.uint8)
    assert block_codec.byte_planes(frame).tolist() == [0, 4, 1, 5, 2, 6, 3, 7, 8, 9, 10]
    planes = torch.from_numpy(block_codec.byte_planes(frame))
    np.testing.assert_array_equal(block_codec.from_planes(planes, 4).numpy(), frame)
    assert block_codec.from_planes(planes, 1) is planes
