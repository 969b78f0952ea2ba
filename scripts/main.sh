#!/usr/bin/env bash
# The main job: installs what it needs, then trains a zoo model with `alac train`.
#   bash scripts/main.sh                         logistic regression on the built-in synthetic data
#   bash scripts/main.sh fm --train F --test T   any zoo model (lr, lsvm, lsr, fm, poisson) on your files
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_env.sh
model=lr
if [ "$#" -gt 0 ] && [ "${1#-}" = "$1" ]; then
    model=$1
    shift
fi
exec .venv/bin/alac train --model "$model" "$@"
