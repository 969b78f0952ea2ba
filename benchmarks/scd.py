"""Stochastic coordinate descent (alac.runtime.solvers.scd) against the sequential solver, scikit-learn's
Ridge and Snap ML, side by side in one process: time to a duality gap.

    PYTHONPATH=. python benchmarks/scd.py --out $OUT        # GPU: the webspam-shaped set, real data, workers
    PYTHONPATH=. python benchmarks/scd.py --device cpu --rows 3000 --columns 5000 --nnz-per-row 20 --epochs 5

The webspam-shaped set: `--rows` x `--columns` (webspam trigrams: 262,938 x 680,715) with
`--nnz-per-row` entries a row (webspam has ~3,700; fewer keep the sequential solver's epochs short),
their columns drawn from a power law (Zipf `--zipf` over the columns), uniform values, every row scaled
to unit L2 norm, labels from a planted sparse model plus noise. Ridge (the primal: P(beta) =
1/(2N) ||A beta - y||^2 + lambda/2 ||beta||^2) at each `--lambdas`; arms:

- alac: the SCD kernels on the GPU (atomic), and wild (a negative control);
- sequential: alac's float64 reference solver on the CPU (numba), the same permutations' algorithm;
- sklearn_ridge: scikit-learn's Ridge(alpha = lambda N) by its sparse solvers, each tol one fit;
- snapml_primal / snapml_dual: Snap ML's LinearRegression(regularizer = lambda N, use_gpu) on the
  GPU, each max_iter one fit (when snapml imports; its wheel travels to the GPU machine). Its library
  sets the process's flush-to-zero flag; the gaps compared are far above the subnormal range.

Every arm's `gap` after each epoch (or fit), `seconds` of training, and `time_to_gap` for 1e-3 ...
1e-8 (None where not reached). An alac arm's seconds are its solver's setup (the data from host
memory onto the device, `setup_seconds`) and its epochs, their kernels compiled beforehand by a
discarded one-epoch solver; the gap evaluations are not counted. Snap ML's are whole fits (its
data onto the GPU included), after one untimed fit. The real-data part: dual logistic and hinge on
a9a and w8a (test AUC against the data README's optimum) and ridge on 20news (lambda = 0.1 / N,
rows L2-normalized) to gap 1e-6, at most 1,000 epochs. The
workers part: CoCoA's virtual workers K = 2, 4, 8: averaging, the adaptive gamma and the plane search, on a
webspam-shaped set of 1/32 the size. The criteo part (`--parts criteo`, in a call of its own: 6.4 billion
entries): Criteo-shaped binary problems (`--criteo-rows` x `--criteo-columns`, 25-39 entries a row;
`--criteo-problems`, by default TPA-SCD's dual ridge at lambda 1e-3) to gap 1e-6, each epoch against
the bytes it must read and against flat kernels of its accesses (benchmarks/scd_floor.py). Writes
results/scd.json and .md.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from alac import metrics
from alac.data.dataset import SparseDataset
from alac.runtime.solvers import duality
from alac.runtime.solvers.scd import ScdSolver, with_constant_feature
from benchmarks.report import environment, write
from benchmarks.scd_tables import GAPS, scd_table

SHARED_DATA = Path(os.environ.get("ALAC_SHARED_DATA", Path(__file__).resolve().parents[2] / "shared" / "data"))


def webspam_like(rows, columns, nnz_per_row, zipf, seed):
    """A SparseDataset (CPU) of the shape the module docstring describes."""
    g = torch.Generator().manual_seed(seed)
    weights = 1.0 / torch.arange(1, columns + 1, dtype=torch.float64) ** zipf
    cols = torch.multinomial(weights, rows * nnz_per_row, replacement=True, generator=g)
    # the popular columns spread over the id range, as a hashed feature space's are
    cols = torch.randperm(columns, generator=g)[cols]
    row_ids = torch.arange(rows).repeat_interleave(nnz_per_row)
    matrix = torch.sparse_coo_tensor(torch.stack([row_ids, cols]), torch.rand(cols.numel(), generator=g),
                                     (rows, columns)).coalesce().to_sparse_csr()
    data = SparseDataset(matrix.crow_indices(), matrix.col_indices().int(), matrix.values(), torch.zeros(rows),
                         columns).normalize_rows()
    planted = torch.randn(columns, generator=g) * (torch.rand(columns, generator=g) < 0.1)
    unit = torch.sparse_csr_tensor(data.indptr, data.indices.long(), data.values, (rows, columns))
    data.labels = (unit @ planted + 0.1 * torch.randn(rows, generator=g)).float()
    return data


# rows of the Criteo-shaped dual set drawn per block by a generator of the block's own: any range of
# rows is made alone (each rank its share) and equals those rows of the whole set
DUAL_BLOCK_ROWS = 1 << 22


def criteo_dual_like(rows, columns, min_nnz, max_nnz, seed, device, first_row=0, block_rows=DUAL_BLOCK_ROWS):
    """Rows [first_row, first_row + rows) of a binary SparseDataset on `device`: rows of
    min_nnz..max_nnz entries (uniform), ids power-law (floor(columns ** u) - 1, u uniform: id j about
    as likely as 1 / j) scrambled over the id range by a multiplicative hash, 0/1 labels from a
    planted logistic model (weights N(0, 0.3^2) on the ids, the same for any range). Each block of
    block_rows rows is drawn by its own generator, so that billions of entries need no temporaries
    of their size and each rank can make only its rows."""
    from alac.runtime.solvers.compressed import CompressedAxis, CompressedMatrix

    blocks = range(first_row // block_rows, -(-(first_row + rows) // block_rows))

    def drawn(block):
        """(the block's generator after its lengths, its lengths, the range's rows of them)."""
        g = torch.Generator(device=device).manual_seed(seed * 1_000_003 + block)
        start = block * block_rows
        lengths = torch.randint(min_nnz, max_nnz + 1, (block_rows,), generator=g, device=device)
        keep = slice(max(first_row - start, 0), min(first_row + rows - start, block_rows))
        return g, lengths, keep

    indptr = torch.zeros(rows + 1, dtype=torch.int64, device=device)
    row = 0
    for block in blocks:
        _, lengths, keep = drawn(block)
        count = keep.stop - keep.start
        indptr[row + 1:row + count + 1] = lengths[keep].cumsum(0) + indptr[row]
        row += count
    indices = torch.empty(int(indptr[-1]), dtype=torch.int32, device=device)
    noise = torch.empty(rows, dtype=torch.float64, device=device)
    row = 0
    for block in blocks:
        g, lengths, keep = drawn(block)
        u = torch.rand(int(lengths.sum()), generator=g, device=device, dtype=torch.float64)
        ids = ((torch.floor(float(columns) ** u).long() - 1) * 2654435761) % columns
        offsets = lengths.cumsum(0) - lengths
        count = keep.stop - keep.start
        first = int(offsets[keep.start])
        entries = int(indptr[row + count] - indptr[row])
        indices[int(indptr[row]):int(indptr[row]) + entries] = ids[first:first + entries].int()
        noise[row:row + count] = torch.rand(block_rows, generator=g, device=device, dtype=torch.float64)[keep]
        row += count
    data = SparseDataset(indptr, indices, None, torch.zeros(rows, device=device), columns)
    weights = 0.3 * torch.randn(columns, generator=torch.Generator(device=device).manual_seed(seed), device=device)
    margins = CompressedMatrix(CompressedAxis.of(indptr, indices, None, torch.float32, device), "rows",
                               (rows, columns)) @ weights
    noise = noise.clamp(1e-12, 1 - 1e-12)
    data.labels = (margins + torch.log(noise / (1 - noise)) > 0).float()
    return data


DRIFT_EPOCHS = 30


def time_to_gap(points):
    """{threshold: the fewest seconds of a (seconds, gap) point at or below it, or None}."""
    return {f"{t:g}": min((s for s, g in points if g <= t), default=None) for t in GAPS}


def scd_arm(name, data, args, test=None, **options):
    """An alac solver's arm: its gap and training seconds after every epoch; with test rows (the
    training set's features and a constant last), their AUC."""
    # compiled first by a discarded solver's epoch (Snap ML's kernels are compiled ahead); the
    # timed solver's setup (the layout onto the device, its bands) counts toward its time to gap
    ScdSolver(data, **options).fit(1, args.tol)
    _synchronize(options.get("device"))
    start = time.perf_counter()
    solver = ScdSolver(data, **options)
    _synchronize(options.get("device"))
    setup = time.perf_counter() - start
    # the shared vector's drift after DRIFT_EPOCHS epochs (the criterion), then on to the end
    solver.fit(min(DRIFT_EPOCHS, args.epochs), args.tol)
    drift_then = solver.drift() if solver.epochs == DRIFT_EPOCHS else None
    if solver.stopped_because == "max_epochs" and args.epochs > DRIFT_EPOCHS:
        solver.fit(args.epochs - DRIFT_EPOCHS, args.tol)
    arm = {"name": name, "epochs": solver.epochs, "seconds": setup + solver.seconds, "setup_seconds": setup,
           "gap": [h["gap"] for h in solver.history],
           "seconds_after_epoch": [setup + h["seconds"] for h in solver.history], "drift": solver.drift(),
           f"drift_after_{DRIFT_EPOCHS}_epochs": drift_then,
           "gamma": [h["gamma"] for h in solver.history], "coupling": solver.coupling,
           "in_flight": [h["in_flight"] for h in solver.history], "undone": sum(h["undone"] for h in solver.history),
           "time_to_gap": time_to_gap([(setup + h["seconds"], h["gap"]) for h in solver.history])}
    if test is not None:
        A = torch.sparse_csr_tensor(test.indptr, test.indices.long(), test.values.double(),
                                    (test.n_rows, test.n_features))
        arm["test_auc"] = metrics.auc(A @ solver.coef_.cpu(), test.labels > 0)
    print(f"  {name}: {solver.epochs} epochs, gap {arm['gap'][-1]:.2e}, {setup:.3f} + {solver.seconds:.3f} s, "
          f"{solver.in_flight} in flight (coupling {solver.coupling:.2g})", flush=True)
    return arm


