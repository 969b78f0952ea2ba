#!/usr/bin/env bash
# The main job: installs what it needs, then runs `alac` with the given arguments. Without
# arguments it lays out the built-in synthetic Criteo-shaped data set and prints its statistics.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_env.sh
if [ "$#" -eq 0 ]; then
    set -- data stats --synthetic 1000000
fi
exec .venv/bin/python -m alac "$@"
