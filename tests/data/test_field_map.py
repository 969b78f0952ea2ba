"""Field ids from a `field:value<TAB>index` file: numbered by first appearance, given to a LIBSVM
dataset's entries as a libffm file would give them; bad lines and unlisted features refused with the
file, line and text."""

import pytest
import torch

from alac.data import load_libffm, load_libsvm
from alac.data.field_map import from_positions, load_featindex
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


def test_fields_by_position_give_each_place_of_a_one_hot_row_its_field(tmp_path):
    (tmp_path / "train.txt").write_text("1 0:1 3:1 5:1\n0 1:1 3:1 6:1\n1 0:1 4:1 6:1\n")
    field_map = from_positions(load_libsvm(tmp_path / "train.txt", zero_based=True))
    assert field_map.n_fields == 3 and field_map.field_of.tolist() == [0, 0, -1, 1, 1, 2, 2]


@pytest.mark.parametrize(("text", "line", "message"), [
    ("1 0:1 3:1\n0 1:1 3:1 6:1\n", 2, "same length"),
    ("1 0:1 3:1\n0 3:1 4:1\n", 2, "feature 3 sits at places"),
])
def test_fields_by_position_refuse_rows_that_are_not_one_feature_per_field(tmp_path, text, line, message):
    (tmp_path / "train.txt").write_text(text)
    with pytest.raises(DataError, match=message) as refused:
        from_positions(load_libsvm(tmp_path / "train.txt", zero_based=True))
    assert refused.value.line == line


def test_ipinyou_fields_by_position_are_sixteen_ranges_of_ids(shared_data):
    """The shared iPinYou sample: one feature in each of 16 fields per row, each field a range of ids
    (its featindex.txt does not match these ids: it puts most of a row in one field)."""
    train, test = (load_libsvm(shared_data / "ipinyou" / name) for name in ("train.fm.txt", "test.fm.txt"))
    field_map = from_positions(train)
    fields = field_map.apply(train).fields.view(-1, 16)
    assert torch.equal(fields, torch.arange(16, dtype=torch.int32).expand_as(fields))
    listed = field_map.field_of[field_map.field_of >= 0]
    assert bool((listed.diff() >= 0).all())           # ids of a field form one range, fields in order
    from_test = from_positions(test).field_of
    both = (field_map.field_of[:from_test.numel()] >= 0) & (from_test >= 0)
    assert both.sum() > 1000 and torch.equal(field_map.field_of[:from_test.numel()][both], from_test[both])
