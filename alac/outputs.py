"""Writing results safely: output folders and files checked before long work starts, and files
written atomically (a temporary file beside the target, flushed and fsync'ed, renamed over it, the
folder fsync'ed), so a crash at any moment leaves the previous file or the new one, never a torn one.
"""

from __future__ import annotations

import csv
import io
import json
import os
import tempfile
from pathlib import Path

from alac.errors import AlacError


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


def _pid_alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale_temporaries(path):
    """Temporaries of `path` left by writers that died (kill -9 mid-write): their process is gone."""
    path = Path(path)
    for temporary in path.parent.glob(f".{path.name}.*.tmp"):
        pid = temporary.name[len(path.name) + 2:-len(".tmp")]
        if pid.isdigit() and int(pid) != os.getpid() and not _pid_alive(int(pid)):
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


def write_metrics_and_history(folder, final, history):
    """folder/metrics.json (the final metrics) and folder/history.csv (a row per epoch record, the
    epoch first), each written atomically."""
    folder = Path(folder)
    write_text_atomically(folder / "metrics.json", json.dumps(final, indent=2) + "\n")
    keys = sorted({k for record in history for k in record}, key=lambda k: (k != "epoch", k))
    text = io.StringIO()
    writer = csv.DictWriter(text, fieldnames=keys)
    writer.writeheader()
    writer.writerows(history)
    write_text_atomically(folder / "history.csv", text.getvalue())


def _probe_folder(folder):
    try:
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".alac-write-check-"):
            pass
    except OSError as error:
        raise OutputError(f"{folder}: cannot write there ({error.strerror or error})") from None


def check_output_folder(folder, files=()):
    """Fail now, not after training, if folder cannot hold files (names inside it): it is made if
    missing, and it and every named file that exists must be writable (files, not folders)."""
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise OutputError(f"{folder}: exists and is not a folder; give a folder for the outputs")
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise OutputError(f"{folder}: cannot make this folder ({error.strerror or error})") from None
    _probe_folder(folder)
    for name in files:
        target = folder / name
        if target.is_dir():
            raise OutputError(f"{target}: is a folder; alac writes a file there")


def check_output_file(path):
    """Fail now if a file cannot be written at path (its folder must exist and be writable)."""
    path = Path(path)
    if path.is_dir():
        raise OutputError(f"{path}: is a folder; give a file name")
    folder = path.parent
    if not folder.is_dir():
        raise OutputError(f"{path}: the folder {folder} does not exist")
    _probe_folder(folder)
