"""Dense tables of the declared feature space are checked against free memory before they exist."""

import pytest

from alac.data import load_libsvm, parse_bytes
from alac.errors import DataError
from alac.runtime import memory
from alac.runtime.layout import LayoutOptions, build_layout


def test_one_huge_id_is_refused_with_its_file_line_token_and_size(monkeypatch, tmp_path):
    path = tmp_path / "big.svm"
    path.write_text("1 1:1 3:1\n0 2147483647:1\n")
    data = load_libsvm(path)
    assert data.n_features == 2**31 - 1
    monkeypatch.setattr(memory, "available_bytes", lambda device: 8 * 2**30)
    with pytest.raises(DataError) as error:
        build_layout(data, LayoutOptions(chunk_size=8), device="cpu")
    message = str(error.value)
    assert message.startswith(f"{path}: line 2: 2,147,483,647 feature ids need 64.0 GiB for the layout's feature "
                              "tables, more than the 8.0 GiB free on cpu")
    assert message.endswith("(token '2147483647:1')")


def test_tables_that_fit_pass_and_unknown_memory_is_not_guessed(monkeypatch):
    data = parse_bytes(b"1 1:1 3:1\n0 2:1\n", name="small.svm")
    monkeypatch.setattr(memory, "available_bytes", lambda device: None)
    memory.check_feature_tables(2**40, 8, "anything", "cpu", data)      # no figure: no refusal
    monkeypatch.setattr(memory, "available_bytes", lambda device: 2**30)
    assert build_layout(data, LayoutOptions(chunk_size=8), device="cpu").n_rows == 2
