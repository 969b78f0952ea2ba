"""The command line's argument parser: argparse with one-line errors, the same for every command and
model family."""

from __future__ import annotations

import argparse


class Parser(argparse.ArgumentParser):
    """argparse with one-line errors: the error and where the options are listed, not the usage."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")
