"""Writing results safely: output folders and files checked before long work starts, and files
written atomically (a temporary file beside the target, flushed and fsync'ed, renamed over it, the
folder fsync'ed), so a crash at any moment leaves the previous file or the new one, never a torn one.

A run's output folder holds one run's files: `RunOutputs` writes them into a staging folder inside
it, then commits the set by one atomic write of a journal naming it, moves the files in and removes
the previous run's files that this run did not write. A crash before the journal leaves the previous
run's set; a crash after it is rolled forward by the next alac that opens the folder (`settle`).
"""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
import tempfile
from pathlib import Path

from alac.errors import AlacError
from alac.temporary import pid_alive, remove_stale_folders, temporary_folder_name


class OutputError(AlacError):
    """An output path that cannot be written."""


def _fsync_folder(folder):
    try:
        handle = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(handle)
    finally:
        os.close(handle)


def _temporary_name(path, pid):
    return path.with_name(f".{path.name}.{pid}.tmp")


def remove_stale_temporaries(path):
    """Temporaries of `path` left by writers that died (kill -9 mid-write): their process is gone."""
    path = Path(path)
    for temporary in path.parent.glob(f".{path.name}.*.tmp"):
        pid = temporary.name[len(path.name) + 2:-len(".tmp")]
        if pid.isdigit() and int(pid) != os.getpid() and not pid_alive(int(pid)):
            try:
                temporary.unlink()
            except OSError:
                pass


def write_atomically(path, write):
    """Call write(binary file) on a temporary beside path, then put it in path's place."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temporaries(path)
    temporary = _temporary_name(path, os.getpid())
    try:
        with open(temporary, "wb") as out:
            write(out)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, path)
        _fsync_folder(path.parent)
    except OSError as error:
        raise OutputError(f"{path}: cannot write ({error.strerror or error})") from None
    finally:
        if temporary.exists():
            temporary.unlink()


def write_text_atomically(path, text):
    write_atomically(path, lambda out: out.write(text.encode()))


def split_metrics(evaluate, valid, test, train):
    """The final metrics of every model family, each key naming its split: evaluate(data set) of the
    validation and test sets that exist (valid_auc, test_logloss, ...), else of the training set
    (train_...)."""
    final = {}
    for split, dataset in (("valid", valid), ("test", test)):
        if dataset is not None:
            final.update({f"{split}_{name}": value for name, value in evaluate(dataset).items()})
    if not final:
        final = {f"train_{name}": value for name, value in evaluate(train).items()}
    return final


def final_line(final):
    """The run's last line: its final metrics as one JSON object, floats to 6 places (a duality gap,
    which lives far below that, as it is)."""
    return json.dumps({k: round(v, 6) if isinstance(v, float) and k != "duality_gap" else v
                       for k, v in final.items()})


def write_metrics_and_history(outputs, final, history):
    """metrics.json (the final metrics) and history.csv (a row per epoch record, the epoch first) of a
    RunOutputs."""
    outputs.write_text("metrics.json", json.dumps(final, indent=2) + "\n")
    keys = sorted({k for record in history for k in record}, key=lambda k: (k != "epoch", k))
    text = io.StringIO()
    writer = csv.DictWriter(text, fieldnames=keys)
    writer.writeheader()
    writer.writerows(history)
    outputs.write_text("history.csv", text.getvalue())


# Every file a run of any model family writes into its output folder: a commit removes those of them
# that its run did not write, so that no file of an earlier run stays beside the new ones.
RUN_FILES = ("model.alac", "model.pt", "metrics.json", "history.csv", "loss.png", "hit_ratio.csv", "weights.npy")
JOURNAL = ".alac-commit.json"
_STAGING = "alac-run"


class RunOutputs:
    """One run's output files, staged inside `folder` and switched in together by commit()."""

    def __init__(self, folder):
        self.folder = Path(folder)
        settle(self.folder)
        self.staging = self.folder / temporary_folder_name(_STAGING)
        try:
            self.staging.mkdir()
        except OSError as error:
            raise OutputError(f"{self.folder}: cannot write there ({error.strerror or error})") from None
        self.written = []

    def write(self, name, write):
        """Stage `name`: write(binary file)."""
        if name not in RUN_FILES:
            raise ValueError(f"{name} is not one of the run files {RUN_FILES}")
        write_atomically(self.staging / name, write)
        self.written.append(name)

    def write_text(self, name, text):
        self.write(name, lambda out: out.write(text.encode()))

    def commit(self):
        """Switch the staged files in, in one step: the journal's atomic write is the commit."""
        stale = [name for name in RUN_FILES if name not in self.written and (self.folder / name).exists()]
        write_text_atomically(self.folder / JOURNAL, json.dumps(
            {"staging": self.staging.name, "files": self.written, "remove": stale}))
        _apply_journal(self.folder)

    def discard(self):
        shutil.rmtree(self.staging, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, kind, error, trace):
        if kind is None:
            self.commit()
        else:
            self.discard()


