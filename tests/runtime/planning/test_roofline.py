"""The roofline of an epoch: the arrays it reads and changes at every edge against the models'
declarations, its edge counts against the data set's own feature counts, each flat traffic kernel's
accesses against torch's on the same edges, and a sync epoch's grid barriers."""

import pytest
import torch

from alac.data.synthetic import criteo_like
from alac.ir.pipeline import lower
from alac.models import zoo_model
from alac.plan import Plan
from alac.runtime.movement.layout import LayoutOptions, build_layout
from alac.runtime.planning.roofline import (
    ATOMIC_ALL,
    ATOMIC_COLD,
    ATOMIC_HOT,
    ATOMIC_SPLIT,
    STORE_COLD,
    EpochAccesses,
    edges_per_program,
    epoch_accesses,
    only_barriers,
    plan_roofline,
    row_arrays,
    run_traffic,
    run_traffic_together,
)

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
N_FEATURES, HOT_SIZE, COPIES = 50, 8, 3


def random_edges(block, generator):
    """Ids in [-1, N) for programs of `block` edges. On the GPU, one program whose cold ids are each
    there once: concurrent programs, and the warps of one, may gather a row after another edge's
    addition to it, which the sequential reference (each program gathers, then adds) does not model."""
    if DEVICE == "cpu":
        return torch.randint(-1, N_FEATURES, (2 * block + 7,), generator=generator, dtype=torch.int32)
    feature = torch.randint(-1, N_FEATURES, (block - 7,), generator=generator, dtype=torch.int32)
    seen = set()
    for slot, value in enumerate(feature.tolist()):
        if value >= HOT_SIZE and value in seen:
            feature[slot] = -1
        seen.add(value)
    return feature


def test_the_arrays_read_at_every_edge_are_the_stored_params_and_their_state():
    assert row_arrays(lower(zoo_model("lr"))) == (("w", 1),)
    # AdaGrad keeps one accumulator per row of a vector param
    assert row_arrays(lower(zoo_model("fm", k=4), "adagrad")) == (
        ("w", 1), ("v", 4), ("w_accumulator", 1), ("v_accumulator", 1))
    # FTRL derives w from its state (zero at the start): only z and n are stored for it
    assert row_arrays(lower(zoo_model("lr"), "ftrl")) == (("w_z", 1), ("w_n", 1))


def test_an_epochs_edges_and_bytes_are_the_data_sets():
    data = criteo_like(3000, n_fields=5, seed=3, device="cpu")
    hot = 20
    layout = build_layout(data, LayoutOptions(chunk_size=16), device="cpu")
    accesses = epoch_accesses(lower(zoo_model("fm", k=8)), layout, hot)
    frequency = torch.bincount(data.indices.long(), minlength=data.n_features)
    assert accesses.edges == data.nnz
    # the layout numbers features by falling frequency: the hot edges are the H most frequent's
    assert accesses.hot_edges == int(frequency.sort(descending=True).values[:hot].sum())
    assert accesses.floats_per_edge == 9 and accesses.row_bytes == 4 * 9 * data.nnz
    # one-hot data: each edge slot's id, each row slot's label
    assert accesses.streamed_bytes >= 4 * data.nnz + 4 * data.n_rows


def test_the_line_gives_the_bytes_and_the_kernels_fraction_of_the_floor():
    accesses = EpochAccesses(edges=1_000_000, hot_edges=250_000, arrays=(("w", 1), ("v", 16)),
                             streamed_bytes=8_000_000)
    assert accesses.line() == ("roofline: 1,000,000 edges an epoch (25 % hot), each reading and changing 17 floats "
                               "(w 1, v 16): 0.068 GB gathered and as many added, 0.008 GB of layout streamed")
    assert accesses.line(2.0, 5.0).endswith("; floor (one flat pass of these accesses, or their bytes at copy "
                                            "bandwidth) 2.00 ms; the kernel's 5.00 ms is 2.50x the floor")


