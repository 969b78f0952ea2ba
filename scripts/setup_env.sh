#!/usr/bin/env bash
# Creates .venv (once) with alac and its test dependencies. torch is installed first and pinned,
# so that pip does not pull a multi-GB CUDA build on a machine that has a local CPU wheel.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x .venv/bin/python ]; then
    python3 -m venv .venv
fi
stamp=.venv/.alac-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
    .venv/bin/python -m pip install --quiet --upgrade pip
    .venv/bin/python -c "import torch" 2>/dev/null || .venv/bin/python -m pip install --quiet "torch==2.13.0"
    .venv/bin/python -m pip install --quiet -e ".[test]"
    touch "$stamp"
fi
