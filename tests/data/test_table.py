"""Tables of categorical columns: every column a field, values indexed or hashed, clear errors."""

import numpy as np
import pandas as pd
import pytest

from alac.data.table import TableEncoding, load_table, load_table_files
from alac.errors import DataError

CSV = "user,item,age,clicked\nu1,a,30,1\nu2,b,,0\nu1,c,2,1\n,a,1000,0\n"


def _write(tmp_path, text, name="t.csv"):
    path = tmp_path / name
    path.write_text(text)
    return path


def _rows(dataset):
    indptr = dataset.indptr.numpy()
    return [dataset.indices.numpy()[indptr[i]:indptr[i + 1]].tolist() for i in range(dataset.n_rows)]


def test_fields_are_indexed_by_first_appearance_with_zero_for_missing(tmp_path):
    data = load_table(_write(tmp_path, CSV), label="clicked", fields="user,item")
    # user: u1 -> 1, u2 -> 2, missing -> 0 (3 ids); item: a, b, c -> 1..3 after the user field's 3 ids
    assert _rows(data) == [[1, 4], [2, 5], [1, 6], [0, 4]]
    assert data.n_features == 3 + 4 and data.n_fields == 2 and data.is_binary
    assert data.fields.tolist() == [0, 1] * 4 and data.labels.tolist() == [1, 0, 1, 0]
    assert data.source.describe_row(3) == f"{tmp_path / 't.csv'}: line 5"


def test_a_second_table_shares_the_first_ones_ids_and_unseen_values_get_id_zero(tmp_path):
    train = _write(tmp_path, CSV)
    test = _write(tmp_path, "clicked,item,user\n1,c,u9\n0,zz,u2\n", "test.csv")
    (first, second), encoding = load_table_files([train, test], label="clicked", fields=["user", "item"])
    assert _rows(second) == [[0, 6], [2, 3]]
    assert encoding.vocabularies == {"user": ["u1", "u2"], "item": ["a", "b", "c"]}
    again, = load_table_files([test], encoding=TableEncoding.from_dict(encoding.to_dict()))[0]
    assert _rows(again) == _rows(second)


def test_numeric_columns_are_bucketized_or_kept_as_values(tmp_path):
    path = _write(tmp_path, CSV)
    bucketized = load_table(path, label="clicked", fields="age", numeric="age")
    # 30 -> floor(log(30)**2) = 11, missing, 2 stays 2, 1000 -> floor(log(1000)**2) = 47
    assert bucketized.n_features == 4 and _rows(bucketized) == [[1], [0], [2], [3]]
    valued = load_table(path, label="clicked", fields="user,age", numeric="age", numeric_mode="value",
                        numeric_scale="none")
    assert _rows(valued) == [[1, 3], [2], [1, 3], [0, 3]]
    assert valued.values.tolist() == [1, 30, 1, 1, 2, 1, 1000]


def test_numeric_values_are_standardized_by_default_and_predict_reads_them_alike(tmp_path):
    """A raw timestamp as a value would swamp every one-hot entry (an FM reached RMSE 1e10): the
    default centres and divides by the training table's deviation, kept in the encoding."""
    path = _write(tmp_path, "y,t\n1,1500000000\n2,1500000100\n3,1500000300\n")
    (data,), encoding = load_table_files([path], label="y", fields="t", numeric="t", numeric_mode="value")
    numbers = np.array([1500000000, 1500000100, 1500000300.0])
    np.testing.assert_allclose(data.values.numpy(), (numbers - numbers.mean()) / numbers.std(), rtol=1e-5)
    assert "t (mean 1.5e+09, deviation 124.7" in encoding.describe_scaling()
    test = _write(tmp_path, "y,t\n1,1500000200\n", "test.csv")
    (again,), _ = load_table_files([test], encoding=TableEncoding.from_dict(encoding.to_dict()))
    assert again.values.tolist() == pytest.approx([(1500000200 - numbers.mean()) / numbers.std()], rel=1e-5)
    logged = load_table(path, label="y", fields="t", numeric="t", numeric_mode="value", numeric_scale="log")
    np.testing.assert_allclose(logged.values.numpy(), np.log1p(numbers), rtol=1e-6)


