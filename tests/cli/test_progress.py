"""The progress bar on a terminal (a pseudo-terminal here): it moves within an epoch and never shares
a line with the epoch table."""

import fcntl
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios

import pytest

from alac.cli.progress import Progress


def _in_a_terminal(args):
    """(exit status, everything written to the terminal) of `python -m alac ARGS` with stdout and
    stderr on one pseudo-terminal of 120 columns, as a user's shell runs it."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    # every update drawn (tqdm draws at most ten a second by default)
    environment = {**os.environ, "TQDM_MININTERVAL": "0"}
    environment.pop("TRITON_INTERPRET", None)
    process = subprocess.Popen([sys.executable, "-m", "alac", *args], stdout=slave, stderr=slave,
                               stdin=subprocess.DEVNULL, env=environment)
    os.close(slave)
    written = b""
    while select.select([master], [], [], 120)[0]:
        try:
            data = os.read(master, 1 << 16)
        except OSError:      # the terminal closed with the process
            break
        if not data:
            break
        written += data
    os.close(master)
    return process.wait(timeout=60), written.decode("utf-8", "replace")


def test_the_bar_moves_within_an_epoch_and_never_shares_a_line_with_the_table():
    status, written = _in_a_terminal(["train", "--model", "lr", "--synthetic", "20000", "--epochs", "2",
                                      "--optimizer", "sgd", "--backend", "reference"])
    assert status == 0, written[-2000:]
    # frames of the first epoch's bar between its start and its end: it moved as batches trained
    counts = [float(n) for n in re.findall(r"epoch 1:\s+\d+%\|[^|]*\| ([\d.]+)k/32\.0k", written)]
    assert any(0 < count < 32.0 for count in counts), written[:2000]
    # the terminal ends lines with CR LF: what it shows of a line is the text after its last inner CR
    lines = [line.removesuffix("\r") for line in written.split("\n")]
    table = [line for line in lines if "train loss" in line]
    assert len(table) == 2
    for line in table:
        assert line.split("\r")[-1].startswith("epoch   "), repr(line[:300])
    assert lines[-2].split("\r")[-1].startswith('{"valid_logloss"')


def test_without_a_terminal_there_is_no_bar(capsys):
    progress = Progress(3)
    progress.start(100)
    progress.rows_done(40)
    progress({"epoch": 1, "train_loss": 0.5, "seconds": 0.01, "rows_per_s": 1e4})
    progress.close()
    captured = capsys.readouterr()
    assert progress.bar is None and captured.err == ""
    assert captured.out == "epoch   1  train loss 0.50000  10.0 ms (10,000 rows/s)\n"


@pytest.mark.parametrize("rows", [100, None])
def test_the_bar_ends_each_epoch_at_its_share_whatever_its_launches_counted(monkeypatch, rows):
    """A launch's rows count its chunks' padded slots: the bar never passes an epoch's end before the
    epoch's line, which sets it there."""
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    progress = Progress(2)
    progress.start(rows)
    progress.rows_done(250)
    per_epoch = rows or 1
    assert progress.bar.n < per_epoch or rows is None
    progress({"epoch": 1, "train_loss": 0.5, "seconds": 0.01, "rows_per_s": 1e4})
    assert progress.bar.n == per_epoch
    progress.close()
    assert progress.bar is None
