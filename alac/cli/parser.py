"""The command line's argument parser: argparse with one-line errors, the same for every command and
model family."""

from __future__ import annotations

import argparse


class HelpFormatter(argparse.HelpFormatter):
    """Every option's default in its help line, unless the line already says it (or there is none)."""

    def _get_help_string(self, action):
        text = action.help or ""
        default = action.default
        shown = not (default is None or default is False or default == "" or default is argparse.SUPPRESS)
        if action.option_strings and "default" not in text and shown:
            text += f"{' ' if text else ''}(default: {default})"
        return text


class Parser(argparse.ArgumentParser):
    """argparse with one-line errors: the error and where the options are listed, not the usage; its
    help shows every option's default."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def train_groups(parser, execution="execution"):
    """(data, model, optimizer and epochs, execution, several GPUs, output): the option groups of
    `alac train --help` for every model family, in that order (execution: the family's title)."""
    return tuple(parser.add_argument_group(title) for title in
                 ("data", "model", "optimizer and epochs", execution, "several GPUs (under torchrun)", "output"))