@pytest.mark.parametrize("token", ["inf", "-inf", "1e308", "-1e39"])
def test_a_number_that_is_not_finite_is_refused_with_its_line_and_column(tmp_path, token):
    path = _write(tmp_path, f"y,t\n1,5\n0,{token}\n")
    with pytest.raises(DataError, match=f"line 3: numeric column 't' holds a number that is not finite as float32 "
                                        f"\\(token '{token}'\\)"):
        load_table(path, label="y", fields="t", numeric="t", numeric_mode="value")
    path = _write(tmp_path, f"y,t\n1,5\n{token},4\n")
    with pytest.raises(DataError, match="line 3: label column 'y' is not a number"):
        load_table(path, label="y", fields="t")


def test_hashed_fields_are_stable_and_stay_in_their_field(tmp_path):
    path = _write(tmp_path, CSV)
    data = load_table(path, label="clicked", fields="user,item", hash_bits=4)
    rows = _rows(data)
    assert data.n_features == 32
    assert all(0 <= user < 16 and 16 <= item < 32 for user, item in rows)
    assert rows[0][0] == rows[2][0] and rows[0][1] == rows[3][1] and rows[3][0] == 0
    assert _rows(load_table(path, label="clicked", fields="user,item", hash_bits=4)) == rows


def test_a_dataframe_and_parquet_read_like_the_csv(tmp_path):
    path = _write(tmp_path, CSV)
    frame = pd.read_csv(path)
    from_frame = load_table(frame, label="clicked", fields="user,item")
    assert _rows(from_frame) == _rows(load_table(path, label="clicked", fields="user,item"))
    pytest.importorskip("pyarrow")
    frame.astype(str).replace("nan", "").to_parquet(tmp_path / "t.parquet")
    from_parquet = load_table(tmp_path / "t.parquet", label="clicked", fields="user,item")
    assert _rows(from_parquet) == _rows(from_frame)


@pytest.mark.parametrize("text, options, message", [
    (CSV, {"label": "clicked", "fields": "user,price"}, r"t.csv: line 1: no column 'price'; the table's columns are "
                                                         r"user, item, age, clicked"),
    ("user,clicked\nu1,1\nu2,yes\n", {"label": "clicked"}, r"t.csv: line 3: label column 'clicked' is not a number "
                                                            r"\(token 'yes'\)"),
    ("", {"label": "clicked"}, r"t.csv: line 1: empty file"),
    ("user,clicked\n", {"label": "clicked"}, r"t.csv: line 2: no data rows"),
    (CSV.replace("1000", "many"), {"label": "clicked", "numeric": "age"},
     r"line 5: numeric column 'age' is not a number \(token 'many'\)"),
    (CSV, {"label": "clicked", "fields": "clicked"}, "cannot also be a field"),
])
def test_bad_tables_are_clear_errors(tmp_path, text, options, message):
    with pytest.raises(DataError, match=message):
        load_table(_write(tmp_path, text), **options)


def test_a_folder_is_not_a_table(tmp_path):
    with pytest.raises(DataError, match="is a folder"):
        load_table(tmp_path, label="y")


def test_movielens_ratings_match_an_independent_one_hot_encoding(shared_data):
    path = shared_data / "ml-latest-small/ratings.csv"
    (data,), encoding = load_table_files([path], label="rating", fields="userId,movieId")
    frame = pd.read_csv(path)
    assert data.n_rows == len(frame) == 100_836 and data.n_features == 610 + 9_724 + 2
    assert np.allclose(data.labels.numpy(), frame["rating"].to_numpy())
    ids = data.indices.numpy().reshape(-1, 2)
    users = np.array(encoding.vocabularies["userId"])[ids[:, 0] - 1]
    movies = np.array(encoding.vocabularies["movieId"])[ids[:, 1] - 611 - 1]
    assert (users == frame["userId"].astype(str).to_numpy()).all()
    assert (movies == frame["movieId"].astype(str).to_numpy()).all()