@pytest.mark.parametrize("factor", [1, 16])
@pytest.mark.parametrize("gather", [True, False])
@pytest.mark.parametrize("update", range(6))
def test_the_flat_kernel_makes_the_accesses_it_names(update, gather, factor):
    """Gathers, atomic additions into the params or a program's copy of the hot sums, or stores,
    against torch on the same edges."""
    generator = torch.Generator().manual_seed(factor)
    block = edges_per_program(factor)
    feature = random_edges(block, generator)
    n_edges = len(feature)
    params = torch.rand(N_FEATURES * factor, generator=generator)
    before = params.clone()
    params, hot_sums = params.to(DEVICE), torch.zeros(COPIES * HOT_SIZE * factor, device=DEVICE)
    gathered = run_traffic(feature.to(DEVICE), params, hot_sums, HOT_SIZE, COPIES, factor, gather, update,
                           scale=0.5).cpu()
    params, hot_sums = params.cpu(), hot_sums.cpu()
    # reference: the programs one after another (as the interpreter runs them), each gathering
    # before it updates
    rows = before.view(N_FEATURES, factor).clone()
    sums = torch.zeros(COPIES * HOT_SIZE, factor)
    expected_gathered = []
    for program, start in enumerate(range(0, n_edges, block)):
        index = feature[start:start + block].long()
        present = index >= 0
        index = index.clamp_min(0)
        hot = present & (index < HOT_SIZE)
        cold = present & ~hot
        value = torch.where(present[:, None], rows[index], 0.0) if gather else torch.ones(len(index), factor)
        expected_gathered.append(value.sum())
        into_params = {ATOMIC_ALL: present, ATOMIC_COLD: cold, ATOMIC_SPLIT: cold}.get(update)
        if into_params is not None:
            rows.index_add_(0, index[into_params], value[into_params] * 0.5)
        if update in (ATOMIC_HOT, ATOMIC_SPLIT):
            sums.index_add_(0, (program % COPIES) * HOT_SIZE + index[hot], value[hot])
        if update == STORE_COLD:
            rows[index[cold]] = value[cold] * 0.999
    if gather:
        torch.testing.assert_close(gathered, torch.stack(expected_gathered), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(params.view(N_FEATURES, factor), rows, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(hot_sums.view(-1, factor), sums, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("widths", [(1, 16, 1, 1), (4, 2), (8,)])
def test_the_single_pass_makes_every_arrays_accesses_of_an_edge_together(widths):
    """Each array's rows gathered, cold edges' changes added to it, hot edges' into the program's copy
    of its hot sums, in one launch: against torch on the same edges, array by array."""
    generator = torch.Generator().manual_seed(len(widths))
    block = edges_per_program(max(widths))
    feature = random_edges(block, generator)
    n_edges = len(feature)
    before = [torch.rand(N_FEATURES * width, generator=generator) for width in widths]
    tables = [table.clone().to(DEVICE) for table in before]
    hot_sums = [torch.zeros(COPIES * HOT_SIZE * width, device=DEVICE) for width in widths]
    gathered = run_traffic_together(feature.to(DEVICE), tables, list(widths), hot_sums, HOT_SIZE, COPIES,
                                    scale=0.5).cpu()
    expected_gathered = torch.zeros(len(gathered))
    for table, start_values, sums_out, width in zip(tables, before, hot_sums, widths):
        rows = start_values.view(N_FEATURES, width).clone()
        sums = torch.zeros(COPIES * HOT_SIZE, width)
        for program, start in enumerate(range(0, n_edges, block)):
            index = feature[start:start + block].long()
            present = index >= 0
            index = index.clamp_min(0)
            hot, cold = present & (index < HOT_SIZE), present & (index >= HOT_SIZE)
            value = torch.where(present[:, None], rows[index], 0.0)
            expected_gathered[program] += value.sum()
            rows.index_add_(0, index[cold], value[cold] * 0.5)
            sums.index_add_(0, (program % COPIES) * HOT_SIZE + index[hot], value[hot])
        torch.testing.assert_close(table.cpu().view(N_FEATURES, width), rows, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(sums_out.cpu().view(-1, width), sums, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(gathered, expected_gathered, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="1 to 4 arrays"):
        run_traffic_together(feature.to(DEVICE), tables * 5, list(widths) * 5, hot_sums * 5, HOT_SIZE, COPIES)


def test_a_sync_epoch_with_edge_updates_meets_two_barriers_a_batch():
    """Its accesses are the async epoch's, plus two grid barriers per batch; a sync plan that updates
    each touched feature once (AdaGrad) has no roofline here."""
    data = criteo_like(3000, n_fields=5, seed=3, device="cpu")
    layout = build_layout(data, LayoutOptions(chunk_size=16), device=DEVICE)
    plan = Plan(batch_size=128, chunk_size=16)
    ir = lower(zoo_model("fm", k=8), "sgd")
    accesses, floor = plan_roofline(ir, plan, layout)
    batches = -(-layout.n_chunks // 8)
    assert accesses == EpochAccesses(**{**epoch_accesses(ir, layout, 0).__dict__, "barriers": 2 * batches})
    assert f"{2 * batches:,} grid barriers" in accesses.line()
    assert (floor is not None and floor > 0) == (DEVICE == "cuda")
    assert plan_roofline(lower(zoo_model("fm", k=8), "adagrad"), plan, layout) == (None, None)
    assert plan_roofline(ir, Plan(batch_size=128, chunk_size=16, grid_barrier=False), layout) == (None, None)


def test_the_barrier_kernel_counts_every_programs_arrival_at_every_barrier():
    # under the interpreter one program (several would wait for each other forever)
    programs = 4 if DEVICE == "cuda" else 1
    arrivals = torch.zeros(1, dtype=torch.int32, device=DEVICE)
    only_barriers[(programs,)](arrivals, 7)
    assert int(arrivals) == 7 * programs


def test_a_training_runs_line_gives_its_epoch_against_the_floor_on_a_gpu_only(monkeypatch):
    """`alac train`'s roofline line: the accesses, the floor and the run's epoch against it on a GPU;
    none elsewhere; not measured where the floor's copies of the tables would not fit."""
    from alac.runtime.device import memory
    from alac.runtime.planning.roofline import epoch_line

    data = criteo_like(3000, n_fields=5, seed=3, device="cpu")
    layout = build_layout(data, LayoutOptions(chunk_size=16), device=DEVICE)
    ir, plan = lower(zoo_model("fm", k=8), "sgd"), Plan(batch_size=128, chunk_size=16, semantics="async")
    line = epoch_line(ir, plan, layout, 5.0)
    if DEVICE == "cpu":
        assert line is None
        return
    assert line.startswith("roofline: ") and "floor (one flat pass of these accesses" in line
    assert "the kernel's 5.00 ms is " in line
    monkeypatch.setattr(memory, "available_bytes", lambda device: 0)
    assert epoch_line(ir, plan, layout, 5.0).startswith("roofline: not measured (its flat pass would need")
