import numpy as np
import pytest

from alac import DataError
from alac.data.criteo import (
    N_FIELDS,
    bucketize_integers,
    featurize,
    load_criteo,
    parse_criteo_bytes,
    read_criteo_columns,
    write_criteo,
)
from alac.errors import OptionError

LINE = "1\t5\t\t-1\t0\t3\t100\t\t\t\t\t\t\t7\t68fd1e64\t\tFB936136" + "\t" * 23 + "\n"


def test_columns_of_one_line():
    columns = parse_criteo_bytes(LINE.encode())
    assert columns.labels.tolist() == [1.0]
    assert columns.integers[0, :6].tolist() == [5, 0, -1, 0, 3, 100]
    assert columns.integer_present[0].tolist() == [True, False, True, True, True, True] + [False] * 6 + [True]
    assert columns.categoricals[0, 0] == 0x68FD1E64 and columns.categoricals[0, 2] == 0xFB936136
    assert columns.categorical_present[0].sum() == 2


def test_short_lines_are_padded():
    columns = parse_criteo_bytes(b"0\t1\t2\r\n1\n")
    assert columns.n_rows == 2
    assert columns.integer_present[0].tolist() == [True, True] + [False] * 11
    assert not columns.categorical_present.any()


def test_bucketize_rule():
    values = np.array([-2, 0, 1, 2, 3, 10, 1000])
    expected = [-2, 0, 1, 2, int(np.log(3) ** 2), int(np.log(10) ** 2), int(np.log(1000) ** 2)]
    assert bucketize_integers(values).tolist() == expected


@pytest.mark.parametrize("hash_bits", [4, 20])
def test_bucketized_features_are_one_hot_per_field(hash_bits):
    dataset = featurize(parse_criteo_bytes((LINE * 3).encode()), hash_bits=hash_bits)
    assert dataset.is_binary and dataset.n_fields == N_FIELDS
    assert (dataset.row_lengths() == N_FIELDS).all()
    ids, fields = dataset.indices.numpy(), dataset.fields.numpy()
    np.testing.assert_array_equal(ids >> hash_bits, fields)
    # missing values take bucket 0 of their field, present values never do
    columns = parse_criteo_bytes(LINE.encode())
    present = np.concatenate([columns.integer_present[0], columns.categorical_present[0]])
    np.testing.assert_array_equal((ids[:N_FIELDS] & ((1 << hash_bits) - 1)) == 0, ~present)


def test_value_mode_keeps_integers_as_values():
    dataset = featurize(parse_criteo_bytes(LINE.encode()), hash_bits=10, integer_mode="value")
    integer_entries = dataset.indices.numpy() < 13
    np.testing.assert_array_equal(dataset.indices.numpy()[integer_entries], [0, 2, 3, 4, 5, 12])
    np.testing.assert_array_equal(dataset.values.numpy()[integer_entries], [5, -1, 0, 3, 100, 7])
    assert dataset.nnz == 6 + 26


@pytest.mark.parametrize("text, column, words", [
    ("2\t1\n", 1, "label must be 0 or 1"),
    ("1\t1\tx\n", 3, "not an integer"),
    ("1" + "\t" * 13 + "\tzz\n", 15, "hexadecimal"),
    ("1" + "\t" * 40 + "\n", 41, "more than 40"),
])
def test_errors_name_file_line_and_column(tmp_path, text, column, words):
    path = tmp_path / "bad.tsv"
    path.write_text(LINE + text)
    with pytest.raises(DataError) as caught:
        load_criteo(path)
    message = str(caught.value)
    assert str(path) in message and "line 2" in message and f"column {column}" in message and words in message


def test_empty_file(tmp_path):
    (tmp_path / "empty.tsv").write_text("\n")
    with pytest.raises(DataError, match="line 1: empty file"):
        load_criteo(tmp_path / "empty.tsv")


def test_criteo_tiny(shared_data, tmp_path):
    columns = read_criteo_columns(shared_data / "criteo-tiny/train.txt")
    assert columns.n_rows == 1000 and columns.categoricals.shape == (1000, 26)
    dataset = featurize(columns)
    assert dataset.n_rows == 1000 and dataset.n_fields == 39
    assert len(set(dataset.fields.numpy().tolist()) - set(range(13))) == 26
    write_criteo(columns, tmp_path / "copy.tsv")
    again = read_criteo_columns(tmp_path / "copy.tsv")
    assert again.same_as(columns)
    assert featurize(again).same_as(dataset)


def test_ids_never_wrap_an_int32():
    """39 fields x 2**26 buckets pass 2**31: refused with the exact limit; the widest allowed fits."""
    columns = parse_criteo_bytes((LINE * 2).encode())
    with pytest.raises(OptionError, match=r"hash_bits must be in 1\.\.25 for integer_mode='bucketize': "
                                        r"2,617,245,696 ids at 26 bits exceed"):
        featurize(columns, hash_bits=26)
    widest = featurize(columns, hash_bits=25)
    assert widest.n_features == 39 * 2**25 and int(widest.indices.min()) >= 0
    np.testing.assert_array_equal(widest.indices.numpy().astype(np.int64) >> 25, widest.fields.numpy())
    assert featurize(columns, hash_bits=26, integer_mode="value").n_features == 13 + 26 * 2**26
    with pytest.raises(OptionError, match=r"1\.\.26 for integer_mode='value'"):
        featurize(columns, hash_bits=27, integer_mode="value")