def _apply_journal(folder):
    """Complete a committed set: move its staged files in, remove the earlier run's others."""
    journal = folder / JOURNAL
    try:
        entry = json.loads(journal.read_text())
        staging, files, remove = folder / entry["staging"], list(entry["files"]), list(entry["remove"])
        if not staging.name.startswith(f".{_STAGING}.") or "/" in staging.name or \
                not {*files, *remove} <= set(RUN_FILES):
            raise ValueError("names outside the run files")
    except (ValueError, KeyError, TypeError) as error:
        raise OutputError(f"{journal}: a damaged record of an interrupted write ({error}); remove it and run "
                          "again") from None
    try:
        for name in files:
            if (staging / name).exists():
                os.replace(staging / name, folder / name)
        for name in remove:
            (folder / name).unlink(missing_ok=True)
        _fsync_folder(folder)
        journal.unlink()
        _fsync_folder(folder)
    except OSError as error:
        raise OutputError(f"{folder}: cannot complete the last run's write ({error.strerror or error})") from None
    shutil.rmtree(staging, ignore_errors=True)


def settle(folder):
    """Bring an output folder to one run's files: a committed set whose moves a crash interrupted is
    completed, and staging folders of writers that died before their commit are removed."""
    folder = Path(folder)
    if not folder.is_dir():
        return
    if (folder / JOURNAL).exists():
        _apply_journal(folder)
    remove_stale_folders(folder, _STAGING)


def _probe_folder(folder):
    try:
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".alac-write-check-"):
            pass
    except OSError as error:
        raise OutputError(f"{folder}: cannot write there ({error.strerror or error})") from None


def check_output_folder(folder, files=RUN_FILES):
    """Fail now, not after training, if folder cannot hold files (names inside it): it is made if
    missing, and it and every named file that exists must be writable (files, not folders). An
    interrupted earlier run's write is completed (settle)."""
    if not str(folder).strip():
        raise OutputError("the output folder's name is empty: give a folder (--out DIR)")
    folder = Path(folder)
    try:
        if folder.exists() and not folder.is_dir():
            raise OutputError(f"{folder}: exists and is not a folder; give a folder for the outputs")
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise OutputError(f"{folder}: cannot make this folder ({error.strerror or error})") from None
    _probe_folder(folder)
    for name in files:
        target = folder / name
        if target.is_dir():
            raise OutputError(f"{target}: is a folder; alac writes a file there")
    settle(folder)


def check_output_file(path):
    """Fail now if a file cannot be written at path (its folder must exist and be writable)."""
    if not str(path).strip():
        raise OutputError("the output file's name is empty: give a file")
    path = Path(path)
    try:
        if path.is_dir():
            raise OutputError(f"{path}: is a folder; give a file name")
        folder = path.parent
        if not folder.is_dir():
            raise OutputError(f"{path}: the folder {folder} does not exist")
        path.exists()
    except OSError as error:
        raise OutputError(f"{path}: cannot use this name ({error.strerror or error})") from None
    _probe_folder(folder)
    if len(path.name.encode()) > 255 - len(f"..{os.getpid()}.tmp"):
        raise OutputError(f"{path}: cannot use this name (File name too long)")
