import numpy as np
import pytest
import torch

from alac import DataError
from alac.data import iter_blocks, load_libffm, load_libsvm, load_libsvm_files, parse_bytes, write_libffm, write_libsvm
from alac.data.arrays import from_csr_arrays


def _write(tmp_path, text, name="data.txt"):
    path = tmp_path / name
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    return path


def test_semantics_of_a_small_file(tmp_path):
    path = _write(tmp_path, "# header comment\n"
                            "+1 qid:7 1:0.5 3:2 # trailing comment\r\n"
                            "\n"
                            "-1 2:0 2:1e-3   \r\n"
                            "0.25\n")
    dataset = load_libsvm(path)
    assert dataset.n_rows == 3 and dataset.n_features == 3
    np.testing.assert_array_equal(dataset.labels.numpy(), [1, -1, 0.25])
    np.testing.assert_array_equal(dataset.indptr.numpy(), [0, 2, 4, 4])
    # 1-based ids (no id 0 anywhere), explicit zeros and duplicate ids kept as written
    np.testing.assert_array_equal(dataset.indices.numpy(), [0, 2, 1, 1])
    np.testing.assert_array_equal(dataset.values.numpy(), np.float32([0.5, 2, 0, 1e-3]))
    np.testing.assert_array_equal(dataset.source.row_lines.numpy(), [2, 4, 5])


@pytest.mark.parametrize("zero_based, expected", [("auto", [0, 2]), (True, [0, 2])])
def test_zero_based_detection(zero_based, expected):
    dataset = parse_bytes(b"1 0:1 2:1\n", zero_based=zero_based)
    np.testing.assert_array_equal(dataset.indices.numpy(), expected)


def test_binary_flag():
    assert parse_bytes(b"1 1:1 2:1\n").is_binary
    assert not parse_bytes(b"1 1:1 2:2\n").is_binary


def _error(call, *args, **kwargs):
    with pytest.raises(DataError) as caught:
        call(*args, **kwargs)
    return str(caught.value)


@pytest.mark.parametrize("text, line, token, words", [
    ("1 1:1\n-1 2:x\n", 2, "2:x", "not a number"),
    ("1 1:1\n1 2\n", 2, "2", "malformed"),
    ("1 1:1 2:3:4\n", 1, "2:3:4", "malformed"),
    ("abc 1:1\n", 1, "abc", "label is not a number"),
    ("1:2 1:1\n", 1, "1:2", "label"),
    ("1 1:1\n1 -3:1\n", 2, "-3:1", "not a non-negative integer"),
    ("1 1:nan\n", 1, "1:nan", "NaN or infinite"),
    ("1 1:-Inf\n", 1, "1:-Inf", "NaN or infinite"),
    ("1 1:1e39\n", 1, "1:1e39", "NaN or infinite"),
    ("1 1:1\n\n\nNaN 1:1\n", 4, "NaN", "NaN or infinite"),
    ("inf 1:1\n", 1, "inf", "NaN or infinite"),
    ("1 99999999999:1\n", 1, "99999999999:1", "larger than"),
])
def test_malformed_input_names_file_line_and_token(tmp_path, text, line, token, words):
    path = _write(tmp_path, text)
    message = _error(load_libsvm, path)
    assert str(path) in message and f"line {line}" in message and repr(token) in message
    assert words in message


def test_id_below_base_is_reported(tmp_path):
    path = _write(tmp_path, "1 1:1\n1 3:1 0:1\n")
    message = _error(load_libsvm, path, zero_based=False)
    assert str(path) in message and "line 2" in message and "'0:1'" in message and "below the base" in message


def test_id_beyond_declared_n_features(tmp_path):
    path = _write(tmp_path, "1 1:1\n-1 qid:3 5:1 124:1\n")
    message = _error(load_libsvm, path, n_features=123)
    assert str(path) in message and "line 2" in message and "'124:1'" in message and "n_features=123" in message


@pytest.mark.parametrize("text", ["", "\n\n", "# only a comment\n", "   \r\n"])
def test_empty_file(tmp_path, text):
    path = _write(tmp_path, text)
    message = _error(load_libsvm, path)
    assert str(path) in message and "line 1" in message and "empty file" in message


def test_missing_file(tmp_path):
    assert "file not found" in _error(load_libsvm, tmp_path / "nope.svm")


def test_different_feature_spaces(tmp_path):
    train = load_libsvm(_write(tmp_path, "1 1:1 4:1\n-1 2:1\n", "train.svm"))
    test_path = _write(tmp_path, "1 1:1\n-1 2:1 7:0.5\n", "test.svm")
    test = load_libsvm(test_path)
    message = _error(test.check_feature_space, train.n_features, reference_name=str(train.source.path))
    assert str(test_path) in message and "line 2" in message and "'7:0.5'" in message
    assert "outside the training feature space" in message
    # and the same test file loaded against the declared training space
    message = _error(load_libsvm, test_path, n_features=train.n_features)
    assert "line 2" in message and "'7:0.5'" in message


