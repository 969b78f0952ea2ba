"""Code generation: ModelIR + plan -> a module of Triton kernels and its typed manifest.

This is the API the runtime uses; the rest of the package is codegen's own. The runtime allocates
and binds from the manifest (alac.codegen.manifest) and launches the kernels the specs name.
"""

from alac.codegen.manifest import ALLOCATED_ROLES, Argument, Sizes, allocated_row_bytes, next_power_of_two
from alac.codegen.module_cache import interpreter_active, load_module, triton_installed
from alac.codegen.torch_programs import TorchPrograms

__all__ = ["ALLOCATED_ROLES", "Argument", "GeneratedKernels", "KernelSpec", "ScdVariant", "Sizes", "TorchPrograms",
           "allocated_row_bytes", "generate_bag_kernels", "generate_kernels", "generate_scd_kernels",
           "generate_scd_split_kernels", "grid_barrier", "interpreter_active", "load_module", "next_power_of_two",
           "triton_installed"]


def __getattr__(name):
    # the generator imports Triton (its device helpers are Triton functions): loaded on first use, so
    # that the reference backend runs where Triton is not installed
    if name in ("GeneratedKernels", "KernelSpec", "generate_kernels"):
        from alac.codegen import kernels

        return getattr(kernels, name)
    if name == "generate_bag_kernels":
        from alac.codegen import bag_kernels

        return bag_kernels.generate_bag_kernels
    if name in ("ScdVariant", "generate_scd_kernels"):
        from alac.codegen import scd_kernels

        return getattr(scd_kernels, name)
    if name == "grid_barrier":
        # the generated modules' grid-wide barrier, for the runtime's barrier-only timing kernel
        from alac.codegen import triton_helpers

        return triton_helpers.grid_barrier
    if name == "generate_scd_split_kernels":
        from alac.codegen import scd_split_kernels

        return scd_split_kernels.generate_scd_split_kernels
    raise AttributeError(name)
