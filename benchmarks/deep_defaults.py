"""The field models' defaults on real data: the tables' learning rate as `alac train --model M` reads
a Criteo file and iPinYou, against the loss of predicting the base rate.

    PYTHONPATH=. python benchmarks/deep_defaults.py [--data ../shared/data] [--device cuda] [--out DIR]

Every run is `alac train --model M --lr LR` with the other defaults: criteo-tiny as a Criteo file
(2^20 hash buckets a field, the used ids renumbered densely), iPinYou with its fields by position;
10 % of the training rows (seed 0) held out for validation and early stopping (patience 2, at most 15
epochs); iPinYou's test file scored. An arm that the divergence guard stops is marked; its loss is
that of the weights it restored. The JSON has each arm's validation logloss at the start, after the
first epoch, every epoch's and its best, and iPinYou's test logloss and AUC; the table the best and
the test AUC beside the base rate's logloss.
Writes results/deep_defaults.json and .md.
"""

from __future__ import annotations

import argparse
import itertools
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.report import environment, table, write

MODELS = ("ffm", "deepfm", "wide_deep")
# AdaGrad's own default (chosen for the wide models) and smaller steps
RATES = (0.2, 0.1, 0.05, 0.02)
SEED = 0


def load_sets(folder):
    """{name: (train, valid, test or None)} as `alac train` reads them."""
    from alac.data import formats, load_libsvm_files
    from alac.data.compact import compact_feature_ids
    from alac.data.field_map import from_positions
    from alac.data.split import hold_out

    sets = {}
    tiny = folder / "criteo-tiny/train.txt"
    if tiny.is_file():
        (data,), _ = compact_feature_ids([formats.load(tiny, "criteo")])
        sets["criteo-tiny"] = (*hold_out(data, 0.1, SEED), None)
    ipinyou = folder / "ipinyou"
    if ipinyou.is_dir():
        train, test = load_libsvm_files([ipinyou / "train.fm.txt", ipinyou / "test.fm.txt"])
        fields = from_positions(train)
        train, valid = hold_out(fields.apply(train), 0.1, SEED)
        sets["ipinyou"] = (train, valid, fields.apply(test, unlisted_ok=True))
    return sets


def run_arm(model, lr, train, valid, test, device):
    from alac import metrics
    from alac.train.deep import DeepSettings, DeepTrainer
    from alac.train.divergence import TrainingDiverged, base_rate_loss

    trainer = DeepTrainer(DeepSettings(model=model, lr=lr, epochs=15, seed=SEED), device)
    diverged = False
    try:
        trainer.fit(train, valid)
    except TrainingDiverged:
        diverged = True
    history, start = trainer.history, trainer.guard.start
    arm = {"model": model, "lr": lr, "epochs": len(history), "diverged": diverged,
           "base_valid_logloss": base_rate_loss(True, train.labels > 0.5, valid.labels > 0.5),
           "start_valid_logloss": start,
           "first_valid_logloss": history[0]["valid_logloss"] if history else None,
           "best_valid_logloss": min((r["valid_logloss"] for r in history), default=start),
           "valid_logloss": [r["valid_logloss"] for r in history],
           "seconds": sum(r["seconds"] for r in history)}
    if test is not None:
        probability = trainer.predict(test)
        positive = test.labels > 0.5
        arm.update(test_logloss=metrics.logloss(probability, positive), test_auc=metrics.auc(probability, positive),
                   base_test_logloss=base_rate_loss(True, train.labels > 0.5, positive))
    return arm


def report(result):
    """A row per data set and model: the base rate's validation logloss, then each table lr's best
    validation logloss (and iPinYou's test AUC); † where the divergence guard stopped the run."""
    rates = sorted({a["lr"] for a in result["arms"]}, reverse=True)
    cells = {(a["data"], a["model"], a["lr"]): a for a in result["arms"]}
    rows = []
    for data, model in dict.fromkeys((a["data"], a["model"]) for a in result["arms"]):
        arms = [cells[data, model, lr] for lr in rates]
        rows.append([data, model, f"{arms[0]['base_valid_logloss']:.4f}"] + [
            f"{a['best_valid_logloss']:.4f}" + (f" / {a['test_auc']:.4f}" if "test_auc" in a else "")
            + (" †" if a["diverged"] else "") for a in arms])
    return table(["data", "model", "base rate's"] + [f"lr {lr:g}" for lr in rates], rows)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=Path(__file__).resolve().parents[2] / "shared" / "data")
    parser.add_argument("--device", default=None)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    import torch

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    sets = load_sets(args.data)
    if not sets:
        raise SystemExit(f"no shared data under {args.data}")
    arms = []
    for (name, (train, valid, test)), model, lr in itertools.product(sets.items(), MODELS, RATES):
        arms.append({"data": name, **run_arm(model, lr, train, valid, test, device)})
        print({k: v for k, v in arms[-1].items() if k != "valid_logloss"}, flush=True)
    result = {"environment": environment(), "arguments": {"device": device}, "rates": RATES, "arms": arms}
    write("deep_defaults", result, report(result), args.out)


if __name__ == "__main__":
    main()
