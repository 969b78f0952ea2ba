"""Defaults that learn: `alac train` with no tuning against the best of a sweep, on the shared data.

    PYTHONPATH=. python benchmarks/defaults.py [--data ../shared/data] [--backend triton] [--out DIR]

Every run trains as `alac train` does (alac.cli.train.train_model): at most --epochs epochs, early stopping
(patience) on a validation split of the training rows (10 %, seed 0), the best epoch kept, then the
test set scored. "defaults" passes nothing but the model (and --loss squared for ratings): optimizer
auto, AdaGrad and SGD raced on the validation split (alac.train.race), the winner of each seed recorded. The sweep
(the "tuned" arm) crosses the optimizers sgd, adagrad, ftrl and adam with three learning rates each
(SWEEP below) and, for FM, factor sizes 8 and 16 and L2 coefficients 0 and 0.01; "tuned" is the run
with the best validation metric (AUC, or RMSE for ratings), scored on the test set. Its "oracle" is
the best test metric of any sweep run (an upper bound: chosen on the test set). Ratings also get a
ridge baseline: scikit-learn's Ridge on the one-hot user and movie ids, alpha chosen on the same
validation rows; FM must beat it.

Data (the folder's README): a9a -> a9a.t; w8a rows i % 5 != 4 -> rows i % 5 == 4; ipinyou train ->
test; 20news (rows L2-normalised, as its reference) train -> test; ml-latest-small ratings, FM
regression on user and movie ids, a random 90/10 split with seed 0.
Writes results/defaults.json and .md (`--update results/defaults.json --sets S --models M --no-sweep`:
those rows' defaults re-measured into the earlier result, e.g. after a change of the defaults).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.render import kept
from benchmarks.report import environment, table, write

SWEEP = {"sgd": (0.1, 0.5, 2.0), "adagrad": (0.02, 0.1, 0.5), "ftrl": (0.02, 0.1, 0.5), "adam": (0.001, 0.01, 0.1)}
FM_FACTORS = (8, 16)
FM_L2 = (0.0, 0.01)
# (data set, model, extra flags of every run)
RUNS = [("a9a", "lr", []), ("a9a", "fm", []), ("w8a", "lr", []), ("w8a", "fm", []),
        ("ipinyou", "lr", []), ("ipinyou", "fm", []), ("20news", "lr", ["--normalize"]),
        ("20news", "fm", ["--normalize"]), ("ml-latest-small", "fm", ["--loss", "squared"])]
TARGET = {"auc": 0.005, "rmse": 0.01}
# ipinyou has 255 clicks in training and 50 in test: one run's AUC moves by up to 0.04 with the seed
# (the validation rows, initial values and order), so its runs are means over 10 seeds
SEEDS = {"ipinyou": 10}


def load_sets(folder, names):
    """{name: (train, test)} in one feature space per set (rows not yet normalised)."""
    from alac.data import load_libsvm_files
    from alac.data.split import split
    from alac.data.table import load_table

    sets = {}
    if "a9a" in names:
        sets["a9a"] = load_libsvm_files([folder / "a9a/a9a", folder / "a9a/a9a.t"], n_features=123)
    if "w8a" in names:
        (w8a,) = load_libsvm_files([folder / "w8a/w8a"])
        rows = w8a.n_rows
        import torch

        sets["w8a"] = (w8a.take(torch.arange(rows)[torch.arange(rows) % 5 != 4]),
                       w8a.take(torch.arange(rows)[torch.arange(rows) % 5 == 4]))
    if "ipinyou" in names:
        sets["ipinyou"] = load_libsvm_files([folder / "ipinyou/train.fm.txt", folder / "ipinyou/test.fm.txt"])
    if "20news" in names:
        sets["20news"] = load_libsvm_files([folder / "20news/20news.binary.train.svm",
                                            folder / "20news/20news.binary.test.svm"])
    if "ml-latest-small" in names:
        ratings = load_table(folder / "ml-latest-small/ratings.csv", label="rating", fields="userId,movieId")
        sets["ml-latest-small"] = tuple(split(ratings, (0.9, 0.1), seed=0))
    return sets


def train_once(module, argv, train, test, backend, seed=0):
    """One `alac train` run: (test metrics, validation metrics, epochs, seconds, diverged, the optimizer
    that trained the model kept)."""
    from alac.cli.data import TrainingData, with_validation_split
    from alac.cli.train import parse_arguments, train_model

    args = parse_arguments(module, [*argv, "--backend", backend, "--seed", str(seed)])
    if args.normalize:
        train, test = train.normalize_rows(), test.normalize_rows()
    data = with_validation_split(TrainingData(train, None, test), args)
    started = time.perf_counter()
    trainer, final, diverged = train_model(args, module, data)
    seconds = time.perf_counter() - started
    tested = {name.removeprefix("test_"): value for name, value in final.items() if name.startswith("test_")}
    return tested, trainer.evaluate(data.valid), len(trainer.history), seconds, diverged is not None, args.optimizer


def train_seeds(module, argv, train, test, backend, seeds):
    """train_once for seeds 0 .. seeds - 1 (validation split, initial values, order), metrics averaged:
    (test, valid, epochs, seconds, any diverged, every seed's test metrics, every seed's optimizer)."""
    runs = [train_once(module, argv, train, test, backend, seed) for seed in range(seeds)]

    def mean(dicts):
        return {k: sum(d[k] for d in dicts) / len(dicts) for k in dicts[0]}

    return (mean([r[0] for r in runs]), mean([r[1] for r in runs]), sum(r[2] for r in runs) / seeds,
            sum(r[3] for r in runs), any(r[4] for r in runs), [r[0] for r in runs], [r[5] for r in runs])


def sweep_configs(model):
    for optimizer, rates in SWEEP.items():
        for lr in rates:
            if model == "fm":
                for k, l2 in itertools.product(FM_FACTORS, FM_L2):
                    yield {"optimizer": optimizer, "lr": lr, "k": k, "l2": l2}
            else:
                yield {"optimizer": optimizer, "lr": lr}


def score_sweep(row, metric):
    """The row's tuned run (the best validation metric of its sweep), oracle and target."""
    better = min if metric == "rmse" else max
    tuned = better(row["sweep"], key=lambda run: run["valid"][metric])
    row["tuned"] = dict(tuned["test"], config=tuned["config"], valid=tuned["valid"][metric])
    row["oracle"] = better(run["test"][metric] for run in row["sweep"])
    row["within_target"] = (row["defaults"][metric] >= row["tuned"][metric] - TARGET[metric] if metric == "auc"
                            else row["defaults"][metric] <= row["tuned"][metric] + TARGET[metric])


