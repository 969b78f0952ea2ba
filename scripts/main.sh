#!/usr/bin/env bash
# The main job: installs what it needs, then trains a zoo model.
#   bash scripts/main.sh                      logistic regression on the built-in synthetic data
#   bash scripts/main.sh fm --train F --test T   any zoo model (models/*.py) on your files
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_env.sh
model=lr
if [ "$#" -gt 0 ] && [ "${1#-}" = "$1" ]; then
    model=$1
    shift
fi
if [ ! -f "models/$model.py" ]; then
    echo "alac: error: unknown model '$model'; choose one of: $(cd models && ls *.py | sed 's/\.py$//' | tr '\n' ' ')" >&2
    exit 2
fi
exec .venv/bin/python "models/$model.py" "$@"