def _synchronize(device):
    if torch.device(device or "cpu").type == "cuda":
        torch.cuda.synchronize()


def _fits_arm(name, data, l2, fits, warm_up=False):
    """An arm of whole fits (fits: (label, fit returning coef)), each timed and its gap evaluated;
    warm_up: the first fit once more before them, untimed (a GPU library's first call sets up its device)."""
    A = torch.sparse_csr_tensor(data.indptr, data.indices.long(), data.values.double(), (data.n_rows, data.n_features))
    if warm_up:
        fits[0][1]()
    points = []
    for label, fit in fits:
        start = time.perf_counter()
        coef = fit()
        seconds = time.perf_counter() - start
        points.append((seconds, duality.primal_gap(A, data.labels, torch.as_tensor(coef, dtype=torch.float64), l2)))
        print(f"  {name} {label}: gap {points[-1][1]:.2e}, {seconds:.3f} s", flush=True)
    return {"name": name, "epochs": [label for label, _ in fits], "seconds": [s for s, _ in points],
            "gap": [g for _, g in points], "time_to_gap": time_to_gap(points)}


def sklearn_arm(data, l2):
    from sklearn.linear_model import Ridge

    X, y, alpha = data.to_scipy(), data.labels.numpy(), l2 * data.n_rows

    def fit(tol):
        return lambda: Ridge(alpha=alpha, fit_intercept=False, solver="sparse_cg", tol=tol).fit(X, y).coef_
    return _fits_arm("sklearn_ridge", data, l2, [(f"tol {t:g}", fit(t)) for t in (1e-2, 1e-4, 1e-6)])


