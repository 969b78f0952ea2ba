"""benchmarks/block_codecs.py: its transforms are lossless and its wire forms are what block stores move."""

import numpy as np
import pytest

from alac.runtime.movement.block_codec import byte_planes
from benchmarks.block_codecs import codecs_table, frequency_ranks, measure, narrow


def test_ranks_shuffles_and_the_narrow_form_keep_every_id():
    ids = np.array([5, 3, 5, 5, 3, 9, 70000, 5])
    ranks = frequency_ranks(ids, 70001)
    assert ranks[0] == 0 and ranks[1] == 1 and ranks[5] == 2 and len(set(ranks.tolist())) == 4
    words, escapes = narrow(np.array([0, 65533, 65534, 70000]))
    assert words.tolist() == [1, 65534, 0xFFFF, 0xFFFF] and escapes.tolist() == [65534, 70000]
    planes = byte_planes(words.view(np.uint8), 2)
    np.testing.assert_array_equal(planes.reshape(2, -1).T.copy().view(np.uint16).ravel(), words)
    frame = np.arange(11, dtype=np.uint8)
    assert byte_planes(frame).tolist() == [0, 4, 1, 5, 2, 6, 3, 7, 8, 9, 10]


def test_field_local_ranks_take_fewer_bytes_than_the_stored_form():
    pytest.importorskip("zstandard")
    result = measure(3000)
    arms = {a["name"]: a for a in result["arms"]}
    assert arms["narrow wire form (as stored)"]["ratio"] == 1
    assert (arms["field-local ranks, field-major, bytes shuffled, zstd 1"]["bytes_per_edge"]
            < arms["narrow, zstd 1"]["bytes_per_edge"] < arms["narrow wire form (as stored)"]["bytes_per_edge"])
    assert "ids on disk" in codecs_table(result)
    assert 1 < result["blocks"]["zstd_ratio"] and result["blocks"]["packed_bytes"] > 2 * result["edges"]
