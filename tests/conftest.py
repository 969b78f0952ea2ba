import os
from pathlib import Path

import torch

# Without a GPU the generated kernels run in Triton's interpreter, which Triton selects when it is
# first imported: set it before any test imports triton.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest
from hypothesis import settings

# Parallel workers (pytest -n) each get one CPU thread, and so do the `alac` processes tests start:
# with every worker's torch and BLAS taking all cores, two long CPU tests side by side on CI's two
# cores ran 10x slower (the MovieLens FM test: 224 s against 22 s alone).
if os.environ.get("PYTEST_XDIST_WORKER"):
    for variable in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[variable] = "1"
    torch.set_num_threads(1)

# Real data sets live beside the repository (../shared/data) and are never copied into it.
SHARED_DATA = Path(os.environ.get("ALAC_SHARED_DATA", Path(__file__).resolve().parents[2] / "shared" / "data"))

settings.register_profile("default", deadline=None)
settings.load_profile("default")


@pytest.fixture
def shared_data():
    if not SHARED_DATA.is_dir():
        pytest.skip(f"shared data sets not found at {SHARED_DATA}")
    return SHARED_DATA


@pytest.fixture(autouse=True)
def _private_cache(tmp_path, monkeypatch):
    """Every test gets its own disk cache, so no test sees another's entries."""
    monkeypatch.setenv("ALAC_CACHE_DIR", str(tmp_path / "alac-cache"))


def pytest_collection_modifyitems(config, items):
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