def snapml_arms(data, l2, device):
    try:
        import snapml
    except ImportError as error:
        return [], f"snapml: {error}"
    X, y = data.to_scipy(), data.labels.numpy()
    arms = []
    for dual in (False, True):
        def fit(iterations, dual=dual):
            return lambda: np.asarray(snapml.LinearRegression(
                max_iter=iterations, regularizer=l2 * data.n_rows, fit_intercept=False, tol=0.0, dual=dual,
                use_gpu=device == "cuda").fit(X, y).coef_).ravel()
        try:
            arms.append(_fits_arm(f"snapml_{'dual' if dual else 'primal'}", data, l2,
                                  [(f"{i} epochs", fit(i)) for i in (1, 2, 4, 8, 16, 32, 64)], warm_up=True))
        except Exception as error:     # a GPU Snap ML cannot use: recorded, the other arms stand
            return arms, f"snapml ({'dual' if dual else 'primal'}): {type(error).__name__}: {error}"
    return arms, None


def webspam_part(args, backend):
    start = time.perf_counter()
    data = webspam_like(args.rows, args.columns, args.nnz_per_row, args.zipf, args.seed)
    print(f"webspam-shaped set: {data.n_rows:,} x {data.n_features:,}, {data.indices.numel():,} entries, made in "
          f"{time.perf_counter() - start:.1f} s", flush=True)
    arms, missing = [], []
    for l2 in args.lambdas:
        group = [scd_arm("alac", data, args, form="primal", l2=l2, backend=backend, device=args.device),
                 scd_arm("alac_wild", data, args, form="primal", l2=l2, backend=backend, wild=True,
                         device=args.device) if backend != "sequential" else None,
                 scd_arm("alac_dual", data, args, form="dual", l2=l2, backend=backend, device=args.device),
                 # one worker searching across epochs (alac.runtime.solvers.cocoa's plane search)
                 scd_arm("alac_plane", data, args, form="primal", l2=l2, backend=backend, device=args.device,
                         aggregation="subspace"),
                 scd_arm("alac_dual_plane", data, args, form="dual", l2=l2, backend=backend, device=args.device,
                         aggregation="subspace"),
                 scd_arm("sequential", data, args, form="primal", l2=l2, backend="sequential", device="cpu",
                         evaluate_on=args.device),
                 sklearn_arm(data, l2)]
        snap, why = snapml_arms(data, l2, args.device)
        missing += [why] if why else []
        arms += [dict(a, data="webspam_like", l2=l2) for a in group + snap if a is not None]
    return arms, sorted(set(missing))


