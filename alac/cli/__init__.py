"""The `alac` command line: one parser dialect (alac.cli.parser) and one output dialect for every
model family; `main` is the console script."""

from alac.cli.commands import main

__all__ = ["main"]
