"""The field models' defaults against a sweep of the tables' learning rate on real data with fields,
beside the wide models' defaults on the same rows:

    PYTHONPATH=. python benchmarks/deep_defaults.py [--data ../shared/data] [--device cuda] [--sets ...] [--out DIR]

Data: MovieLens latest-small's ratings above 3.5 as clicks (user and movie fields; a random 90/10 split,
seed 0), iPinYou (train -> test, fields by position; its 50 test clicks make one run's AUC move by up to
0.04 with the seed, so its figures are means over 10 seeds) and criteo-tiny (the first 1,000 lines of a
Criteo file, its used ids renumbered densely; no test set and 100 validation rows: it shows only whether a
step blows the logits up on 39 fields). Every run is `alac train --model M [--lr LR]` with every other
option its default (DeepSettings): 10 % of the training rows (seed s) held out for early stopping, the
model's seed s. "defaults" passes no --lr (the tables' AdaGrad step 1 / the sparse fields, at most 0.5);
"tuned" is the lr of RATES with the lowest mean best validation logloss, its test AUC beside; "oracle" the
best test AUC of any lr (chosen on the test set). LR and FM are `alac train --model lr|fm` with their
defaults (benchmarks/defaults.py) on the same rows. Target: defaults within 0.003 AUC of tuned.
Writes results/deep_defaults.json and .md (`--merge A.json B.json`: one result of runs made set by set).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.report import environment, merge, table, write

MODELS = ("ffm", "deepfm", "wide_deep")
RATES = (0.5, 0.2, 0.1, 0.05, 0.02)
SEEDS = {"ml-latest-small liked": 2, "ipinyou": 10, "criteo-tiny": 4}
TARGET = 0.003


def load_sets(folder, names):
    """{name: (train, test or None)} as `alac train` reads them."""
    from alac.data import formats, load_libsvm_files
    from alac.data.compact import compact_feature_ids
    from alac.data.field_map import from_positions
    from alac.data.split import split
    from alac.data.table import load_table

    sets = {}
    if "ml-latest-small liked" in names:
        ratings = load_table(folder / "ml-latest-small/ratings.csv", label="rating", fields="userId,movieId")
        liked = dataclasses.replace(ratings, labels=(ratings.labels > 3.5).float())
        sets["ml-latest-small liked"] = tuple(split(liked, (0.9, 0.1), seed=0))
    if "ipinyou" in names:
        train, test = load_libsvm_files([folder / "ipinyou/train.fm.txt", folder / "ipinyou/test.fm.txt"])
        fields = from_positions(train)
        sets["ipinyou"] = (fields.apply(train), fields.apply(test, unlisted_ok=True))
    if "criteo-tiny" in names:
        (data,), _ = compact_feature_ids([formats.load(folder / "criteo-tiny/train.txt", "criteo")])
        sets["criteo-tiny"] = (data, None)
    return sets


def run_arm(model, lr, train, valid, test, device, seed=0):
    """One `alac train --model model [--lr lr]` run (lr None: the default): its losses, epochs, whether
    the divergence guard stopped it (its loss is then the restored weights'), and the test set's logloss
    and AUC."""
    from alac import metrics
    from alac.train.deep import DeepSettings, DeepTrainer
    from alac.train.divergence import TrainingDiverged, base_rate_loss

    trainer = DeepTrainer(DeepSettings(model=model, lr=lr, seed=seed), device)
    diverged = False
    try:
        trainer.fit(train, valid)
    except TrainingDiverged:
        diverged = True
    history, start = trainer.history, trainer.guard.start
    arm = {"model": model, "lr": trainer.table_lr, "default": lr is None, "seed": seed, "epochs": len(history),
           "diverged": diverged, "base_valid_logloss": base_rate_loss(True, train.labels > 0.5, valid.labels > 0.5),
           "start_valid_logloss": start,
           "first_valid_logloss": history[0]["valid_logloss"] if history else None,
           "best_valid_logloss": min((r["valid_logloss"] for r in history), default=start),
           "valid_logloss": [r["valid_logloss"] for r in history]}
    if test is not None:
        probability = trainer.predict(test)
        positive = test.labels > 0.5
        arm.update(test_logloss=metrics.logloss(probability, positive), test_auc=metrics.auc(probability, positive))
    return arm


def mean(arms, key):
    return sum(arm[key] for arm in arms) / len(arms)


def summary(arms):
    """Per (data, model): the defaults' lr and mean metrics, the tuned lr (lowest mean best validation
    logloss) and its, the oracle's test AUC, and the lrs where the guard stopped a run."""
    rows = []
    for data, model in dict.fromkeys((a["data"], a["model"]) for a in arms if a["model"] in MODELS):
        mine = [a for a in arms if a["data"] == data and a["model"] == model]
        by_lr = {lr: [a for a in mine if a["lr"] == lr and not a["default"]] for lr in RATES}
        defaults = [a for a in mine if a["default"]]
        by_lr = {lr: runs or [a for a in defaults if a["lr"] == lr] for lr, runs in by_lr.items()}
        tuned = min(by_lr, key=lambda lr: mean(by_lr[lr], "best_valid_logloss"))
        row = {"data": data, "model": model, "seeds": len(defaults), "default_lr": defaults[0]["lr"],
               "base_valid_logloss": mean(defaults, "base_valid_logloss"),
               "defaults_valid_logloss": mean(defaults, "best_valid_logloss"), "tuned_lr": tuned,
               "tuned_valid_logloss": mean(by_lr[tuned], "best_valid_logloss"),
               "diverged_lrs": [lr for lr, runs in by_lr.items() if any(a["diverged"] for a in runs)]
               + (["default"] if any(a["diverged"] for a in defaults) else [])}
        if "test_auc" in defaults[0]:
            row.update(defaults_auc=mean(defaults, "test_auc"), tuned_auc=mean(by_lr[tuned], "test_auc"),
                       oracle_auc=max(mean(runs, "test_auc") for runs in by_lr.values()))
            row["within_target"] = row["defaults_auc"] >= row["tuned_auc"] - TARGET
        rows.append(row)
    return rows