def real_part(args, backend):
    from alac.data import load_libsvm

    arms = []
    folder = SHARED_DATA
    if not folder.is_dir():
        return arms
    splits = {"a9a": tuple(load_libsvm(folder / "a9a" / n, n_features=123) for n in ("a9a", "a9a.t"))}
    w8a = load_libsvm(folder / "w8a" / "w8a")
    rows = torch.arange(w8a.n_rows)
    splits["w8a"] = (w8a.take(rows[rows % 5 != 4]), w8a.take(rows[rows % 5 == 4]))
    for name, (train, test) in splits.items():
        for loss in ("logistic", "hinge"):
            arm = scd_arm(f"alac_dual_{loss}", with_constant_feature(train), args, with_constant_feature(test),
                          form="dual", loss=loss, l2=1 / train.n_rows, backend=backend, device=args.device)
            arms.append(dict(arm, data=name, l2=1 / train.n_rows, liblinear_test_auc=liblinear_auc(loss, train, test)))
    news = load_libsvm(folder / "20news" / "20news.binary.train.svm").normalize_rows()
    # to the gap 1e-6: sequential SCD takes 198 epochs
    to_target = argparse.Namespace(**{**vars(args), "epochs": 1000, "tol": 1e-6})
    arms.append(dict(scd_arm("alac_ridge", news, to_target, form="primal", l2=0.1 / news.n_rows, backend=backend,
                             device=args.device), data="20news", l2=0.1 / news.n_rows))
    return arms


