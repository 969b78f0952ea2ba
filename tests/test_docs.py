"""Every guide in docs/ opens with a block of commands on small data, marked for CI: each block runs
here as a user would type it (bash, `alac` the installed command), so that the guides cannot go stale."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MARK = "<!-- ci: tests/test_docs.py runs this block on small data -->"
GUIDES = sorted((ROOT / "docs").glob("*.md"))


def _blocks(path):
    return re.findall(re.escape(MARK) + r"\n```bash\n(.*?)```", path.read_text(), flags=re.DOTALL)


def test_every_guide_but_the_layout_has_a_block_ci_runs():
    assert [path.name for path in GUIDES if not _blocks(path)] == ["architecture.md"]


@pytest.mark.parametrize("guide", [path for path in GUIDES if _blocks(path)], ids=lambda path: path.stem)
def test_a_guides_commands_run(guide, tmp_path):
    environment = {**os.environ, "PYTHONPATH": str(ROOT)}
    environment.pop("TRITON_INTERPRET", None)
    # `alac` as installed, wherever this Python's package is (a checkout on PYTHONPATH needs no install)
    script = f'set -euo pipefail\nalac() {{ "{sys.executable}" -m alac "$@"; }}\n' + \
        f'python() {{ "{sys.executable}" "$@"; }}\ntorchrun() {{ "{sys.executable}" -m torch.distributed.run "$@"; }}\n'
    for block in _blocks(guide):
        result = subprocess.run(["bash", "-c", script + block], cwd=tmp_path, capture_output=True, text=True,
                                env=environment, timeout=300)
        assert result.returncode == 0, f"{guide.name}:\n{block}\n{result.stdout[-2000:]}\n{result.stderr[-3000:]}"
