"""Dense tables of the declared feature space are checked against free memory before they exist."""

import pytest
import torch

from alac.data import load_libsvm, parse_bytes
from alac.errors import DataError
from alac.runtime.device import memory
from alac.runtime.movement.layout import LayoutOptions, build_layout


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
    """A table over DRAW_ROWS rows: row i holds the counter-based draw of its user's row new_to_old[i],
    whatever the piece size, on the CPU and on a GPU alike, with the initializer's mean and spread."""
    from alac.dsl import Model, Normal, Param, Uniform
    from alac.models import zoo_model
    from alac.runtime.execution import state

    class Wide(Model):
        def __init__(self):
            self.w = Param(init=Uniform(-0.2, 0.6))
            self.v = Param(size=3, init=Normal(0.5, 1.0))

        def aggregate(self, x, p):
            return {"wx": x * p.w}

        def loss(self, a, g, y):
            return (a.wx - y) ** 2

    n = 20_000
    new_to_old = torch.randperm(n, generator=torch.Generator().manual_seed(2))
    monkeypatch.setattr(state, "DRAW_ROWS", 64)
    tables = []
    for piece_values in (96, 4099):
        monkeypatch.setattr(state, "DRAW_VALUES", piece_values)
        tables.append(state.ModelState.initial(Wide(), new_to_old, "cpu", seed=5).params)
    for index, (name, width) in enumerate((("w", 1), ("v", 3))):
        whole = state.counter_values(Wide().declarations()[0][name].init, 0, n, width, 5, index, "cpu")
        expected = whole[new_to_old].squeeze(1)
        assert torch.equal(tables[0][name], expected) and torch.equal(tables[1][name], expected)
    assert abs(float(tables[0]["w"].mean()) - 0.2) < 0.01 and abs(float(tables[0]["w"].min()) + 0.2) < 0.001
    assert abs(float(tables[0]["v"].mean()) - 1.0) < 0.02 and abs(float(tables[0]["v"].std()) - 0.5) < 0.02
    # some rows alone (a rank's share of a sharded table) are those rows of the whole, for either generator
    rows = torch.tensor([19_999, 3, 7_000, 0])
    for draw_rows in (64, n):
        monkeypatch.setattr(state, "DRAW_ROWS", draw_rows)
        whole = state.ModelState.initial(zoo_model("fm", k=3), new_to_old, "cpu", seed=5)
        part = state.ModelState.initial(zoo_model("fm", k=3), new_to_old, "cpu", seed=5, rows=rows)
        for name in whole.params:
            assert torch.equal(part.params[name], whole.params[name][rows])
    # the two params draw from different counters
    assert float(torch.corrcoef(torch.stack([tables[0]["w"], tables[0]["v"][:, 0]]))[0, 1]) < 0.05
    if torch.cuda.is_available():
        on_gpu = state.ModelState.initial(zoo_model("fm", k=3), new_to_old, "cuda", seed=5).params
        on_cpu = state.ModelState.initial(zoo_model("fm", k=3), new_to_old, "cpu", seed=5).params
        for name in on_cpu:
            torch.testing.assert_close(on_gpu[name].cpu(), on_cpu[name], rtol=1e-6, atol=1e-7)