def liblinear_auc(loss, train, test):
    """The test AUC of LIBLINEAR's solution (scikit-learn) of the same problem: C = 1 (lambda = 1 / N),
    the constant feature regularized, tol 1e-10 (the data README gives the logistic optimum only)."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.svm import LinearSVC

    X, y = with_constant_feature(train).to_scipy(), train.labels.numpy() > 0
    exact = {"C": 1.0, "fit_intercept": False, "tol": 1e-10, "random_state": 0}
    model = LogisticRegression(solver="liblinear", max_iter=100_000, **exact) if loss == "logistic" else \
        LinearSVC(loss="hinge", max_iter=1_000_000, **exact)
    scores = with_constant_feature(test).to_scipy() @ model.fit(X, y).coef_.ravel()
    return metrics.auc(torch.as_tensor(scores), test.labels > 0)


def workers_part(args):
    """K = 2, 4, 8 virtual workers, averaging, TPA-SCD's adaptive line search and the plane search
    (alac.runtime.solvers.cocoa), to gap 1e-6 in at most 1,000 epochs on a
    webspam-shaped set of 1/32 the rows and columns (sequential local epochs: the aggregation is what
    is measured)."""
    data = webspam_like(args.rows // 32, args.columns // 32, args.nnz_per_row, args.zipf, args.seed + 1)
    local = argparse.Namespace(**{**vars(args), "epochs": 1000, "tol": 1e-6})
    arms = []
    for form in ("primal", "dual"):
        for workers in (2, 4, 8):
            for aggregation in ("averaging", "adaptive", "subspace"):
                arm = scd_arm(f"{form}_K{workers}_{aggregation}", data, local, form=form, l2=1e-3,
                              backend="sequential", device="cpu", workers=workers, aggregation=aggregation)
                arms.append(dict(arm, data="webspam_like_small", l2=1e-3, form=form, workers=workers,
                                 aggregation=aggregation))
    return arms


def criteo_problems(text):
    """--criteo-problems: form:loss[:l2] items, l2 1/N where left out."""
    problems = []
    for item in text.split(","):
        form, loss, *l2 = item.split(":")
        problems.append((form, loss, float(l2[0]) if l2 else None))
    return problems


def criteo_part(args, backend):
    """The Criteo-shaped problems of `--criteo-problems` (labels +-1): epochs, gap, and each epoch
    against the bytes it must read at the device's measured copy bandwidth and, on a GPU, against
    flat kernels that make only its gathers and atomic additions (benchmarks/scd_floor.py)."""
    # made whole by one process: blocks of at most its rows (a small run draws no 16M-row block)
    data = criteo_dual_like(args.criteo_rows, args.criteo_columns, 25, 39, args.seed, args.device,
                            block_rows=min(DUAL_BLOCK_ROWS, args.criteo_rows))
    data.labels = data.labels * 2 - 1
    entries = data.indices.numel()
    # what an epoch must read. primal, per entry: its row id twice (the sums' pass and the update's), the
    # row's float64 margin and its label; per column: its two offsets, place in the order, beta,
    # curvature and norm. dual, per entry: its id twice and the float64 shared value; per row: its
    # two offsets, place in the order, alpha, label and curvature
    floor_bytes = {"primal": entries * (4 + 4 + 8 + 4) + data.n_features * (8 + 8 + 8 + 8 + 4 + 4),
                   "dual": entries * (4 + 4 + 8) + data.n_rows * (8 + 8 + 8 + 8 + 4 + 4)}
    # 1 GB on a GPU (past its L2); a CPU run is a smoke run: 64 MB
    probe = torch.empty(1 << 28 if args.device == "cuda" else 1 << 24, dtype=torch.float32, device=args.device)
    copy_seconds = _median_seconds(probe.clone, args.device)
    bandwidth = 2 * probe.numel() * 4 / copy_seconds           # read and write
    del probe
    problems = criteo_problems(args.criteo_problems)
    flat = None
    if args.device == "cuda" and any(form == "dual" for form, _, _ in problems):
        from benchmarks.scd_floor import flat_floors

        flat = flat_floors(data.indices, data.n_features)
    local = argparse.Namespace(**{**vars(args), "tol": 1e-6})
    arms = []
    for form, loss, l2 in problems:
        l2 = 1 / data.n_rows if l2 is None else l2
        arm = scd_arm(f"alac_{form}_{loss}", data, local, form=form, loss=loss, l2=l2, backend=backend,
                      device=args.device)
        floor_seconds = floor_bytes[form] / bandwidth
        after = arm["seconds_after_epoch"]
        epoch_seconds = [b - a for a, b in zip([arm["setup_seconds"]] + after, after)]
        arm = dict(arm, data="criteo_like", form=form, l2=l2, rows=data.n_rows, columns=data.n_features,
                   entries=entries, floor_bytes=floor_bytes[form], copy_gb_per_s=bandwidth / 1e9,
                   floor_seconds=floor_seconds, epoch_seconds=epoch_seconds,
                   epoch_over_floor=min(epoch_seconds) / floor_seconds)
        if flat is not None and form == "dual":
            # against the flat gathers and additions at ids that do not collide: the memory system's floor
            # for accesses of this kind (the power-law ids' flat additions collide more than the epoch's)
            arm.update(flat_floors=flat,
                       epoch_over_flat=min(epoch_seconds) * 1e3 / (flat["gather_ms"] + flat["uniform_add_ms"]))
        arms.append(arm)
    return arms


def _median_seconds(work, device, repeats=5):
    times = []
    for _ in range(repeats):
        if device == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        work()
        if device == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return sorted(times)[len(times) // 2]


def report(payload):
    """The tables, headed by the device and the run (or, for parts run in calls of their own and
    merged, each part's command, date and note)."""
    env = payload["environment"]
    parts = payload["arguments"].get("parts", "webspam,real,workers")
    command = "PYTHONPATH=. python benchmarks/scd.py" + (f" --parts {parts}" if parts != "webspam,real,workers" else "")
    runs = payload.get("runs") or [{"command": command, "date": env["date"]}]
    heading = "; ".join(f"`{run['command']}` {run['date']}" + (f" ({run['note']})" if run.get("note") else "")
                        for run in runs)
    return f"SCD ({env['device']}: {heading})\n\n" + scd_table(payload)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=262_938)
    parser.add_argument("--columns", type=int, default=680_715)
    parser.add_argument("--nnz-per-row", type=int, default=200)
    parser.add_argument("--zipf", type=float, default=1.0)
    parser.add_argument("--lambdas", type=float, nargs="+", default=[1e-3, 1e-5])
    parser.add_argument("--epochs", type=int, default=100)
    parser.add_argument("--tol", type=float, default=1e-8)
    parser.add_argument("--parts", default="webspam,real,workers", help="of webspam, real, workers, criteo")
    parser.add_argument("--criteo-rows", type=int, default=200_000_000)
    parser.add_argument("--criteo-columns", type=int, default=75_000_000)
    parser.add_argument("--criteo-problems", default="dual:squared:0.001",
                        help="form:loss[:l2] items (l2 1/N where left out); the default is TPA-SCD's Criteo problem, "
                        "the dual ridge at its lambda of 1e-3 (a lambda of 1/N couples the dual's rows through their "
                        "popular ids: few step at once)")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    backend = "triton" if args.device == "cuda" else "sequential"
    parts = args.parts.split(",")
    arms, missing = [], []
    if "webspam" in parts:
        found, missing = webspam_part(args, backend)
        arms += found
    if "real" in parts:
        arms += real_part(args, backend)
    if "workers" in parts:
        arms += workers_part(args)
    if "criteo" in parts:
        arms += criteo_part(args, backend)
    payload = {"environment": environment(), "arguments": vars(args), "arms": arms, "missing": missing}
    write("scd", payload, report(payload), args.out)
    print(report(payload))


if __name__ == "__main__":
    main()
