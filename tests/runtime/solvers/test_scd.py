"""alac.runtime.solvers.scd: the solvers reach the optima of independent solvers (the ridge closed form,
scikit-learn), the kernels step as the float64 sequential reference does, and CoCoA's adaptive
aggregation beats averaging. On a GPU the kernels run compiled, their programs concurrently."""

import dataclasses

import pytest
import torch

from alac.errors import OptionError
from alac.runtime.solvers import duality
from alac.runtime.solvers.scd import ScdSolver
from tests.runtime.scd_problems import planted

GPU = torch.cuda.is_available()
KERNELS = "triton" if GPU else "interpret"
L2 = 1e-2


def test_sequential_ridge_reaches_gap_1e_8_in_at_most_30_epochs():
    solver = ScdSolver(planted(), "primal", l2=L2, backend="sequential").fit(max_epochs=30, tol=1e-8)
    assert solver.history[-1]["gap"] <= 1e-8 and len(solver.history) <= 30
    gaps = [h["gap"] for h in solver.history]
    assert gaps[-1] < gaps[0] / 1e4
    # P is L2-strongly convex: the gap bounds the distance to the closed-form optimum
    optimum = duality.ridge_optimum(solver.problem.matrix, solver.problem.labels, L2)
    assert float(((solver.coef_ - optimum) ** 2).sum()) <= 2 * gaps[-1] / L2


CASES = [("primal", "squared", 0.0, L2), ("primal", "squared", 1e-2, 1e-3), ("primal", "squared", 1e-2, 0.0),
         ("primal", "logistic", 0.0, L2), ("primal", "squared_hinge", 0.0, L2),
         *[("dual", loss, 0.0, L2) for loss in duality.LOSSES]]


