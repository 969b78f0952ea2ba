"""Generated kernel source on disk, keyed by its content hash, imported as a Python module.

Triton compiles a kernel from its function's source text, found through the function's file name, so
generated kernels live in a real file: `<cache>/kernels/<kernel prefix>_<source hash>.py`. What runs
is always the source generated in this process; a cache file that differs from it is replaced.

Triton decides at import time whether @triton.jit compiles for the GPU or builds interpreted
functions (TRITON_INTERPRET=1), for its own standard library too, so one process runs kernels
either on the GPU or in the interpreter, never both. `ensure_mode` says so clearly when asked for
the other.
"""

from __future__ import annotations

import hashlib
import linecache
import os
import sys
import threading
import types
from pathlib import Path

from alac.cache import default_cache_dir
from alac.errors import AlacError

_LOCK = threading.Lock()
_MODULES = {}


def kernel_cache_dir():
    return default_cache_dir() / "kernels"


def source_path(generated, folder=None):
    digest = hashlib.sha256(generated.source.encode()).hexdigest()[:16]
    return Path(folder or kernel_cache_dir()) / f"alac_{generated.model}_{generated.ir_hash[:8]}_{digest}.py"


def write_source(generated, folder=None):
    """Write the source file (atomically) unless one with exactly this content is there (a file
    whose content no longer matches the hash in its name is replaced); return its path."""
    path = source_path(generated, folder)
    try:
        current = path.read_text() if path.is_file() else None
    except (OSError, UnicodeDecodeError):
        current = None
    if current != generated.source:
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_suffix(f".{os.getpid()}.tmp")
        temporary.write_text(generated.source)
        os.replace(temporary, path)
    return path


def triton_installed():
    """Whether Triton can be imported (it ships for Linux only; the reference backend needs none)."""
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return True


def interpreter_active():
    """True when this process imported Triton in interpreter mode."""
    if "triton" not in sys.modules:
        return os.environ.get("TRITON_INTERPRET", "0") == "1"
    import triton.language as tl
    from triton.runtime.interpreter import InterpretedFunction

    return isinstance(tl.zeros, InterpretedFunction)


def ensure_mode(interpret):
    if interpret != interpreter_active():
        want = "TRITON_INTERPRET=1" if interpret else "TRITON_INTERPRET unset (or 0)"
        raise AlacError(f"backend '{'interpret' if interpret else 'triton'}' needs {want} before Triton is "
                        "first imported; Triton in this process runs the other way. Start a fresh process "
                        f"with {want} (the alac command line and zoo scripts do this for you).")


def load_module(generated, interpret=False):
    """The imported module of a generated source (cached per process). It runs the source held in
    memory, never what the cache file holds: the file (checked and rewritten by write_source) is
    only where Triton finds the kernels' text, and linecache serves it the same verified text."""
    ensure_mode(interpret)
    path = write_source(generated)
    with _LOCK:
        if path in _MODULES:
            return _MODULES[path]
        source = generated.source
        # an entry without a modification time is never re-read from disk (linecache.checkcache)
        linecache.cache[str(path)] = (len(source), None, source.splitlines(True), str(path))
        module = types.ModuleType(path.stem)
        module.__file__ = str(path)
        sys.modules[path.stem] = module
        exec(compile(source, str(path), "exec"), module.__dict__)
        _MODULES[path] = module
        return module
