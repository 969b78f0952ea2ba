"""Registers and spills of generated kernels, from the ptxas that Triton ships: no GPU needed.

A kernel compiled for an NVIDIA architecture (Triton's PTX, then `ptxas -v`) reports the registers a
thread takes and the bytes it spills to local memory. Registers bound how many programs a
multiprocessor holds at once (alac.runtime.execution.schedule.resident_programs); spills turn register traffic
into memory traffic. `alac inspect --registers` and benchmarks/kernel_registers.py print them, so that a
model's or a tile's register pressure is seen before GPU time is spent.
"""

from __future__ import annotations

import inspect
import re
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from alac.errors import AlacError

# The architecture the figures are for by default: the H100 / H200 the benchmarks run on
DEFAULT_ARCH = "sm_90a"


@dataclass(frozen=True)
class KernelRegisters:
    name: str
    registers: int
    spill_bytes: int       # spill stores, per thread

    def line(self):
        spills = f", spills {self.spill_bytes} bytes a thread" if self.spill_bytes else ", no spills"
        return f"{self.name}: {self.registers} registers a thread{spills}"


def ptxas_path():
    """The newest ptxas Triton ships (Triton 3.9 ships ptxas-blackwell beside an older ptxas)."""
    import triton

    folder = Path(triton.__path__[0]) / "backends" / "nvidia" / "bin"
    for name in ("ptxas-blackwell", "ptxas"):
        if (folder / name).is_file():
            return folder / name
    raise AlacError(f"no ptxas in {folder}: this Triton has no NVIDIA backend to count registers with")


def kernel_registers(kernel, constexprs, num_warps, arch=DEFAULT_ARCH):
    """KernelRegisters of a @triton.jit kernel compiled for `arch` (sm_90a) with the constexprs it
    takes of `constexprs`."""
    import triton
    from triton.backends.compiler import GPUTarget

    if not hasattr(kernel, "fn"):
        raise AlacError("counting registers compiles for a GPU: start the process with TRITON_INTERPRET unset")
    parameters = list(inspect.signature(kernel.fn).parameters.items())
    names = [name for name, _ in parameters]
    constexprs = {name: value for name, value in constexprs.items() if name in names}
    # the generated kernels annotate pointers and floats ("*fp32", "fp32"); the other arguments are ints
    signature = {name: "constexpr" if name in constexprs else
                 (p.annotation.strip("'\"") if isinstance(p.annotation, str) and p.annotation else "i32")
                 for name, p in parameters}
    source = triton.compiler.ASTSource(fn=kernel, signature=signature,
                                       constexprs={(names.index(k),): v for k, v in constexprs.items()})
    capability = int(re.sub(r"\D", "", arch))
    compiled = triton.compile(source, target=GPUTarget("cuda", capability, 32), options={"num_warps": num_warps})
    with tempfile.NamedTemporaryFile("w", suffix=".ptx") as ptx:
        ptx.write(compiled.asm["ptx"])
        ptx.flush()
        report = subprocess.run([str(ptxas_path()), f"-arch={arch}", "-v", ptx.name, "-o", "/dev/null"],
                                capture_output=True, text=True)
    text = report.stdout + report.stderr
    used = re.search(r"Used (\d+) registers", text)
    if used is None:
        raise AlacError(f"ptxas did not assemble {kernel.fn.__name__}: {text.strip()[-400:]}")
    spilled = re.search(r"(\d+) bytes spill stores", text)
    return KernelRegisters(kernel.fn.__name__, int(used.group(1)), int(spilled.group(1)) if spilled else 0)


def generated_registers(generated, module, constants, arch=DEFAULT_ARCH):
    """KernelRegisters of every kernel of a generated module (its training kernels and its predict
    kernel) with these launch constants (alac.runtime.execution.triton_backend.launch_constants)."""
    return [kernel_registers(getattr(module, spec.name), constants, constants["num_warps"], arch)
            for spec in (*generated.train, generated.predict)]
