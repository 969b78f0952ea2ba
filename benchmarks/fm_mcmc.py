"""Factorization machines by libFM's MCMC and ALS (alac.runtime.solvers.fm_coordinate) against myFM's
Gibbs sampler, side by side in one process:
`PYTHONPATH=. python benchmarks/fm_mcmc.py [--parts quality,speed]`.

quality: MovieLens latest-small ratings (the shared data; a random 90/10 split, seed 0; one-hot user
and movie fields, one prior group each) by alac MCMC and ALS, myFM's MyFMRegressor, and alac's SGD FM
with `alac train --model fm --loss squared` defaults; the same ratings as classes (liked: above 3.5) and
iPinYou's clicks (train -> test, fields from its featindex; 50 test clicks: its AUC is noisy) by alac
MCMC probit against MyFMClassifier and the SGD FM's defaults. The same rank
(`--k`), iterations (`--iterations`) and kept samples (iterations - `--burn-in`) for both samplers;
alac's prediction is the mean over the kept samples, as myFM's.
speed: seconds per MCMC iteration at each `--sizes` ratings of alac.data.synthetic.ratings_like (power-law
users and items, a planted rank-8 FM): alac on the GPU (float32 and float64) and on the CPU, myFM on the
CPU (the median time between its callbacks after the first iteration, over `--speed-iterations`).
Writes results/fm_mcmc.json and .md, again after every arm (a run cut short keeps what it measured);
`--merge A.json B.json` writes one result of runs made part by part.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sps
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from alac import metrics
from alac.data import load_featindex, load_libsvm_files
from alac.data.split import split
from alac.data.synthetic import ratings_like
from alac.data.table import load_table
from alac.runtime.solvers.fm_coordinate import CoordinateSettings, CoordinateSolver
from benchmarks.distributed import recorded_command
from benchmarks.report import environment, merge, write

SHARED_DATA = Path(os.environ.get("ALAC_SHARED_DATA", Path(__file__).resolve().parents[2] / "shared" / "data"))
PARTS = ("quality", "speed")
TASKS = ("ratings", "liked", "ipinyou")


def _wait(device):
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


def alac_fit(train, test, settings, device, dtype=torch.float64, n_features=None):
    """(mean prediction over the kept samples (probit: of Phi), seconds per iteration) of alac's solver."""
    solver = CoordinateSolver(settings, train, n_features, device, dtype)
    mean = torch.zeros(test.n_rows, device=device, dtype=torch.float64)
    seconds = []
    for _ in range(settings.iterations):
        _wait(device)
        started = time.perf_counter()
        solver.iterate()
        _wait(device)
        seconds.append(time.perf_counter() - started)
        if solver.samples or settings.solver == "als":
            predicted = solver.predict(test).double()
            if settings.task == "classification":
                predicted = torch.special.ndtr(predicted)
            kept = max(solver.samples, 1)
            mean = predicted if settings.solver == "als" else mean + (predicted - mean) / kept
    return mean.cpu(), seconds, solver


def csr(dataset, n_features, column=None):
    """scipy CSR of a dataset's known features, feature j in column[j] (default j)."""
    keep = dataset.indices.long() < n_features
    ids = dataset.indices.long()[keep]
    columns = ids if column is None else column[ids]
    rows = dataset.entry_rows()[keep].numpy()
    return sps.csr_matrix((dataset.values_or_ones()[keep].double().numpy(), (rows, columns.numpy())),
                          shape=(dataset.n_rows, n_features))


def field_columns(dataset, n_features):
    """(each feature's column with every field's features consecutive, myFM's group_shapes: the
    columns of each field in turn); features no row has go with the last field."""
    field_of = torch.full((n_features,), int(dataset.fields.max()), dtype=torch.int64)
    field_of[dataset.indices.long()] = dataset.fields.long()
    order = torch.argsort(field_of, stable=True)
    column = torch.empty_like(order)
    column[order] = torch.arange(n_features)
    return column, [count for count in torch.bincount(field_of).tolist() if count]


def myfm_fit(train, test, n_features, k, iterations, kept, classification, seed=0):
    """(myFM's prediction of test, its median seconds per iteration: between its callbacks, which
    report nothing, so that the time is its sampler's)."""
    import myfm

    column, shapes = field_columns(train, n_features)
    model = (myfm.MyFMClassifier if classification else myfm.MyFMRegressor)(rank=k, random_seed=seed)
    stamps = []

    def stamp(*_):
        stamps.append(time.perf_counter())
        return False, None

    started = time.perf_counter()
    model.fit(csr(train, n_features, column), train.labels.numpy(), n_iter=iterations, n_kept_samples=kept,
              group_shapes=shapes, callback=stamp)
    x = csr(test, n_features, column)
    predicted = model.predict_proba(x) if classification else model.predict(x)
    seconds = float(np.median(np.diff([started, *stamps])[1:])) if len(stamps) > 1 else stamps[0] - started
    return torch.as_tensor(np.asarray(predicted), dtype=torch.float64), seconds


