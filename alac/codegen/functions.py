"""Device functions of a generated module: a stage body written once and called by the one-tile
path, the tile loop, the per-batch kernels and the epoch kernel alike (Triton inlines them).

A function's parameters are the free names of its body, found by reading the body back as Python:
the generator writes a stage as it would inline it, and the names the stage reads from its caller
become its parameters, so the caller passes them by the same names. Names every program can compute
for itself (`PROGRAM_CONSTANTS`) are defined where they are read instead of being passed.
"""

from __future__ import annotations

import ast
import builtins
import textwrap
from dataclasses import dataclass

from alac.codegen.triton_helpers import HELPERS

# Compile-time arguments of every kernel, passed on to the functions that read them. WIDE_IDS: feature
# offsets in 64 bits, needed only when a param has 2**31 values or more; edge offsets are always
# 32-bit within a chunk (the chunk's 64-bit start moves the pointers once), which halves the registers
# an [S, C] tile of offsets takes (Triton 3.6 spilled at C = 32 with 64-bit ones on sm_90a:
# benchmarks/kernel_registers.py).
CONSTEXPRS = ("HAS_VALUES", "C", "S", "ONE_TILE", "WIDE_IDS")
# The flow kernels' (alac.codegen.kernels), which the runtime passes as one set: also RESIDENT, whether
# every program of a sync epoch holds at most one chunk of a batch in one tile (alac.codegen.epoch_kernel).
FLOW_CONSTEXPRS = (*CONSTEXPRS, "RESIDENT")
# Values any program computes in one line: a function that reads one defines it (the compiler folds
# the repeats); in dependency order.
PROGRAM_CONSTANTS = {
    "rows": "rows = tl.arange(0, C)",
    "lanes": "lanes = tl.arange(0, BLOCK_K)",
    "lane_valid": "lane_valid = lanes < K",
    "next_row": "next_row = tl.minimum(rows + 1, C - 1)[None, :] + tl.zeros([S, C], tl.int32)",
    "replica": "replica = tl.program_id(0) % replicas",
}
# Names of the module's own scope: Triton, its globals and Python's builtins.
MODULE_NAMES = frozenset({"tl", "triton", "K", "BLOCK_K", "HOT_BLOCK"} | {h.fn.__name__ for h in HELPERS}
                         | set(dir(builtins)))
# Kernel signatures say each argument's Triton type (manifest dtype -> Triton's name).
TRITON_TYPES = {"float64": "fp64", "float32": "fp32", "bfloat16": "bf16", "float16": "fp16", "int32": "i32",
                "int64": "i64"}
LINE_WIDTH = 120


class _Reads(ast.NodeVisitor):
    """Names a body reads before it assigns them, in order of first read."""

    def __init__(self):
        self.assigned, self.free = {}, {}

    def _read(self, name):
        if name not in self.assigned:
            self.free.setdefault(name, None)

    def visit_Name(self, node):
        if isinstance(node.ctx, ast.Load):
            self._read(node.id)
        else:
            self.assigned.setdefault(node.id, None)

    def visit_Assign(self, node):
        self.visit(node.value)
        for target in node.targets:
            self.visit(target)

    def visit_AugAssign(self, node):
        self.visit(node.value)
        self._read(node.target.id)
        self.assigned.setdefault(node.target.id, None)

    def visit_For(self, node):
        self.visit(node.iter)
        self.visit(node.target)
        for statement in node.body + node.orelse:
            self.visit(statement)


def _read_back(lines):
    reads = _Reads()
    reads.visit(ast.parse(textwrap.dedent("\n".join(lines))))
    return reads


def free_names(lines):
    """The names the body (lines of one function, any indentation) reads from outside it."""
    return list(_read_back(lines).free)


def assigned_names(lines):
    """The names the body assigns, in order of first assignment."""
    return list(_read_back(lines).assigned)


def with_constants(lines):
    """The body (at depth 1) preceded by the definitions of the program constants it reads."""
    needed = [n for n in free_names(lines) if n in PROGRAM_CONSTANTS]
    while True:
        more = [n for n in free_names([PROGRAM_CONSTANTS[c] for c in needed]) if n in PROGRAM_CONSTANTS]
        if set(more) <= set(needed):
            break
        needed += [n for n in more if n not in needed]
    return ["    " + PROGRAM_CONSTANTS[c] for c in PROGRAM_CONSTANTS if c in needed] + list(lines)


def wrapped(head, items, tail, indent):
    """head + items + tail on lines of at most LINE_WIDTH, continuation lines indented 8 from indent."""
    if not items:
        return [head + tail]
    hang = indent + " " * 8
    lines, current = [], head
    for i, item in enumerate(items):
        text = item + (", " if i + 1 < len(items) else tail)
        if len(current) + len(text.rstrip()) > LINE_WIDTH and current not in (head, hang):
            lines.append(current.rstrip())
            current = hang
        current += text
    return lines + [current]


@dataclass(frozen=True)
class DeviceFunction:
    name: str
    params: tuple        # in order of first read; constexprs last
    returns: tuple
    args: tuple          # the manifest Arguments among params (a caller declares them as its own)
    source: str

    def call_lines(self, indent, values):
        """The call, passing the caller's variables of the parameters' names (or the given values)."""
        head = indent + (f"{', '.join(self.returns)} = " if self.returns else "") + f"{self.name}("
        return wrapped(head, [values.get(p, p) for p in self.params], ")", indent)


def device_function(name, doc, writer, returns=()):
    """The @triton.jit function of a writer's body (written at depth 1) returning `returns`."""
    body = with_constants(writer.lines)
    if returns:
        body.append(f"    return {', '.join(returns)}")
    free = [n for n in free_names(body) if n not in MODULE_NAMES and n not in writer.callees]
    manifest = {a.name for a in writer.args}
    # the caller's values, then its arguments, then constexprs
    params = ([n for n in free if n not in CONSTEXPRS and n not in manifest] + [n for n in free if n in manifest]
              + [c for c in CONSTEXPRS if c in free])
    shown = [f"{p}: tl.constexpr" if p in CONSTEXPRS else p for p in params]
    assert len(doc) <= LINE_WIDTH - 11, f"a one-line docstring for {name}"
    lines = ["@triton.jit", *wrapped(f"def {name}(", shown, "):", ""), f'    """{doc}."""', *body]
    args = tuple(a for a in writer.args if a.name in params)
    return DeviceFunction(name, tuple(params), tuple(returns), args, "\n".join(lines) + "\n")


def kernel_source(name, writer, constexprs=CONSTEXPRS):
    """A kernel: its manifest arguments with their Triton types, then every constexpr (the runtime
    passes them all by keyword): the flow kernels', or a kernel family's own."""
    def typed(argument):
        if argument.is_tensor:
            return f'{argument.name}: "*{TRITON_TYPES[argument.dtype]}"'
        return f'{argument.name}: "fp32"' if argument.dtype == "float" else argument.name

    body = with_constants(writer.lines)
    known = MODULE_NAMES | writer.callees | {a.name for a in writer.args} | set(constexprs)
    undefined = [n for n in free_names(body) if n not in known]
    assert not undefined, f"{name} reads {undefined}, which nothing defines"
    shown = [typed(a) for a in writer.args] + [f"{c}: tl.constexpr" for c in constexprs]
    lines = ["@triton.jit", *wrapped(f"def {name}(", shown, "):", ""), *body]
    return "\n".join(lines) + "\n"