def _random_dataset(seed, n_rows=40, n_features=30, binary=False, with_fields=False):
    generator = np.random.default_rng(seed)
    lengths = generator.integers(0, 7, n_rows)
    lengths[0] = 0
    indptr = np.concatenate([[0], np.cumsum(lengths)])
    ids = generator.integers(0, n_features, indptr[-1])
    values = None
    if not binary:
        normal = generator.standard_normal(indptr[-1]).astype(np.float32)
        values = normal * 10.0 ** generator.integers(-8, 8, indptr[-1])
    labels = generator.choice([-1.0, 1.0], n_rows)
    dataset = from_csr_arrays(indptr, ids, values, labels, n_features)
    if with_fields:
        dataset.fields = torch.from_numpy(generator.integers(0, 4, indptr[-1]).astype(np.int32))
        dataset.n_fields = 4
    return dataset


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("binary", [True, False])
def test_libsvm_round_trip(tmp_path, seed, binary):
    original = _random_dataset(seed, binary=binary)
    write_libsvm(original, tmp_path / "a.svm")
    first = load_libsvm(tmp_path / "a.svm", n_features=original.n_features)
    write_libsvm(first, tmp_path / "b.svm")
    second = load_libsvm(tmp_path / "b.svm", n_features=original.n_features)
    assert first.same_as(original) and second.same_as(first)


@pytest.mark.parametrize("seed", range(3))
def test_libffm_round_trip(tmp_path, seed):
    original = _random_dataset(seed, with_fields=True)
    write_libffm(original, tmp_path / "a.ffm")
    first = load_libffm(tmp_path / "a.ffm", n_features=original.n_features, n_fields=4)
    write_libffm(first, tmp_path / "b.ffm")
    second = load_libffm(tmp_path / "b.ffm", n_features=original.n_features, n_fields=4)
    assert first.same_as(original) and second.same_as(first)


def test_blocks_equal_the_whole_file(tmp_path):
    original = _random_dataset(7, n_rows=500)
    write_libsvm(original, tmp_path / "a.svm")
    blocks = list(iter_blocks(tmp_path / "a.svm", n_features=original.n_features, block_bytes=300))
    assert len(blocks) > 5
    assert torch.equal(torch.cat([b.labels for b in blocks]), original.labels)
    assert torch.equal(torch.cat([b.indices for b in blocks]), original.indices)
    lines = torch.cat([b.source.row_lines for b in blocks])
    assert torch.equal(lines, torch.arange(1, 501))


def test_block_error_names_the_right_line(tmp_path):
    path = _write(tmp_path, "1 1:1\n" * 300 + "1 1:bad\n")
    message = _error(lambda: list(iter_blocks(path, block_bytes=64)))
    assert "line 301" in message and "'1:bad'" in message


def test_parallel_pieces_keep_line_numbers(tmp_path, monkeypatch):
    from alac.data import files
    monkeypatch.setattr(files, "_MIN_PIECE_BYTES", 64)
    monkeypatch.setattr(files.os, "cpu_count", lambda: 8)
    path = _write(tmp_path, "1 1:1 2:3\n" * 200 + "1 1:1 2:oops\n" + "1 1:1\n" * 50)
    message = _error(load_libsvm, path)
    assert "line 201" in message and "'2:oops'" in message
    good = _write(tmp_path, "1 1:1 2:3\n" * 200 + "-1 4:2\n" * 55, "good.svm")
    dataset = load_libsvm(good)
    assert dataset.n_rows == 255 and dataset.source.row_lines[-1] == 255


# --- the shared real data sets -------------------------------------------------------------------

def test_a9a_train_and_test_share_one_space(shared_data):
    train, test = load_libsvm_files([shared_data / "a9a/a9a", shared_data / "a9a/a9a.t"], n_features=123)
    assert (train.n_rows, test.n_rows) == (32561, 16281)
    assert train.n_features == test.n_features == 123
    assert train.is_binary and set(train.labels.unique().tolist()) == {-1.0, 1.0}
    test.check_feature_space(train.n_features)
    alone = load_libsvm(shared_data / "a9a/a9a.t", n_features=123)
    assert alone.same_as(test)


def test_20news_keeps_integer_counts(shared_data):
    dataset = load_libsvm(shared_data / "20news/20news.binary.train.svm")
    values = dataset.values.numpy()
    assert dataset.n_rows == 11314 and not dataset.is_binary
    assert (values == np.round(values)).all() and values.max() > 1


def test_ipinyou_has_16_per_row(shared_data):
    dataset = load_libsvm(shared_data / "ipinyou/train.fm.txt")
    assert dataset.n_rows == 26773
    assert (dataset.row_lengths() == 16).all()


def test_matches_scikit_learn(shared_data):
    sklearn_datasets = pytest.importorskip("sklearn.datasets")
    for name in ["a9a/a9a", "20news/20news.binary.test.svm", "w8a/w8a"]:
        X, y = sklearn_datasets.load_svmlight_file(str(shared_data / name), dtype=np.float32)
        ours = load_libsvm(shared_data / name, n_features=X.shape[1])
        theirs = ours.to_scipy()
        assert (theirs != X).nnz == 0 and np.array_equal(ours.labels.numpy(), y)


def test_real_files_round_trip(shared_data, tmp_path):
    for name in ["a9a/a9a.t", "20news/20news.binary.test.svm"]:
        first = load_libsvm(shared_data / name)
        write_libsvm(first, tmp_path / "copy.svm")
        assert load_libsvm(tmp_path / "copy.svm", n_features=first.n_features).same_as(first)


def test_a_huge_bad_token_is_cut_in_the_message(tmp_path):
    path = tmp_path / "long.svm"
    path.write_text("1 1:" + "x" * 10_000_000 + "\n")
    with pytest.raises(DataError) as error:
        load_libsvm(path)
    message = str(error.value)
    assert len(message) < 200 and message.endswith("(token '1:xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx'... "
                                                   "(10,000,002 characters))")
