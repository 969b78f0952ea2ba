"""The kernel cache runs only source generated in this process, never what a cache file holds."""

from alac.codegen.kernels import generate_kernels
from alac.codegen.module_cache import interpreter_active, load_module, source_path
from alac.ir.pipeline import lower
from alac.plan import Plan
from tests.zoo_models import ZOO


def test_a_tampered_cache_file_is_replaced_and_never_runs(tmp_path):
    generated = generate_kernels(lower(ZOO["lsr"]()), Plan(chunk_size=8, batch_size=64))
    path = source_path(generated)
    marker = tmp_path / "ran"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"from pathlib import Path\nPath({str(marker)!r}).write_text('ran')\n")
    module = load_module(generated, interpret=interpreter_active())
    assert not marker.exists()
    assert path.read_text() == generated.source
    assert all(hasattr(module, spec.name) for spec in generated.train)