def sgd_defaults(train, test, loss):
    """alac train --model fm with its defaults (and --loss), as benchmarks/defaults.py runs it."""
    from alac.models import zoo_module
    from benchmarks.defaults import train_once

    tested, *_ = train_once(zoo_module("fm"), ["--loss", loss] if loss != "logistic" else [], train, test,
                            "triton" if torch.cuda.is_available() else "reference")
    return tested


def quality_arms(args, device, record):
    k, iterations, burn = args.k, args.iterations, args.burn_in

    def keep(arm):
        record({**arm, "iterations": iterations})

    ratings = load_table(SHARED_DATA / "ml-latest-small/ratings.csv", label="rating", fields="userId,movieId")
    train, test = split(ratings, (0.9, 0.1), seed=0)
    if "ratings" in args.tasks:
        truth = test.labels.double()

        def rmse(predicted):
            return float(((predicted - truth) ** 2).mean().sqrt())

        settings = CoordinateSettings(solver="mcmc", k=k, iterations=iterations, burn_in=burn, seed=args.seed)
        predicted, seconds, solver = alac_fit(train, test, settings, device, n_features=ratings.n_features)
        keep({"name": "alac_mcmc", "data": "ml-latest-small", "test_rmse": rmse(predicted),
              "seconds_per_iteration": float(np.median(seconds)), "alpha": float(solver.alpha)})
        for reg in args.als_regs:
            als = CoordinateSettings(solver="als", k=k, iterations=iterations, burn_in=0, reg_w=reg, reg_v=reg,
                                     seed=args.seed)
            predicted, seconds, _ = alac_fit(train, test, als, device, n_features=ratings.n_features)
            keep({"name": f"alac_als_reg{reg:g}", "data": "ml-latest-small", "test_rmse": rmse(predicted),
                  "seconds_per_iteration": float(np.median(seconds))})
        predicted, seconds = myfm_fit(train, test, ratings.n_features, k, iterations, iterations - burn, False,
                                      args.seed)
        keep({"name": "myfm_mcmc", "data": "ml-latest-small", "test_rmse": rmse(predicted),
              "seconds_per_iteration": seconds})
        keep({"name": "alac_sgd_defaults", "data": "ml-latest-small",
              "test_rmse": sgd_defaults(train, test, "squared")["rmse"]})
    tasks = []
    if "liked" in args.tasks:
        liked = dataclasses.replace(ratings, labels=(ratings.labels > 3.5).float())
        tasks.append(("ml-latest-small liked", split(liked, (0.9, 0.1), seed=0)))
    if "ipinyou" in args.tasks:
        fields = load_featindex(SHARED_DATA / "ipinyou/featindex.txt")
        tasks.append(("ipinyou", [fields.apply(part) for part in load_libsvm_files(
            [SHARED_DATA / "ipinyou/train.fm.txt", SHARED_DATA / "ipinyou/test.fm.txt"])]))
    for data, (train, test) in tasks:
        positive = test.labels > 0.5
        classes = CoordinateSettings(solver="mcmc", k=k, iterations=iterations, burn_in=burn, task="classification",
                                     seed=args.seed)
        predicted, seconds, _ = alac_fit(train, test, classes, device, n_features=train.n_features)
        keep({"name": "alac_mcmc", "data": data, "test_auc": float(metrics.auc(predicted.float(), positive)),
              "seconds_per_iteration": float(np.median(seconds))})
        predicted, seconds = myfm_fit(train, test, train.n_features, k, iterations, iterations - burn, True,
                                      args.seed)
        keep({"name": "myfm_mcmc", "data": data, "test_auc": float(metrics.auc(predicted.float(), positive)),
              "seconds_per_iteration": seconds})
        keep({"name": "alac_sgd_defaults", "data": data, "test_auc": sgd_defaults(train, test, "logistic")["auc"]})


