#!/usr/bin/env bash
# CI: build the wheel, install it into a fresh virtual environment and train a model from the
# installed package (outside the source tree), so that what pip installs is what works.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
"$root/.venv/bin/python" -m pip wheel --quiet --no-deps --wheel-dir "$work/dist" "$root"
python3 -m venv "$work/venv"
# torch first and pinned: pip takes the local CPU build instead of a multi-GB CUDA one
"$work/venv/bin/python" -m pip install --quiet "torch==2.13.0"
"$work/venv/bin/python" -m pip install --quiet "$work"/dist/alac-*.whl
cd "$work"
printf '1 1:1 3:1\n-1 2:1 4:1\n1 1:1 4:1\n-1 2:1 3:1\n' > small.svm
"$work/venv/bin/alac" train --model lr --train small.svm --test small.svm --epochs 3 --backend reference \
    --early-stopping none --out run
"$work/venv/bin/alac" predict --model-dir run --data small.svm --output predictions.txt --backend reference
test "$(wc -l < predictions.txt)" -eq 4
echo "wheel: installed and trained from $(ls "$work"/dist)"
