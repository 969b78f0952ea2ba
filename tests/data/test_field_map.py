"""Field ids from a `field:value<TAB>index` file: numbered by first appearance, given to a LIBSVM
dataset's entries as a libffm file would give them; bad lines and unlisted features refused with the
file, line and text."""

import pytest
import torch

from alac.data import load_libffm, load_libsvm
from alac.data.field_map import load_featindex
from alac.errors import DataError

FEATINDEX = "truncate\t0\n1:other\t1\n2:other\t2\n1:ios\t3\nweekday:3\t4\n2:xyz\t5\n"


def test_fields_are_numbered_by_first_appearance_and_given_to_every_entry(tmp_path):
    (tmp_path / "featindex.txt").write_text(FEATINDEX)
    (tmp_path / "train.txt").write_text("1 1:1 2:1 4:1\n0 0:1 3:1 5:1\n")
    (tmp_path / "train.ffm").write_text("1 1:1:1 2:2:1 3:4:1\n0 0:0:1 1:3:1 2:5:1\n")
    field_map = load_featindex(tmp_path / "featindex.txt")
    assert field_map.names == ("truncate", "1", "2", "weekday") and field_map.n_fields == 4
    assert field_map.field_of.tolist() == [0, 1, 2, 1, 3, 2]
    with_fields = field_map.apply(load_libsvm(tmp_path / "train.txt", zero_based=True))
    # the same fields a libffm file states for the same entries
    libffm = load_libffm(tmp_path / "train.ffm")
    assert torch.equal(with_fields.fields, libffm.fields) and torch.equal(with_fields.indices, libffm.indices)
    assert with_fields.n_fields == 4


@pytest.mark.parametrize(("text", "line", "message"), [
    ("1:other\t1\nno tab here\n", 2, "field:value<TAB>index"),
    ("1:other\t1\n\t2\n", 2, "field:value<TAB>index"),
    ("1:other\t1\n2:other\tseven\n", 2, "not a number"),
    ("1:other\t1\n2:other\t4\n3:other\t1\n", 3, "listed twice"),
])
def test_a_bad_line_is_refused_with_its_file_line_and_text(tmp_path, text, line, message):
    path = tmp_path / "featindex.txt"
    path.write_text(text)
    with pytest.raises(DataError, match=message) as refused:
        load_featindex(path)
    assert refused.value.path == str(path) and refused.value.line == line


def test_text_after_an_index_is_ignored_with_a_warning(tmp_path):
    path = tmp_path / "featindex.txt"
    path.write_text("1:other\t0\n20:1-10\t1 stray text\n")
    with pytest.warns(UserWarning, match="line 2: text after the feature index"):
        assert load_featindex(path).field_of.tolist() == [0, 1]


def test_a_feature_without_a_field_is_refused_with_the_data_line(tmp_path):
    (tmp_path / "featindex.txt").write_text("1:other\t0\n2:other\t1\n")
    (tmp_path / "train.txt").write_text("1 0:1 1:1\n0 0:1 7:1\n")
    with pytest.raises(DataError, match="feature 7 has no field") as refused:
        load_featindex(tmp_path / "featindex.txt").apply(load_libsvm(tmp_path / "train.txt", zero_based=True))
    assert refused.value.line == 2 and refused.value.path == str(tmp_path / "train.txt")