def report(result):
    """A row per data set with a test set and model: the defaults' and the tuned lr's test AUC; a line
    for criteo-tiny's best validation loglosses; a line of the wide models' defaults on the same rows."""
    rows, stress = [], []
    for row in summary(result["arms"]):
        stopped = ", ".join(f"{lr}" for lr in row["diverged_lrs"]) or "-"
        if "defaults_auc" not in row:
            stress.append(f"{row['model']} {row['defaults_valid_logloss']:.4f} at {row['default_lr']:.3g} / "
                          f"{row['tuned_valid_logloss']:.4f} at {row['tuned_lr']:g} (stopped at: {stopped})")
            continue
        rows.append([f"{row['data']} ({row['seeds']} seeds)" if row["seeds"] > 1 else row["data"], row["model"],
                     f"{row['default_lr']:.3g}", f"{row['defaults_auc']:.4f}", f"{row['tuned_lr']:g}",
                     f"{row['tuned_auc']:.4f}", f"{row['oracle_auc']:.4f}", "yes" if row["within_target"] else "no",
                     stopped])
    lines = [table(["data", "model", "default lr", "defaults: test AUC", "tuned lr", "tuned: test AUC", "oracle",
                    f"within {TARGET}", "guard stopped at lr"], rows)]
    if stress:
        base = [a["base_valid_logloss"] for a in result["arms"] if a["data"] == "criteo-tiny" and a.get("default")]
        lines.append(f"\ncriteo-tiny, best validation logloss of the defaults / the tuned lr (the base rate's "
                     f"{sum(base) / len(base):.4f}): " + "; ".join(stress) + ".")
    wide = [a for a in result["arms"] if a["model"] not in MODELS]
    if wide:
        lines.append("\nThe wide models' defaults on the same rows (test AUC): " + "; ".join(
            f"{data} " + ", ".join(f"{a['model']} {a['test_auc']:.4f}" for a in wide if a["data"] == data)
            for data in dict.fromkeys(a["data"] for a in wide)) + ".")
    return "\n".join(lines)


def wide_arms(name, train, test, seeds, backend):
    """LR and FM with `alac train`'s defaults on the same rows (benchmarks/defaults.py), mean test AUC."""
    from alac.models import zoo_module
    from benchmarks.defaults import train_seeds

    return [{"data": name, "model": model, "seeds": seeds,
             "test_auc": train_seeds(zoo_module(model), [], train, test, backend, seeds)[0]["auc"]}
            for model in ("lr", "fm")]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=Path(__file__).resolve().parents[2] / "shared" / "data")
    parser.add_argument("--device", default=None)
    parser.add_argument("--sets", default=",".join(SEEDS))
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--out", default=None)
    parser.add_argument("--merge", nargs="+", metavar="JSON", help="write one result of these runs' deep_defaults.json")
    args = parser.parse_args()
    if args.merge:
        result = merge(args.merge, "deep_defaults.py")
        result.update(rates=RATES, seeds=SEEDS, target=TARGET)
        write("deep_defaults", result, report(result), args.out)
        print(report(result))
        return
    import torch

    from alac.data.split import hold_out

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    sets = load_sets(args.data, args.sets.split(","))
    if not sets:
        raise SystemExit(f"no shared data under {args.data}")
    result = {"environment": environment(), "arguments": {"device": device, "sets": list(sets)},
              "command": " ".join(["python benchmarks/deep_defaults.py", *sys.argv[1:]]), "rates": RATES,
              "seeds": SEEDS, "target": TARGET, "arms": []}
    for name, (train, test) in sets.items():
        for model in args.models.split(","):
            for seed in range(SEEDS[name]):
                fit, valid = hold_out(train, 0.1, seed)
                default = run_arm(model, None, fit, valid, test, device, seed)
                runs = [default] + [run_arm(model, lr, fit, valid, test, device, seed) for lr in RATES
                                    if lr != default["lr"]]
                for arm in runs:
                    result["arms"].append({"data": name, **arm})
                    print({k: v for k, v in result["arms"][-1].items() if k != "valid_logloss"}, flush=True)
        if test is not None:
            backend = "triton" if device == "cuda" else "reference"
            result["arms"] += wide_arms(name, train, test, SEEDS[name], backend)
            print(result["arms"][-2:], flush=True)
        write("deep_defaults", result, report(result), args.out)
    print(report(result))


if __name__ == "__main__":
    main()
