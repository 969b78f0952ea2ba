"""Loaders, the SparseDataset they return, and the synthetic Criteo-shaped generator."""

from alac.data.dataset import DataSource, SparseDataset
from alac.data.field_map import FieldMap, load_featindex
from alac.data.libsvm import (
                              iter_blocks,
                              load_libffm,
                              load_libffm_files,
                              load_libsvm,
                              load_libsvm_files,
                              parse_bytes,
                              write_libffm,
                              write_libsvm,
)

__all__ = ["DataSource", "FieldMap", "SparseDataset", "iter_blocks", "load_featindex", "load_libffm",
           "load_libffm_files", "load_libsvm", "load_libsvm_files", "parse_bytes", "write_libffm", "write_libsvm"]
