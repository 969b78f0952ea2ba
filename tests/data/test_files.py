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


def _libsvm_text(rows=300):
    return "".join(f"{row % 2} {1 + row % 7}:1 {8 + row % 5}:0.5\n" for row in range(rows)).encode()


@pytest.mark.parametrize("kind", ["gzip", "bz2", "xz", "zstd"])
def test_a_compressed_file_reads_as_its_content_in_whole_and_block_reads(tmp_path, kind):
    """gzip, bz2, xz and zstd files are recognised by their first bytes, whatever their name, and
    read as the text they hold (in blocks too: streamed, never unpacked to disk)."""
    import bz2
    import gzip
    import lzma

    text = _libsvm_text()
    plain = tmp_path / "plain.svm"
    plain.write_bytes(text)
    if kind == "zstd":
        zstandard = pytest.importorskip("zstandard")
        packed = zstandard.ZstdCompressor().compress(text)
    else:
        packed = {"gzip": gzip.compress, "bz2": bz2.compress, "xz": lzma.compress}[kind](text)
    path = tmp_path / "data"                 # no suffix: the content says it
    path.write_bytes(packed)
    assert files.compression(path) == kind and files.compression(plain) is None
    format, how = formats.detection(path)
    assert format == "libsvm" and how == f"from its content, read through {kind}"
    expected, got = load_libsvm(plain), formats.load(path)
    assert got.n_rows == 300 and (got.indices == expected.indices).all() and (got.values == expected.values).all()
    blocks = list(files.iter_line_blocks(path, block_bytes=256))
    assert len(blocks) > 2 and b"".join(bytes(block) for block, _ in blocks) == text
    assert files.line_text(path, 3) == text.split(b"\n")[2]


def test_a_corrupt_compressed_file_is_one_clear_error(tmp_path):
    import gzip

    path = tmp_path / "cut.svm.gz"
    path.write_bytes(gzip.compress(_libsvm_text())[:60])
    with pytest.raises(DataError, match="cut.svm.gz: cannot decompress it"):
        load_libsvm(path)


def test_standard_input_is_read_once_and_held(monkeypatch):
    import io
    import sys

    monkeypatch.setattr(files, "_stdin", None)
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(_libsvm_text(40))))
    assert formats.resolve_format("-", "auto") == "libsvm"        # detection reads it, the load again
    assert formats.load("-").n_rows == 40 and files.file_size("-") == len(_libsvm_text(40))
    assert files.content_hash("-") == files.content_hash("-")


@pytest.mark.parametrize("name, text, expected, how", [
    ("ratings.csv", "user,item,rating\n1,2,4.0\n", "table", "from its name"),
    ("ratings.csv.gz", None, "table", "from its name, read through gzip"),
    ("ratings", "user,item,rating\n1,2,4.0\n", "table", "from its content"),
    ("clicks.txt", "1\t5\t\tab12\n0\t3\t7\tcd34\n", "criteo", "from its content"),
    ("train.txt", "# header\n1 0:3:1 1:9:1\n", "libffm", "from its content"),
    ("train.ffm", "1 3:1\n", "libffm", "from its name"),
    ("a9a", "-1 3:1 11:1\n", "libsvm", "from its content"),
])
def test_formats_are_detected_from_the_name_or_the_content_and_say_which(tmp_path, name, text, expected, how):
    import gzip

    path = tmp_path / name
    path.write_bytes(gzip.compress(b"user,item\n1,2\n") if text is None else text.encode())
    assert formats.detection(path) == (expected, how)
    said = []
    if expected == "table":
        with pytest.raises(DataError, match="looks like a table .*--format table"):
            formats.resolve_format(path, "auto")
    assert formats.resolve_format(path, "auto", tables=True, detected=lambda *found: said.append(found)) == expected
    assert said == [(expected, how)]