@pytest.mark.skipif(GPU, reason="programs run concurrently on a GPU; the interpreter runs them in turn")
@pytest.mark.parametrize("binary", [False, True])
@pytest.mark.parametrize("form,loss,l1,l2", CASES)
def test_a_kernel_epoch_in_a_given_order_is_the_sequential_epoch(form, loss, l1, l2, binary):
    data = planted(classes=loss != "squared", binary_values=binary, seed=3)
    solvers = [ScdSolver(data, form, loss, l2=l2, l1=l1, backend=b) for b in ("sequential", "interpret")]
    g = torch.Generator().manual_seed(0)
    for _ in range(3):
        order = torch.randperm(solvers[0].coordinates.numel(), generator=g)
        for solver in solvers:
            solver.epoch(order)
    reference, kernels = solvers
    # float64 steps from the data's float32 values (the logistic coordinate's solved to its tolerance, not
    # to a fixed number of Newton steps)
    torch.testing.assert_close(kernels.coordinates, reference.coordinates, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(kernels.shared, reference.shared, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("x,y,u,q", [(-0.0284026, -1.0, 23.7938598, 27.6205226),
                                     (1.5704149e-08, 1.0, -15.3044387, 18.8397390)])
def test_the_dual_logistic_kernel_takes_the_exact_coordinate_step_where_newton_bounces(x, y, u, q):
    """Inputs where 20 fixed Newton steps ended 0.78 and 0.72 away from the coordinate's minimizer (a
    search of 200,000 random ones): the kernel's step is scd_sequential's exact one, whatever v."""
    from alac.data.dataset import SparseDataset
    from alac.runtime.solvers.scd_sequential import _logistic_step

    # two rows of one entry each (feature 0, value 1): row 0 steps, with ||a||^2 / (lambda N) = q
    data = SparseDataset(torch.tensor([0, 1, 2]), torch.tensor([0, 0], dtype=torch.int32), None,
                         torch.tensor([1.0 if y > 0 else 0.0, 1.0]), 1)
    solver = ScdSolver(data, "dual", "logistic", l2=1 / (2 * q), backend=KERNELS)
    solver.coordinates[0] = x
    solver.shared[0] = u / q              # u = v . a / (lambda N)
    solver.epoch(torch.tensor([0], device=solver.device))
    # (to the float32 scalars lambda N and ||a||^2 the kernel takes)
    assert float(solver.coordinates[0]) == pytest.approx(x + _logistic_step(x, y, u, q), abs=1e-6)


def _sklearn_coef(form, loss, l1, l2, data):
    from sklearn.linear_model import ElasticNet, Lasso, LogisticRegression, Ridge
    from sklearn.svm import LinearSVC

    dense = torch.sparse_csr_tensor(data.indptr, data.indices.long(), data.values, (data.n_rows, data.n_features))
    X, n = dense.to_dense().double().numpy(), data.n_rows
    y = data.labels.double().numpy() if loss == "squared" else 2 * data.labels.double().numpy() - 1
    exact = {"fit_intercept": False, "tol": 1e-12, "max_iter": 200_000}
    if loss == "squared" and l1 == 0:
        model = Ridge(alpha=l2 * n, fit_intercept=False)
    elif loss == "squared":
        model = Lasso(alpha=l1, **exact) if l2 == 0 else ElasticNet(alpha=l1 + l2, l1_ratio=l1 / (l1 + l2), **exact)
    elif loss == "logistic":
        model = LogisticRegression(C=1 / (l2 * n), **exact)
    else:
        model = LinearSVC(C=1 / (l2 * n), loss=loss, dual=True, random_state=0, **exact)
    return torch.from_numpy(model.fit(X, y).coef_.reshape(-1))


@pytest.mark.filterwarnings("ignore:Liblinear failed to converge")
@pytest.mark.parametrize("form,loss,l1,l2", CASES)
def test_the_solvers_reach_scikit_learns_solutions(form, loss, l1, l2):
    pytest.importorskip("sklearn")
    data = planted(classes=loss != "squared", seed=5)
    solver = ScdSolver(data, form, loss, l2=l2, l1=l1).fit(max_epochs=400, tol=1e-10 if not GPU else 1e-8)
    expected = _sklearn_coef(form, loss, l1, l2, data)
    # the hinge's dual converges sublinearly: its gap after 400 epochs bounds the weights less tightly
    tolerance = 2e-2 if loss == "hinge" else 2e-3
    assert float((solver.coef_.cpu() - expected).abs().max()) <= tolerance * float(expected.abs().max())


@pytest.mark.parametrize("form", ["primal", "dual"])
def test_adaptive_aggregation_takes_fewer_epochs_than_averaging(form):
    data = planted(n=400, m=100)
    epochs = {}
    for workers in (2, 4, 8):
        for aggregation in ("averaging", "adaptive"):
            solver = ScdSolver(data, form, l2=L2, backend="sequential", workers=workers, aggregation=aggregation)
            solver.fit(max_epochs=400, tol=1e-6)
            assert solver.history[-1]["gap"] <= 1e-6
            epochs[workers, aggregation] = len(solver.history)
            if aggregation == "adaptive":
                assert all(h["gamma"] > 1 / workers for h in solver.history[2:])
        assert epochs[workers, "adaptive"] <= epochs[workers, "averaging"]
    if form == "primal":
        assert epochs[8, "adaptive"] <= 0.6 * epochs[8, "averaging"]


def test_adding_eight_workers_changes_diverges_and_the_fit_stops_there():
    """CoCoA with sigma = 1 and gamma = 1 overshoots K-fold on a dual with correlated rows."""
    solver = ScdSolver(planted(n=400, m=100), "dual", l2=L2, backend="sequential", workers=8, aggregation="adding")
    solver.fit(max_epochs=400, tol=1e-6)
    assert solver.stopped_because == "diverged" and len(solver.history) < 400
    assert ScdSolver(planted(), "primal", l2=L2, backend="sequential").fit(30, 1e-8).stopped_because == "tol"


def test_one_virtual_worker_with_adding_is_plain_scd():
    data = planted()
    plain = ScdSolver(data, "primal", l2=L2, backend="sequential", seed=3).fit(5, 0)
    one = ScdSolver(data, "primal", l2=L2, backend="sequential", seed=3, workers=1, aggregation="adding").fit(5, 0)
    torch.testing.assert_close(one.coordinates, plain.coordinates)


@pytest.mark.skipif(not GPU, reason="needs a CUDA GPU")
def test_on_a_gpu_the_kernels_converge_as_fast_as_sequential_scd_and_keep_the_shared_vector():
    """20,000 x 20,000 sparse unit rows (benchmarks/scd.py's webspam shape, small): hundreds of
    coordinates in flight, and still at most twice the sequential solver's epochs."""
    from benchmarks.scd import webspam_like

    data = webspam_like(20_000, 20_000, 20, 0.5, seed=0)
    classes = dataclasses.replace(data, labels=(data.labels > data.labels.median()).float())
    for form, loss in (("primal", "squared"), ("dual", "squared"), ("dual", "logistic"), ("primal", "logistic")):
        problem = data if loss == "squared" else classes
        # lambda 1e-5: 9 to 19 sequential epochs to 1e-7
        sequential = ScdSolver(problem, form, loss, l2=1e-5, backend="sequential").fit(200, 1e-7)
        gpu = ScdSolver(problem, form, loss, l2=1e-5, backend="triton").fit(400, 1e-7)
        assert gpu.history[-1]["gap"] <= 1e-7
        assert len(gpu.history) <= 2 * len(sequential.history)
        assert gpu.drift() <= 1e-5


@pytest.mark.skipif(not GPU, reason="needs a CUDA GPU")
def test_the_sequential_solvers_gaps_computed_on_a_gpu_are_its_gaps():
    data = planted(n=400, m=100)
    here = ScdSolver(data, "dual", l2=L2, backend="sequential", device="cpu").fit(5, 0)
    there = ScdSolver(data, "dual", l2=L2, backend="sequential", device="cpu", evaluate_on="cuda").fit(5, 0)
    for mine, theirs in zip(here.history, there.history):
        assert theirs["gap"] == pytest.approx(mine["gap"], rel=1e-9, abs=1e-15)
    torch.testing.assert_close(there.coef_.cpu(), here.coef_)


@pytest.mark.skipif(not GPU, reason="needs a CUDA GPU")
def test_on_a_gpu_the_wild_control_loses_updates():
    """Few shared rows under many columns: concurrent programs add into the same rows, and the plain
    read-modify-write loses what the atomics keep."""
    data = planted(n=64, m=20_000, density=0.5)
    atomic = ScdSolver(data, "primal", l2=L2, backend="triton", in_flight=256).fit(30, 0)
    wild = ScdSolver(data, "primal", l2=L2, backend="triton", wild=True, in_flight=256).fit(30, 0)
    # each of the 64 rows takes some 300,000 float64 atomic additions: their drift is rounding alone
    assert atomic.drift() <= 1e-9 and wild.drift() >= 1e-2
    assert wild.history[-1]["gap"] > 1e-6


@pytest.mark.parametrize("options,message", [
    ({"form": "dual", "l2": 0.0}, "the dual l2 > 0"),
    ({"form": "dual", "l1": 1e-3}, "the dual l2 > 0 without l1"),
    ({"form": "primal", "loss": "hinge"}, "the primal solves one of squared, squared_hinge, logistic"),
    ({"form": "primal", "loss": "logistic", "l1": 1e-3}, "the primal too, but for its squared loss"),
    ({"workers": 4, "l1": 1e-3, "aggregation": "adaptive"}, "adaptive aggregation searches the squared loss"),
    ({"aggregation": "median", "workers": 2}, "aggregation is one of"),
    ({"backend": "sequential", "wild": True}, "the wild control is a kernel variant"),
    ({"backend": "triton", "device": "cpu"}, "runs on a GPU"),
])
def test_bad_options_are_refused_before_any_work(options, message):
    with pytest.raises(OptionError, match=message):
        ScdSolver(planted(), **options)


def test_labels_of_more_than_two_classes_are_refused_for_a_classification_loss():
    data = planted()
    with pytest.raises(OptionError, match="two classes"):
        ScdSolver(data, "dual", "hinge", l2=L2)


def test_tiles_fit_the_coordinates_and_programs_are_bounded_by_the_problem():
    from alac.runtime.solvers.scd_launcher import COORDINATES_PER_PROGRAM, MAX_BLOCK, programs, tile_shape

    assert tile_shape(3) == (16, 1)              # a few entries: the smallest tile
    assert tile_shape(32) == (32, 1)             # Criteo-shaped rows: a tile a row, one warp
    assert tile_shape(1e6) == (MAX_BLOCK, 8)     # long columns: looped in 1,024-entry tiles of 8 warps
    assert programs(10**6, 10**7, 10, 1e-6, "cpu", interpret=True) == 1
    if GPU:
        assert programs(30, 300, 10, 1e-6, "cuda", interpret=False) == 1          # a small problem steps in sequence
        assert programs(64 * COORDINATES_PER_PROGRAM, 10**9, 10, 1e-6, "cuda", interpret=False) == 64
        assert programs(10**6, 10**8, 10**6, 1e-6, "cuda", interpret=False) == 20  # one long coordinate
        assert programs(10**6, 10**8, 10, 0.05, "cuda", interpret=False) == 7     # rows sharing much


@pytest.mark.skipif(not GPU, reason="needs a CUDA GPU")
def test_a_head_of_long_columns_is_launched_apart_with_wide_tiles():
    from alac.runtime.solvers.scd_launcher import bands
    from benchmarks.scd import webspam_like

    solver = ScdSolver(webspam_like(20_000, 200_000, 50, 1.0, seed=0), "primal", l2=1e-4, backend="triton")
    long, short = solver.bands
    lengths = solver.axis.start[1:] - solver.axis.start[:-1]
    assert int(lengths[long.members].min()) > int(lengths[short.members].max())
    assert long.block > short.block and long.in_flight < short.in_flight
    assert len(bands(solver.axis, interpret=True)) == 1


def test_an_epoch_that_overshoots_is_undone_and_halves_the_coordinates_in_flight():
    """Steps divided by a hundredth of their curvature overshoot as too many coordinates in flight
    do: the solver undoes that epoch and goes on with half as many, from the same point."""
    data = planted()
    solver = ScdSolver(data, "primal", l2=L2, backend=KERNELS)
    solver.bands[0].in_flight = 2
    solver.curvature = solver.axis.norm / 100
    solver.fit(max_epochs=8, tol=0)
    first = solver.history[0]
    assert first["undone"] and first["in_flight"] == 1 and not any(h["undone"] for h in solver.history[1:])
    reference = ScdSolver(data, "primal", l2=L2, backend="sequential").fit(7, 0)
    assert solver.history[-1]["gap"] == pytest.approx(reference.history[-1]["gap"], rel=0.5)
    assert solver.history[-1]["gap"] < first["gap"] / 100


def test_the_overlap_of_coordinates_in_flight_is_the_expected_separable_over_approximation():
    """A = [[1, 1], [1, 0], [0, 2]] by hand: row 0 is shared by both columns, columns 0 and 1 by two
    rows each. Primal (columns): extra curvature per column 1 and 1 over ||a||^2 = 2 and 5; dual
    (rows): 2, 1 and 4 over 2, 1 and 4. The coupling credits the regularizer's curvature: N l2 for
    the primal, lambda N for the squared loss's dual, none for the hinge's."""
    from alac.data.dataset import SparseDataset
    from alac.runtime.solvers.scd import Overlap

    data = SparseDataset(torch.tensor([0, 2, 3, 4]), torch.tensor([0, 1, 0, 1], dtype=torch.int32),
                         torch.tensor([1.0, 1.0, 1.0, 2.0]), torch.tensor([1.0, 0.0, 1.0]), 2)
    primal = ScdSolver(data, "primal", l2=0.5, backend="sequential")
    torch.testing.assert_close(Overlap(primal.axis, 3).curvature(2), torch.tensor([3.0, 6.0], dtype=torch.float64))
    assert primal.coupling == pytest.approx(2 / (7 + 2 * 3 * 0.5))
    dual = ScdSolver(data, "dual", l2=0.5, backend="sequential")
    torch.testing.assert_close(Overlap(dual.axis, 2).curvature(3), torch.tensor([4.0, 2.0, 8.0], dtype=torch.float64))
    assert dual.coupling == pytest.approx(7 / (2 * (7 + 3 * 0.5 * 3)))
    assert ScdSolver(data, "dual", "hinge", l2=0.5, backend="sequential").coupling == pytest.approx(7 / (2 * 7))


@pytest.mark.parametrize("loss", ["squared", "logistic"])
@pytest.mark.parametrize("binary", [False, True])
def test_columns_split_over_programs_step_as_the_sequential_solver_does(loss, binary, monkeypatch):
    """Columns longer than SPLIT_ENTRIES (here the median column's) step one at a time over several
    programs (alac.codegen.scd_split_kernels), before the others (one in flight): the epoch in a
    given order is the sequential solver's in the order the bands launch them."""
    from alac.runtime.solvers import scd_launcher

    data = planted(classes=loss != "squared", binary_values=binary, seed=4)
    lengths = torch.bincount(data.indices.long(), minlength=data.n_features)
    monkeypatch.setattr(scd_launcher, "SPLIT_ENTRIES", int(lengths.median()))
    monkeypatch.setattr(scd_launcher, "MAX_BLOCK", 16)     # tiles of 16: each split column's over all 3 programs
    kernels = ScdSolver(data, "primal", loss, l2=L2, backend=KERNELS, in_flight=1)
    split = kernels.bands[0].members.cpu()
    assert kernels.bands[0].split and 0 < int(split.sum()) < split.numel()
    assert int(lengths[split].min()) > 2 * kernels.bands[0].block
    reference = ScdSolver(data, "primal", loss, l2=L2, backend="sequential")
    g = torch.Generator().manual_seed(0)
    for _ in range(3):
        order = torch.randperm(split.numel(), generator=g)
        kernels.epoch(order.to(kernels.device))
        # the bands' launches in turn, each in the permutation's order
        reference.epoch(torch.cat([order if band.members is None else order[band.members.cpu()[order]]
                                   for band in kernels.bands]))
    torch.testing.assert_close(kernels.coordinates.cpu(), reference.coordinates, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(kernels.shared.cpu(), reference.shared, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("form", ["primal", "dual"])
def test_rows_naming_a_column_twice_solve_the_ridge_of_their_summed_entries(form):
    """Rows of a Criteo-shaped draw name their power-law columns many times; SDCA stepped with the
    curvature of the entries as listed (7 for a one named 7 times, not 49) and diverged. The ridge
    optimum of the summed matrix, in closed form, is the reference."""
    data = planted(n=200, m=20, seed=3, classes=False)
    doubled = torch.repeat_interleave(torch.arange(data.n_rows), data.indptr.diff())
    # every row's first entry 6 times more at its end
    firsts = data.indptr[:-1].repeat(6)
    rows = torch.cat([doubled, torch.arange(data.n_rows).repeat(6)])
    columns = torch.cat([data.indices, data.indices[firsts]])
    values = torch.cat([data.values, data.values[firsts]]) if data.values is not None else None
    order = torch.argsort(rows, stable=True)
    twice = dataclasses.replace(data, indptr=torch.cat([torch.zeros(1, dtype=torch.int64),
                                                        torch.bincount(rows, minlength=data.n_rows).cumsum(0)]),
                                indices=columns[order].int(), values=None if values is None else values[order])
    dense = torch.zeros(data.n_rows, data.n_features, dtype=torch.float64)
    dense.index_put_((rows[order], columns[order].long()),
                     torch.ones(rows.numel(), dtype=torch.float64) if values is None else values[order].double(),
                     accumulate=True)
    l2 = 0.01
    y = data.labels.double()
    expected = torch.linalg.solve(dense.t() @ dense + l2 * data.n_rows * torch.eye(data.n_features), dense.t() @ y)
    solver = ScdSolver(twice, form, "squared", l2=l2, backend="sequential").fit(max_epochs=2000, tol=1e-10)
    assert solver.stopped_because != "max_epochs"
    torch.testing.assert_close(solver.coef_.double().cpu(), expected, rtol=1e-4, atol=1e-5)
