"""alac: the Aggregate-Loss-Apply compiler for sparse wide models on GPUs."""

from alac.errors import AlacError, DataError, ModelError

__version__ = "0.1.0"

__all__ = ["AlacError", "DataError", "ModelError", "__version__"]
