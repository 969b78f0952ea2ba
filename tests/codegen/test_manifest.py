"""The typed contract between codegen and the runtime: every kernel argument described as data, the
runtime binding by role, never by name, and importing only codegen's package API."""

import ast
import functools
from pathlib import Path

import pytest

from alac.codegen import ALLOCATED_ROLES, Sizes
from alac.codegen.manifest import LIFETIMES, ROLES, TENSOR_DTYPES
from tests.codegen.test_golden import CASES, generate_kernels, lower
from tests.zoo_models import ZOO

RUNTIME = Path(__file__).resolve().parents[2] / "alac" / "runtime"


@functools.cache
def manifests():
    return [(f"{model}-{optimizer}-{variant}", generate_kernels(lower(ZOO[model](), optimizer), plan))
            for model, optimizer, variant, plan in CASES]


def test_every_argument_is_described_and_matches_the_kernel_signature():
    for case, generated in manifests():
        names = [a.name for a in generated.manifest]
        assert len(names) == len(set(names)), f"{case}: one name, two descriptions"
        kernels = {node.name: node for node in ast.parse(generated.source).body if isinstance(node, ast.FunctionDef)}
        for spec in (*generated.train, generated.predict):
            declared = kernels[spec.name].args.args
            assert [a.arg for a in declared[:len(spec.args)]] == [a.name for a in spec.args], f"{case}: {spec.name}"
            # the signature says every argument's Triton type; the constexprs follow
            types = [ast.unparse(a.annotation) if a.annotation else None for a in declared]
            assert types[:len(spec.args)] == [_triton_type(a) for a in spec.args], f"{case}: {spec.name}"
            assert all(t == "tl.constexpr" for t in types[len(spec.args):])
            for argument in spec.args:
                assert argument in generated.manifest
                assert argument.role in ROLES and argument.lifetime in LIFETIMES, argument
                assert argument.is_tensor == bool(argument.shape), argument
                assert argument.is_tensor or argument.dtype in ("int", "float"), argument
                if argument.role in ALLOCATED_ROLES:
                    assert argument.dtype in TENSOR_DTYPES and argument.zero_init, argument


def _triton_type(argument):
    """Triton's name of a manifest type, as the generated signature annotates it (ints are left to
    Triton's specialisation by value)."""
    if argument.is_tensor:
        return repr("*" + {"float32": "fp32", "int32": "i32", "int64": "i64"}[argument.dtype])
    return repr("fp32") if argument.dtype == "float" else None


def test_shapes_name_sizes():
    fields = set(Sizes.__dataclass_fields__)
    for case, generated in manifests():
        for argument in generated.manifest:
            for dim in argument.shape:
                assert isinstance(dim, int) or dim in fields, f"{case}: {argument}"
            if argument.role == "size":
                assert argument.of in fields, argument


def _runtime_trees():
    paths = sorted(RUNTIME.rglob("*.py"))
    assert len(paths) > 40, paths    # the walk finds the runtime's modules in its packages
    for path in paths:
        yield str(path.relative_to(RUNTIME)), ast.parse(path.read_text())


def test_the_runtime_imports_only_the_codegen_package_api():
    for name, tree in _runtime_trees():
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("alac.codegen"):
                assert node.module == "alac.codegen", f"{name} imports {node.module}: use alac.codegen's API"
            if isinstance(node, ast.Import):
                assert not any(a.name.startswith("alac.codegen.") for a in node.names), name


@pytest.mark.parametrize("model", ["lr", "fm"])
def test_the_runtime_knows_no_argument_names(model):
    """No string in the runtime's source is the name of a generated kernel's buffer (sizes are named
    as the plan's fields they come from)."""
    names = {a.name for case, generated in manifests() if case.startswith(f"{model}-") for a in generated.manifest
             if a.is_tensor}
    for name, tree in _runtime_trees():
        literals = {node.value for node in ast.walk(tree)
                    if isinstance(node, ast.Constant) and isinstance(node.value, str)}
        assert not literals & names, f"{name} names kernel arguments {sorted(literals & names)}"
