"""benchmarks/async_floor.py: each flat traffic kernel makes the accesses it names (gathers, atomic
additions into the params or a program's copy of the hot sums, stores), against torch on the same
edges."""

import dataclasses

import pytest
import torch

from benchmarks.async_floor import TRAFFIC, edges_per_program, run_traffic

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
N_FEATURES, HOT_SIZE, COPIES = 50, 8, 3


@pytest.mark.parametrize("factor", [1, 16])
@pytest.mark.parametrize("traffic", TRAFFIC, ids=lambda t: t.name)
def test_flat_traffic_makes_the_accesses_it_names(traffic, factor):
    traffic = dataclasses.replace(traffic, factor=factor)
    generator = torch.Generator().manual_seed(factor)
    # on the GPU one program: concurrent programs' gathers may see each other's updates, which the
    # sequential reference does not model
    block = edges_per_program(factor)
    n_edges = 2 * block + 7 if DEVICE == "cpu" else block - 7
    feature = torch.randint(-1, N_FEATURES, (n_edges,), generator=generator, dtype=torch.int32)
    params = torch.rand(N_FEATURES * factor, generator=generator)
    before = params.clone()
    params, hot_sums = params.to(DEVICE), torch.zeros(COPIES * HOT_SIZE * factor, device=DEVICE)
    gathered = run_traffic(traffic, feature.to(DEVICE), params, hot_sums, HOT_SIZE, COPIES, scale=0.5).cpu()
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
        value = torch.where(present[:, None], rows[index], 0.0) if traffic.gather else torch.ones(len(index), factor)
        expected_gathered.append(value.sum())
        into_params = {1: present, 2: cold, 4: cold}.get(traffic.update)
        if into_params is not None:
            rows.index_add_(0, index[into_params], value[into_params] * 0.5)
        if traffic.update in (3, 4):
            sums.index_add_(0, (program % COPIES) * HOT_SIZE + index[hot], value[hot])
        if traffic.update == 5:
            rows[index[cold]] = value[cold] * 0.999
    if traffic.gather:
        torch.testing.assert_close(gathered, torch.stack(expected_gathered), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(params.view(N_FEATURES, factor), rows, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(hot_sums.view(-1, factor), sums, rtol=1e-5, atol=1e-5)
