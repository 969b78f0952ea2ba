"""Dense tables of the declared feature space are checked against free memory before they exist."""

import pytest
import torch

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


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_registered_host_tables_are_read_and_written_by_gpu_kernels(monkeypatch):
    """Past REGISTER_FROM_BYTES a table is page-locked in place (no power-of-two rounding): GPU gathers
    and scatters through its mapped view see and change the host values."""
    monkeypatch.setattr(memory, "REGISTER_FROM_BYTES", 1024)
    table = memory.pinned_empty((1000, 4))
    table.copy_(torch.arange(4000, dtype=torch.float32).view(1000, 4))
    view = memory.mapped_view(table, "cuda")
    ids = torch.tensor([3, 999, 0], device="cuda")
    assert view.is_cuda and view[ids].cpu().tolist() == table[ids.cpu()].tolist()
    view[ids] = -1.0
    torch.cuda.synchronize()
    assert table[[3, 999, 0]].eq(-1).all() and table[1].tolist() == [4.0, 5.0, 6.0, 7.0]


def test_a_table_past_draw_rows_is_drawn_piece_by_piece_into_the_layouts_order(monkeypatch):
    """Each row holds the draw of its user's row in a piecewise draw of the user's order: the same as
    drawing the pieces, concatenating and permuting, which a table of DRAW_ROWS rows or fewer does."""
    from alac.models import zoo_model
    from alac.runtime import state

    model = zoo_model("fm", k=3, init_std=0.5)
    new_to_old = torch.randperm(1000, generator=torch.Generator().manual_seed(2))
    whole = state.ModelState.initial(model, new_to_old, "cpu", seed=5)
    monkeypatch.setattr(state, "DRAW_ROWS", 64)
    pieces = state.ModelState.initial(model, new_to_old, "cpu", seed=5)
    generator = torch.Generator().manual_seed(5)
    for name, param in model.declarations()[0].items():
        drawn = torch.cat([state._initial_values(param.init, (min(64, 1000 - s), *((param.size,) if param.size > 1
                                                                                  else ())), generator)
                           for s in range(0, 1000, 64)])
        torch.testing.assert_close(pieces.params[name], drawn[new_to_old])
        assert pieces.params[name].shape == whole.params[name].shape
