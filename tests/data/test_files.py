"""Reading files: only regular files, and no line without end (a device or a file without line
ends read by mistake is one clear error, never an unbounded read)."""

import os

import pytest

from alac.data import files, formats, load_libsvm
from alac.errors import DataError


@pytest.mark.parametrize("device", ["/dev/zero", "/dev/urandom"])
def test_a_device_is_refused_before_anything_is_read(device):
    if not os.path.exists(device):
        pytest.skip(f"no {device} here")
    with pytest.raises(DataError, match=f"{device}: is a character device, not a regular file"):
        formats.load(device)
    with pytest.raises(DataError, match="not a regular file"):
        list(formats.iter_blocks(device, "libsvm"))


def test_a_fifo_is_refused_without_waiting_for_a_writer(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with pytest.raises(DataError, match="pipe: is a FIFO, not a regular file"):
        load_libsvm(fifo)


def test_a_line_longer_than_the_bound_is_refused_in_whole_and_block_reads(tmp_path, monkeypatch):
    monkeypatch.setattr(files, "MAX_LINE_BYTES", 64)
    path = tmp_path / "long.svm"
    path.write_text("1 1:1\n" * 20 + "1 " + " ".join(f"{i}:1" for i in range(1, 40)) + "\n" + "0 2:1\n" * 20)
    with pytest.raises(DataError, match="long.svm: line 21: line 21 is longer than"):
        load_libsvm(path)
    with pytest.raises(DataError, match="long.svm: line 21: line 21 is longer than"):
        list(files.iter_line_blocks(path, block_bytes=16))
    path.write_text("1 1:1\n" * 200)
    assert load_libsvm(path).n_rows == 200
    assert sum(1 for _ in files.iter_line_blocks(path, block_bytes=16)) > 1
