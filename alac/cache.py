"""An on-disk cache of array bundles (parsed data sets, layouts), keyed by content and options.

An entry is a folder of .npy files plus meta.json, written under a temporary name and renamed into
place, so a reader sees a whole entry or none, and a crash mid-write leaves only a temporary folder.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import uuid
from pathlib import Path

import numpy as np

# Bump when the arrays an entry holds change meaning, so stale entries are not read.
CACHE_FORMAT_VERSION = 1


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
            # Copy-on-write maps: pages are read when first used (a layout loaded for training never
            # touches the cached data set's arrays), and writes stay private to this process.
            arrays = {name: np.load(folder / f"{name}.npy", mmap_mode="c") for name in meta["arrays"]}
            return cls.from_numpy_dict(arrays, meta["meta"])
        except (OSError, ValueError, KeyError, TypeError):
            # A damaged entry (disk full, manual edits): drop it so the rebuilt one can take its place.
            shutil.rmtree(folder, ignore_errors=True)
            return None

    def store(self, key, obj):
        arrays, meta = obj.to_numpy_dict()
        self.root.mkdir(parents=True, exist_ok=True)
        temporary = self.root / f".{key}.{uuid.uuid4().hex}.tmp"
        temporary.mkdir()
        try:
            for name, array in arrays.items():
                np.save(temporary / f"{name}.npy", array)
            (temporary / "meta.json").write_text(json.dumps({"arrays": sorted(arrays), "meta": meta}))
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