def speed_arms(args, device, record):
    for size in args.sizes:
        data = ratings_like(size, n_users=max(100, size // 100), n_items=max(50, size // 500), k=8, seed=args.seed,
                            device=device)
        settings = CoordinateSettings(solver="mcmc", k=args.k, iterations=args.speed_iterations, burn_in=0,
                                      seed=args.seed)
        runs = [(device, torch.float32), (device, torch.float64)]
        if torch.device(device).type == "cuda" and size <= args.cpu_max:
            runs.append(("cpu", torch.float64))
        for where, dtype in runs:
            on = data.to(where)
            _, seconds, _ = alac_fit(on, on.take(torch.arange(1, device=on.indices.device)), settings, where, dtype)
            record({"name": f"alac_{torch.device(where).type}_{str(dtype)[6:]}", "ratings": size,
                    "seconds_per_iteration": float(np.median(seconds[1:]))})
        cpu = data.to("cpu")
        if size <= args.myfm_max:
            _, seconds = myfm_fit(cpu, cpu.take(torch.arange(1)), cpu.n_features, args.k, 1 + args.speed_iterations, 1,
                                  False, args.seed)
            record({"name": "myfm_cpu", "ratings": size, "seconds_per_iteration": seconds})
        del data, cpu


def arms_table(payload):
    """One row per data set (its metric: test RMSE or AUC) and one per size of the speed part."""
    arms = payload["arms"]
    lines = ["| data | metric | alac MCMC | myFM | alac ALS (best L2) | alac SGD defaults | "
             "s / iteration, alac / myFM |", "|---|---|---|---|---|---|---|"]
    counts = {arm.get("iterations") for arm in arms if "data" in arm}
    for data, iterations in dict.fromkeys((arm["data"], arm.get("iterations")) for arm in arms if "data" in arm):
        mine = {arm["name"]: arm for arm in arms if arm.get("data") == data and arm.get("iterations") == iterations}
        metric = "test_rmse" if "test_rmse" in next(iter(mine.values())) else "test_auc"
        als = [arm for name, arm in mine.items() if name.startswith("alac_als")]
        best = (min if metric == "test_rmse" else max)(als, key=lambda arm: arm[metric]) if als else None

        def cell(name, mine=mine, metric=metric):
            return f"{mine[name][metric]:.4f}" if name in mine else ""
        seconds = " / ".join(f"{mine[name]['seconds_per_iteration']:.4f}" for name in ("alac_mcmc", "myfm_mcmc")
                             if name in mine)
        label = f"{data}, {iterations} iterations" if len(counts) > 1 else data
        lines.append(f"| {label} | {metric.removeprefix('test_')} | {cell('alac_mcmc')} | {cell('myfm_mcmc')} | "
                     + (f"{best[metric]:.4f} ({best['name'].removeprefix('alac_als_reg')})" if best else "")
                     + f" | {cell('alac_sgd_defaults')} | {seconds} |")
    sizes = sorted({arm["ratings"] for arm in arms if "ratings" in arm})
    names = ["alac_cuda_float32", "alac_cuda_float64", "alac_cpu_float64", "myfm_cpu"]
    if sizes:
        lines += ["", "| ratings | s / iteration: alac GPU float32 | alac GPU float64 | alac CPU | myFM CPU | "
                  "myFM / alac GPU float32 |", "|---|---|---|---|---|---|"]
        for size in sizes:
            at = {arm["name"]: arm["seconds_per_iteration"] for arm in arms if arm.get("ratings") == size}
            ratio = at["myfm_cpu"] / at["alac_cuda_float32"] if "myfm_cpu" in at and "alac_cuda_float32" in at else None
            lines.append(f"| {size:,} | " + " | ".join(f"{at[n]:.4f}" if n in at else "" for n in names) + " | "
                         + (f"{ratio:.0f}x" if ratio else "") + " |")
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parts", type=lambda text: text.split(","), default=list(PARTS))
    parser.add_argument("--tasks", type=lambda text: text.split(","), default=list(TASKS),
                        help="the quality part's data: ratings, liked, ipinyou")
    parser.add_argument("--k", type=int, default=8)
    parser.add_argument("--iterations", type=int, default=200)
    parser.add_argument("--burn-in", type=int, default=50)
    parser.add_argument("--als-regs", type=lambda text: [float(v) for v in text.split(",")], default=[5.0, 20.0, 50.0])
    parser.add_argument("--sizes", type=lambda text: [int(v) for v in text.split(",")],
                        default=[100_000, 10_000_000, 100_000_000])
    parser.add_argument("--speed-iterations", type=int, default=5)
    parser.add_argument("--myfm-max", type=int, default=100_000_000, help="largest set myFM is timed on")
    parser.add_argument("--cpu-max", type=int, default=10_000_000, help="largest set alac is timed on the CPU on")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--out", default=None)
    parser.add_argument("--merge", nargs="+", metavar="JSON", help="write one result of these runs' fm_mcmc.json")
    args = parser.parse_args()
    if args.merge:
        payload = merge(args.merge, "fm_mcmc.py")
        write("fm_mcmc", payload, arms_table(payload), args.out)
        print(arms_table(payload))
        return
    payload = {"environment": environment(), "arguments": vars(args), "command": recorded_command(sys.argv[1:]),
               "arms": []}

    def record(arm):
        print(arm, flush=True)
        payload["arms"].append(arm)
        write("fm_mcmc", payload, arms_table(payload), args.out)

    if "quality" in args.parts:
        quality_arms(args, args.device, record)
    if "speed" in args.parts:
        speed_arms(args, args.device, record)
    print(arms_table(payload))


if __name__ == "__main__":
    main()
