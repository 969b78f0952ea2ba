"""Progress of a run on the command line: one line per epoch (the epoch table) and, on a terminal, a bar."""

from __future__ import annotations

import sys


def format_record(record):
    parts = [f"epoch {record['epoch']:>3}", f"train loss {record['train_loss']:.5f}"]
    parts += [f"{k.replace('_', ' ', 1)} {v:.5f}" for k, v in record.items() if k.startswith(("valid_", "test_"))]
    parts.append(f"{1000 * record['seconds']:.1f} ms ({record['rows_per_s']:,.0f} rows/s)")
    return "  ".join(parts)


class Progress:
    """One line per epoch on stdout (the epoch table); on a terminal also a bar on stderr."""

    def __init__(self, epochs):
        self.epochs = epochs
        self.live = sys.stderr.isatty()

    def __call__(self, record):
        if self.live:
            done = int(30 * record["epoch"] / max(self.epochs, 1))
            print(f"\r[{'#' * done}{'.' * (30 - done)}] epoch {record['epoch']}/{self.epochs}  "
                  f"{record['rows_per_s']:,.0f} rows/s  loss {record['train_loss']:.5f}", end="", file=sys.stderr)
            if record["epoch"] >= self.epochs:
                print(file=sys.stderr)
        print(format_record(record), flush=True)

    def blocks(self, epoch, queued, blocks, latest):
        """A streamed epoch's blocks and the latest block loss the GPU has reported, on a terminal."""
        if self.live:
            done = int(30 * queued / max(blocks, 1))
            loss = "" if latest is None else f"  block {latest[0]} loss {latest[1]:.5f}"
            print(f"\r[{'#' * done}{'.' * (30 - done)}] epoch {epoch}: block {queued}/{blocks}{loss}", end="",
                  file=sys.stderr, flush=True)
