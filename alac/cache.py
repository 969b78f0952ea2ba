"""An on-disk cache of array bundles (parsed data sets, layouts), keyed by content and options.

An entry is a folder of .npy files plus meta.json, written under a temporary name and renamed into
place, so a reader sees a whole entry or none; a crash mid-write leaves only a temporary folder,
which the next writer removes. meta.json records every array file's xxh3, checked when the entry is
read: a changed or damaged entry is dropped and built again, never used.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import numpy as np

from alac.checksums import file_checksum
from alac.temporary import remove_stale_folders, temporary_folder_name

# Bump when the arrays an entry holds change meaning, so stale entries are not read.
CACHE_FORMAT_VERSION = 2


def default_cache_dir():
    return Path(os.environ.get("ALAC_CACHE_DIR") or Path.home() / ".cache" / "alac")


class DiskCache:
    def __init__(self, root=None):
        self.root = Path(root) if root is not None else default_cache_dir()

    @staticmethod
    def key(kind, **parts):
        text = json.dumps({"kind": kind, "version": CACHE_FORMAT_VERSION, **parts}, sort_keys=True,
                          default=str)
        return f"{kind}-{hashlib.sha256(text.encode()).hexdigest()[:32]}"

    def load(self, key, cls):
        """cls.from_numpy_dict of the entry, or None when it is absent or unreadable."""
        folder = self.root / key
        if not folder.is_dir():
            return None
        try:
            meta = json.loads((folder / "meta.json").read_text())
            if any(file_checksum(folder / f"{name}.npy") != meta["files"][name] for name in meta["arrays"]):
                raise ValueError("an array file does not match its checksum")
            # Copy-on-write maps: no copy in this process's memory beside the page cache the checksums
            # read through, and writes stay private to this process.
            arrays = {name: np.load(folder / f"{name}.npy", mmap_mode="c") for name in meta["arrays"]}
            return cls.from_numpy_dict(arrays, meta["meta"])
        except (OSError, ValueError, KeyError, TypeError):
            # A damaged entry (disk full, manual edits): drop it so the rebuilt one can take its place.
            shutil.rmtree(folder, ignore_errors=True)
            return None

    def store(self, key, obj):
        arrays, meta = obj.to_numpy_dict()
        self.root.mkdir(parents=True, exist_ok=True)
        remove_stale_folders(self.root)
        temporary = self.root / temporary_folder_name(key)
        temporary.mkdir()
        try:
            for name, array in arrays.items():
                np.save(temporary / f"{name}.npy", array)
            files = {name: file_checksum(temporary / f"{name}.npy") for name in arrays}
            (temporary / "meta.json").write_text(json.dumps({"arrays": sorted(arrays), "meta": meta, "files": files}))
            try:
                os.rename(temporary, self.root / key)
            except OSError:
                pass  # another process stored the same entry first; keep theirs
        finally:
            shutil.rmtree(temporary, ignore_errors=True)

    def get_or_build(self, key, cls, build):
        """(object, hit): the cached object, or build(), stored for next time."""
        cached = self.load(key, cls)
        if cached is not None:
            return cached, True
        obj = build()
        self.store(key, obj)
        return obj, False
