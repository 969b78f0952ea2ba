"""LR and FM (k = 8) on the real shared data sets, train file -> test file, side by side.

    PYTHONPATH=. python benchmarks/zoo_real_data.py [--data ../shared/data] [--backend triton] [--out DIR]

Plain sync SGD with one setting per data set (below); the test metrics after the last epoch. The
reference results in the data README are L2-regularised LR solved to optimality, for scale.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.report import environment, table, write  # noqa: E402

# (name, train, test, options): the learning rate and batch size are the ones the zoo tests use.
SETS = [
    ("ipinyou", "ipinyou/train.fm.txt", "ipinyou/test.fm.txt", {"lr": {"lr": 1.0, "fm": 0.5}, "batch_size": 1024,
                                                               "normalize": False}),
    ("20news", "20news/20news.binary.train.svm", "20news/20news.binary.test.svm",
     {"lr": {"lr": 2.0, "fm": 2.0}, "batch_size": 128, "normalize": True}),
]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", default=str(Path(__file__).resolve().parents[2] / "shared" / "data"))
    parser.add_argument("--backend", default="triton")
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--out", default=os.environ.get("OUT"))
    args = parser.parse_args()

    from alac.data import load_libsvm_files
    from alac.models import zoo_model
    from alac.plan import Plan
    from alac.train import Trainer

    results = []
    for name, train_file, test_file, options in SETS:
        train, test = load_libsvm_files([Path(args.data) / train_file, Path(args.data) / test_file])
        if options["normalize"]:
            train, test = train.normalize_rows(), test.normalize_rows()
        for model_name in ("lr", "fm"):
            model = zoo_model(model_name)
            trainer = Trainer(model, lr=options["lr"][model_name], epochs=args.epochs,
                              plan=Plan(batch_size=options["batch_size"]), backend=args.backend)
            started = time.perf_counter()
            trainer.fit(train)
            seconds = time.perf_counter() - started
            metrics = trainer.evaluate(test)
            results.append({"data": name, "model": model_name, "backend": trainer.backend,
                            "lr": options["lr"][model_name], "batch_size": options["batch_size"],
                            "normalize": options["normalize"], "epochs": args.epochs, "train_s": seconds,
                            **metrics})
            print(results[-1], flush=True)
    env = environment()
    rows = [[r["data"], r["model"], f"{r['lr']:g}", r["batch_size"], f"{r['logloss']:.4f}", f"{r['auc']:.4f}",
             f"{r['accuracy']:.4f}", f"{r['train_s']:.2f}"] for r in results]
    markdown = "\n".join([
        f"Test metrics after {args.epochs} epochs of sync SGD (backend {results[0]['backend']}, {env['device']}, "
        f"{env['date']}); 20news rows L2-normalised.", "",
        table(["data", "model", "lr", "batch", "test logloss", "test AUC", "test accuracy", "train s"], rows)])
    write("zoo_real_data", {"device": env["device"], "environment": env, "results": results}, markdown, args.out)
    print(markdown)


if __name__ == "__main__":
    main()
