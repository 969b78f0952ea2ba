"""Progress of a run on the command line: one line per epoch on stdout (the epoch table) and, on a
terminal, a tqdm bar on stderr that moves within an epoch (as its launches are queued: each batch on
a CPU, each segment of a cache or each block of streamed data on a GPU) and is cleared before an epoch
line is written, so that the two never share a line."""

from __future__ import annotations

import sys


def format_record(record):
    parts = [f"epoch {record['epoch']:>3}", f"train loss {record['train_loss']:.5f}"]
    parts += [f"{k.replace('_', ' ', 1)} {v:.5f}" for k, v in record.items() if k.startswith(("valid_", "test_"))]
    parts.append(f"{1000 * record['seconds']:.1f} ms ({record['rows_per_s']:,.0f} rows/s)")
    return "  ".join(parts)


class Progress:
    """The epoch table on stdout; on a terminal (stderr a tty) also the bar, over epochs x rows."""

    def __init__(self, epochs):
        """epochs: the epoch the run ends at."""
        self.epochs = epochs
        self.live = sys.stderr.isatty()
        self.bar, self.rows, self._per_epoch = None, None, 1

    def start(self, rows=None, first_epoch=0):
        """A bar for one training (a race's arm has its own): rows, the training rows of an epoch (None:
        the bar counts epochs); first_epoch: the epochs done before (a resumed run)."""
        self.close()
        if self.live:
            from tqdm import tqdm

            self.rows = rows
            unit, self._per_epoch = ("rows", rows) if rows else ("epochs", 1)
            self.bar = tqdm(total=self.epochs * self._per_epoch, initial=first_epoch * self._per_epoch, unit=unit,
                            unit_scale=True, file=sys.stderr, leave=False, dynamic_ncols=True,
                            desc=f"epoch {first_epoch + 1}")

    def __call__(self, record):
        """An epoch ended: its line in the table; the bar set to the epoch's end (a launch's rows count
        its chunks' slots, padding included)."""
        line = format_record(record)
        if self.bar is None:
            print(line, flush=True)
            return
        self.bar.write(line, file=sys.stdout)
        self.bar.n = record["epoch"] * self._per_epoch
        self.bar.set_description(f"epoch {min(record['epoch'] + 1, self.epochs)}", refresh=False)
        self.bar.set_postfix_str(f"loss {record['train_loss']:.5f}")

    def rows_done(self, rows):
        """Rows of the current epoch queued: the bar moves by them, within its epoch."""
        if self.bar is not None and self.rows:
            epoch_end = (int(self.bar.n) // self._per_epoch + 1) * self._per_epoch
            self.bar.update(min(rows, max(epoch_end - int(self.bar.n) - 1, 0)))

    def blocks(self, epoch, queued, blocks, latest):
        """A streamed epoch's blocks and the latest block loss the GPU has reported."""
        if self.bar is not None:
            done = (epoch - 1) * self._per_epoch + self._per_epoch * queued // max(blocks, 1)
            self.bar.update(max(min(done, epoch * self._per_epoch - 1) - int(self.bar.n), 0))
            self.bar.set_description(f"epoch {epoch}: block {queued}/{blocks}", refresh=False)
            if latest is not None:
                self.bar.set_postfix_str(f"block {latest[0]} loss {latest[1]:.5f}")

    def close(self):
        """The bar cleared from the terminal (the run's last lines follow)."""
        if self.bar is not None:
            self.bar.close()
            self.bar = None
