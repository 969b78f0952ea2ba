"""One concept per module: no module of the package grows past ~500 lines."""

from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "alac"
LIMIT = 520


def test_no_module_is_over_the_limit():
    sizes = {str(path.relative_to(PACKAGE)): len(path.read_text().splitlines()) for path in PACKAGE.rglob("*.py")}
    assert sizes and not {name: n for name, n in sizes.items() if n > LIMIT}
