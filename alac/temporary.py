"""Temporary files and folders of writers: named with the writer's process id, so that the next
writer removes those whose writer died (kill -9 mid-write) and leaves a live writer's alone."""

from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path


def pid_alive(pid):
    """Whether a process runs (a zombie, killed and not yet reaped by its parent, does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            return stat.read().rsplit(b")", 1)[1].split()[0] not in (b"Z", b"X")
    except (OSError, IndexError):
        return True


def temporary_folder_name(name):
    """`.NAME.PID.RANDOM.tmp`: a folder written beside NAME before it is renamed into place."""
    return f".{name}.{os.getpid()}.{uuid.uuid4().hex[:12]}.tmp"


def _writer_of(temporary):
    """The pid in a temporary_folder_name (None when the name is not one)."""
    parts = temporary.name[:-len(".tmp")].rsplit(".", 2)
    return int(parts[1]) if len(parts) == 3 and parts[1].isdigit() and len(parts[2]) == 12 else None


def remove_stale_folders(parent, name="*"):
    """Remove the temporary folders of NAME (of every name with the default) in parent whose writer
    is gone; returns how many."""
    removed = 0
    parent = Path(parent)
    if not parent.is_dir():
        return 0
    for temporary in parent.glob(f".{name}.*.tmp"):
        pid = _writer_of(temporary)
        if temporary.is_dir() and pid is not None and pid != os.getpid() and not pid_alive(pid):
            shutil.rmtree(temporary, ignore_errors=True)
            removed += 1
    return removed
