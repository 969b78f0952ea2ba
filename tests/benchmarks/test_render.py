"""BENCHMARKS.md and the README's performance table are what benchmarks/render.py makes of the
committed results: neither can drift from the measurements."""

from pathlib import Path

from benchmarks.render import headline_table, render

ROOT = Path(__file__).resolve().parents[2]


def test_benchmarks_md_is_generated_from_the_results():
    assert (ROOT / "BENCHMARKS.md").read_text() == render(), "run: PYTHONPATH=. python benchmarks/render.py"


def test_the_readme_table_is_generated_from_the_results():
    assert headline_table() in (ROOT / "README.md").read_text()