def flags(config):
    return [part for key, value in config.items() for part in (f"--{key}", str(value))]


def ridge_baseline(train, test, seed=0):
    """scikit-learn Ridge on the one-hot ids, alpha chosen on a 10 % validation split (seed 0)."""
    import numpy as np
    import scipy.sparse
    from sklearn.linear_model import Ridge

    from alac.data.split import split

    def matrix(dataset):
        return scipy.sparse.csr_matrix((dataset.values_or_ones().numpy(), dataset.indices.numpy(),
                                        dataset.indptr.numpy()), shape=(dataset.n_rows, train.n_features))

    fit, valid = split(train, (0.9, 0.1), seed=seed)
    scores = {}
    for alpha in (0.1, 1.0, 3.0, 10.0, 30.0, 100.0):
        model = Ridge(alpha=alpha).fit(matrix(fit), fit.labels.numpy())
        scores[alpha] = float(np.sqrt(np.mean((model.predict(matrix(valid)) - valid.labels.numpy()) ** 2)))
    alpha = min(scores, key=scores.get)
    model = Ridge(alpha=alpha).fit(matrix(train), train.labels.numpy())
    rmse = float(np.sqrt(np.mean((model.predict(matrix(test)) - test.labels.numpy()) ** 2)))
    return {"rmse": rmse, "alpha": alpha, "valid_rmse": scores}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", type=Path, default=Path(__file__).resolve().parents[2] / "shared" / "data")
    parser.add_argument("--backend", default="triton", choices=["triton", "reference"])
    parser.add_argument("--sets", default=",".join(dict.fromkeys(name for name, _, _ in RUNS)))
    parser.add_argument("--models", default="lr,fm")
    parser.add_argument("--no-sweep", action="store_true", help="the defaults only")
    parser.add_argument("--out", default=os.environ.get("OUT"))
    parser.add_argument("--update", metavar="JSON", type=Path,
                        help="re-measure only the rows --sets and --models select in this earlier result, keeping its "
                             "other rows, and with --no-sweep the selected rows' sweeps (each sweep run names every "
                             "option it varies); a re-measured row records its device and date")
    args = parser.parse_args()

    from alac.models import zoo_module

    names = args.sets.split(",")
    sets = load_sets(args.data, names)
    env = environment()
    earlier = json.loads(args.update.read_text()) if args.update else None
    previous = None if earlier is None else {(r["data"], r["model"]): r for r in earlier["results"]}
    results = []
    for name, model, extra in RUNS:
        if name not in names or model not in args.models.split(","):
            continue
        train, test = sets[name]
        module = zoo_module(model)
        metric = "rmse" if "squared" in extra else "auc"
        seeds = SEEDS.get(name, 1)
        final, valid, epochs, seconds, diverged, per_seed, optimizers = train_seeds(module, extra, train, test,
                                                                                   args.backend, seeds)
        row = {"data": name, "model": model + (" (squared)" if metric == "rmse" else ""), "metric": metric,
               "seeds": seeds, "defaults": dict(final, epochs=epochs, seconds=seconds, diverged=diverged,
                                                per_seed=[run[metric] for run in per_seed], optimizers=optimizers),
               "sweep": []}
        print(f"{name} {model} defaults: {metric} {final[metric]:.4f} ({epochs:.0f} epochs, {seconds:.1f} s)",
              flush=True)
        if previous is not None:
            row["measured"] = {key: env[key] for key in ("device", "date")}
        if not args.no_sweep:
            for config in sweep_configs(model):
                final, valid, epochs, seconds, diverged, per_seed, _ = train_seeds(
                    module, [*extra, *flags(config)], train, test, args.backend, seeds)
                row["sweep"].append({"config": config, "test": final, "valid": valid, "epochs": epochs,
                                     "seconds": seconds, "diverged": diverged,
                                     "per_seed": [run[metric] for run in per_seed]})
                print(f"  {config}: valid {valid[metric]:.4f} test {final[metric]:.4f} ({epochs:.0f} epochs"
                      + (", diverged" if diverged else "") + ")", flush=True)
        if previous is not None and args.no_sweep:
            row["sweep"] = previous.get((name, row["model"]), {}).get("sweep", [])
        if row["sweep"]:
            score_sweep(row, metric)
        if metric == "rmse":
            row["ridge"] = ridge_baseline(train, test)
            row["beats_ridge"] = row["defaults"]["rmse"] < row["ridge"]["rmse"]
        results.append(row)
    if previous is not None:
        fresh = {(r["data"], r["model"]): r for r in results}
        results = [fresh.get(key, row) for key, row in previous.items()]
        env = earlier["environment"]

    header = ["data", "model", "metric", "defaults", "tuned (sweep, chosen on validation)", "tuned config", "oracle",
              "auto kept", "within target", "epochs (defaults)"]
    rows = []
    for r in results:
        metric = r["metric"]
        rows.append([r["data"], r["model"], metric, f"{r['defaults'][metric]:.4f}",
                     f"{r['tuned'][metric]:.4f}" if "tuned" in r else "-",
                     " ".join(f"{k}={v}" for k, v in r["tuned"]["config"].items()) if "tuned" in r else "-",
                     f"{r['oracle']:.4f}" if "oracle" in r else "-", kept(r["defaults"]["optimizers"]),
                     r.get("within_target", "-"),
                     f"{r['defaults']['epochs']:.0f}" + (f" (mean of {r['seeds']} seeds)" if r["seeds"] > 1 else "")])
    from alac import defaults

    lines = [f"Defaults against a sweep ({env['device']}, {env['date']}, backend {args.backend}; "
             f"`PYTHONPATH=. python benchmarks/defaults.py --backend {args.backend}`). Defaults: optimizer "
             f"{defaults.OPTIMIZER} (AdaGrad and SGD at their default rates raced on the validation rows), "
             f"batch {defaults.BATCH_SIZE}, at most "
             f"{defaults.EPOCHS} epochs with early stopping ({defaults.EARLY_STOPPING}, {defaults.PATIENCE} epochs) "
             f"on {100 * defaults.VALID_SPLIT:g} % of the training rows; targets: within "
             f"{TARGET['auc']} AUC or {TARGET['rmse']} RMSE of the tuned run.", "", table(header, rows)]
    for r in results:
        if "ridge" in r:
            lines.append(f"\n{r['data']}: FM defaults RMSE {r['defaults']['rmse']:.4f} against ridge "
                         f"{r['ridge']['rmse']:.4f} (alpha {r['ridge']['alpha']:g}, scikit-learn).")
    markdown = "\n".join(lines)
    print(markdown)
    write("defaults", {"environment": env, "backend": args.backend, "sweep": SWEEP, "fm_factors": FM_FACTORS,
                       "fm_l2": FM_L2, "target": TARGET, "results": results}, markdown, args.out)


if __name__ == "__main__":
    main()
