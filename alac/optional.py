"""Optional dependencies: a feature that needs one imports it through `need`, which fails before any
work with one line naming the pip extra that installs it (pyproject.toml's optional-dependencies)."""

from __future__ import annotations

import importlib

from alac.errors import AlacError

# module -> (the package pip installs, the extra of alac that brings it)
PACKAGES = {"sklearn": ("scikit-learn", "sklearn"), "scipy": ("scipy", "sparse"), "matplotlib": ("matplotlib", "plot"),
            "pandas": ("pandas", "table"), "pyarrow": ("pyarrow", "table"), "zstandard": ("zstandard", "zstd")}


class MissingDependency(AlacError, ImportError):
    """An optional dependency that is not installed (an ImportError too: `import alac.sklearn` raises it)."""


def need(module, feature):
    """The imported module, or a MissingDependency that says `feature` needs it and how to install it."""
    try:
        return importlib.import_module(module)
    except ImportError:
        package, extra = PACKAGES[module]
        raise MissingDependency(f"{feature} needs {package}: pip install '{package}' (or 'alac[{extra}]')") \
            from None
