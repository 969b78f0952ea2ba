#!/usr/bin/env bash
# The test command: installs what it needs, then runs the whole suite (GPU tests skip without a GPU).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_env.sh
exec .venv/bin/python -m pytest "$@"
