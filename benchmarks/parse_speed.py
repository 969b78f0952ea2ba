"""Parsing speed of alac's loaders against scikit-learn's load_svmlight_file, side by side.

    PYTHONPATH=. python benchmarks/parse_speed.py [--data ../shared/data] [--target-mb 200] [--out DIR]

Each input is a shared data set repeated until it is at least --target-mb; every loader parses the
same file in the same process, best of --repeats runs. Also measures the disk cache of
`load_layout`: a first load (parse + layout + store) against a second (hash + read).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.report import environment, table, write


def _repeat_file(source, target_bytes, folder):
    data = Path(source).read_bytes()
    copies = -(-target_bytes // len(data))
    path = Path(folder) / f"{Path(source).name}.x{copies}"
    with open(path, "wb") as out:
        for _ in range(copies):
            out.write(data)
    return path, copies


def _best(function, repeats):
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        result = function()
        times.append(time.perf_counter() - started)
    return min(times), result


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", default=str(Path(__file__).resolve().parents[2] / "shared" / "data"))
    parser.add_argument("--target-mb", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", default=os.environ.get("OUT"))
    args = parser.parse_args()

    from sklearn.datasets import load_svmlight_file

    from alac.data import load_libsvm
    from alac.runtime.movement.layout import LayoutOptions, load_layout

    inputs = [("a9a", Path(args.data) / "a9a/a9a", 123),
              ("20news", Path(args.data) / "20news/20news.binary.train.svm", 55661)]
    folder = tempfile.mkdtemp(prefix="alac-parse-")
    results = []
    try:
        load_libsvm(inputs[0][1])  # compile (or load the cached) scanner before timing
        for name, source, n_features in inputs:
            path, copies = _repeat_file(source, args.target_mb << 20, folder)
            megabytes = path.stat().st_size / 1e6
            row = {"input": name, "copies": copies, "megabytes": megabytes}
            seconds, theirs = _best(lambda: load_svmlight_file(str(path), n_features=n_features,
                                                               dtype="float32"), args.repeats)
            row["sklearn_s"] = seconds
            for threads in (1, os.cpu_count()):
                os.environ["ALAC_PARSE_THREADS"] = str(threads)
                seconds, ours = _best(lambda: load_libsvm(path, n_features=n_features), args.repeats)
                row[f"alac_{threads}_threads_s"] = seconds
            os.environ.pop("ALAC_PARSE_THREADS")
            assert (ours.to_scipy() != theirs[0]).nnz == 0, "alac and scikit-learn disagree"
            cache = Path(folder) / "cache"
            started = time.perf_counter()
            load_layout(path, options=LayoutOptions(), cache_dir=cache, n_features=n_features)
            row["first_load_layout_s"] = time.perf_counter() - started
            row["cached_load_layout_s"], _ = _best(
                lambda: load_layout(path, options=LayoutOptions(), cache_dir=cache, n_features=n_features),
                args.repeats)
            results.append(row)
            del theirs, ours
            path.unlink()
    finally:
        shutil.rmtree(folder, ignore_errors=True)

    env = environment()
    cores = env["cpu_count"]
    rows = []
    for r in results:
        mb = r["megabytes"]
        rows.append([f"{r['input']} ×{r['copies']} ({mb:.0f} MB)", f"{mb / r['sklearn_s']:.0f}",
                     f"{mb / r['alac_1_threads_s']:.0f}", f"{mb / r[f'alac_{cores}_threads_s']:.0f}",
                     f"{r['sklearn_s'] / r['alac_1_threads_s']:.1f}×",
                     f"{r['first_load_layout_s']:.2f} s / {r['cached_load_layout_s']:.3f} s "
                     f"({r['first_load_layout_s'] / r['cached_load_layout_s']:.0f}×)"])
    markdown = "\n".join([
        f"Parsing LIBSVM text, MB/s (best of {args.repeats}); {env['cpu_count']} CPU cores, "
        f"{env['platform']}, numba {env['numba']}, {env['date']}.", "",
        table(["input", "scikit-learn", "alac, 1 thread", f"alac, {cores} threads",
               "alac 1 thread vs sklearn", "load_layout first / cached"], rows)])
    write("parse_speed", {"environment": env, "results": results}, markdown, args.out)
    print(markdown)


if __name__ == "__main__":
    main()
