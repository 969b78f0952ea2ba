"""The typed contract between generated kernels and the runtime.

Every run-time argument of a generated kernel is an `Argument`: its name in the source, its role,
what it belongs to, dtype, shape (symbols of `Sizes`), whether it starts zeroed, how long it lives
and where it is placed. A kernel's `KernelSpec.args` lists them in order; `GeneratedKernels.manifest`
holds every argument of a module once. The runtime allocates and binds from these descriptions by
role (the closed vocabulary below) and knows no buffer names, as Inductor's generated modules carry
typed arguments and FBGEMM's TBE templates take a typed argument set.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from alac.ir.names import grad_name, l2_name

# The model's own tensors (alac.runtime.execution.state.ModelState), bound, never allocated.
MODEL_ROLES = ("param", "global", "state")
# Buffers the runtime allocates (zeroed) for a layout from their shape, and keeps between epochs;
# in this order (benchmarks/flow.py's epoch times were measured with it).
ALLOCATED_ROLES = ("grad", "touched", "queue", "hot_sums", "edge_grad", "chunk_grad", "chunk_loss",
                   "batch_edge_grad", "stage_rows", "schedule", "arrivals")
# Scalars: a layout's or plan's size, a launch's position, a regulariser's coefficient, a hyper.
SCALAR_ROLES = ("size", "launch", "gradient_l2", "update_l1", "update_l2", "hyper")
# alac.nn's kernels (alac.codegen.bag_kernels): a call's entries and its bags' dLoss/dAccum
# the SCD kernels (alac.codegen.scd_kernels): an epoch's coordinate order and the shared vector; a split
# coordinate's sums (alac.codegen.scd_split_kernels)
ROLES = MODEL_ROLES + ALLOCATED_ROLES + SCALAR_ROLES + ("layout", "labels", "output", "entries", "deltas", "order",
                                                       "shared", "sums")
LIFETIMES = ("model", "layout", "epoch", "launch", "call")
# device: GPU memory; host: pinned host memory the kernels reach through mapped (UVA) pointers
PLACEMENTS = ("device", "host")
# (narrow floats: alac.nn's bfloat16 and float16 tables; float64: the SCD kernels' coordinates and shared vector)
TENSOR_DTYPES = ("float64", "float32", "bfloat16", "float16", "int32", "int64")


def next_power_of_two(n):
    return 1 << max(0, (n - 1).bit_length())


@dataclass(frozen=True)
class Argument:
    name: str                  # the kernel's parameter
    role: str                  # one of ROLES
    of: str = ""               # the param, global, state, layout field, size or hyper it is of
    dtype: str = "float32"     # a TENSOR_DTYPES entry, or "int" / "float" for a scalar
    shape: tuple = ()          # dims: ints or symbols of Sizes; () for a scalar
    zero_init: bool = False
    lifetime: str = "model"    # one of LIFETIMES
    placement: str = "device"  # one of PLACEMENTS

    def __post_init__(self):
        assert self.role in ROLES and self.lifetime in LIFETIMES and self.placement in PLACEMENTS, self

    @property
    def is_tensor(self):
        return self.dtype in TENSOR_DTYPES


@dataclass(frozen=True)
class Sizes:
    """The sizes a manifest's shapes and size arguments name, fixed by a layout and a plan."""
    n_features: int
    K: int                     # factors of a vector param (1 without one)
    n_chunks: int
    chunk_bounds: int          # n_chunks + 1 (a layout's chunk_start)
    slots: int                 # chunk slots of the layout: n_chunks * C
    edges: int
    n_batches: int
    hot_size: int
    hot_stride: int            # rows of hot-gradient sums start at multiples of this
    hot_rows: int              # hot-gradient rows: hot_stride times the replicas or async programs
    chunk_edges: int           # edge slots per chunk in a per-batch edge buffer
    batch_edges: int
    replicas: int
    flush_every: int
    chunks_per_batch: int

    def dim(self, symbol):
        return symbol if isinstance(symbol, int) else getattr(self, symbol)

    def shape(self, argument):
        return tuple(self.dim(d) for d in argument.shape)


def _rows(first, vector):
    return (first, "K") if vector else (first,)


# --- the arguments generated kernels take ------------------------------------------------------

LAYOUT_FIELDS = (("edge_feature", "int32", "edges"), ("edge_value", "float32", "edges"),
                 ("chunk_start", "int64", "chunk_bounds"), ("chunk_width", "int32", "n_chunks"),
                 ("row_of_slot", "int64", "slots"))
LAYOUT = tuple(Argument(f"{f}_ptr", "layout", f, dtype, (dim,), lifetime="layout") for f, dtype, dim in LAYOUT_FIELDS)
LABELS = Argument("label_ptr", "labels", "labels", "float32", ("slots",), lifetime="layout")
CHUNK_ORDER = Argument("chunk_order_ptr", "schedule", "chunk_order", "int64", ("n_chunks",), True, "epoch")
LR = Argument("lr_ptr", "schedule", "lr", "float32", ("n_batches",), True, "epoch")
SCALE = Argument("scale_ptr", "schedule", "scale", "float32", ("n_batches",), True, "epoch")
CHUNK_OFFSET = Argument("chunk_offset", "launch", "chunk_offset", "int", lifetime="launch")
# a chunk kernel's layout, labels and place in the epoch's chunk order
CHUNK_ARGS = (*LAYOUT, LABELS, CHUNK_ORDER, CHUNK_OFFSET)
BATCH = Argument("batch", "launch", "batch", "int", lifetime="launch")
# the epoch and async kernels: the chunk-order positions one launch runs (a whole epoch, one batch or
# a segment of batches); the epoch kernel's first batch
CHUNK_END = Argument("chunk_end", "launch", "chunk_end", "int", lifetime="launch")
FIRST_BATCH = Argument("first_batch", "launch", "batch", "int", lifetime="launch")
LOSS_SUM = Argument("loss_sum_ptr", "output", "loss_sum", "float32", (1,), lifetime="call")
PREDICTION = Argument("prediction_ptr", "output", "prediction", "float32", ("slots",), lifetime="call")
TOUCHED = Argument("touched_ptr", "touched", "", "int32", ("n_features",), True, "layout")
# async chunk queue: positions claimed, programs finished (the kernel leaves both zero)
QUEUE = Argument("queue_ptr", "queue", "", "int64", (2,), True, "layout")
ARRIVALS = Argument("arrivals_ptr", "arrivals", "", "int32", (1,), True, "layout")
CHUNK_LOSS = Argument("chunk_loss_ptr", "chunk_loss", "", "float32", ("n_chunks",), True, "layout")


def size(symbol, name=None):
    """A size as a scalar argument (named symbol unless name is given)."""
    return Argument(name or symbol, "size", symbol, "int", lifetime="layout")


def param(p, placement="device"):
    return Argument(f"{p.name}_ptr", "param", p.name, shape=_rows("n_features", p.vector), placement=placement)


def global_(name):
    return Argument(f"{name}_ptr", "global", name, shape=(1,))


def state(p, state_name, per_row, placement="device"):
    """Optimizer state state_name of param p: one value per row (per_row) or per value; it lives
    where its param's rows live."""
    return Argument(f"state_{p.name}_{state_name}_ptr", "state", f"{p.name}_{state_name}",
                    shape=_rows("n_features", p.vector and not per_row), placement=placement)


def grad(name, vector=False, is_global=False):
    """The gradient accumulator of a param (or a global) between a batch's kernels and its update."""
    return Argument(f"{grad_name(name)}_ptr", "grad", name, shape=(1,) if is_global else _rows("n_features", vector),
                    zero_init=True, lifetime="layout")


def hot_sums(p):
    """Hot-gradient sums of param p: sync replicas or one row of H per async program."""
    return Argument(f"hot_{grad_name(p.name)}_ptr", "hot_sums", p.name, shape=_rows("hot_rows", p.vector),
                    zero_init=True, lifetime="layout")


def edge_grad(p):
    """Deterministic plans: every edge's gradient of param p at the edge's position."""
    return Argument(f"edge_{grad_name(p.name)}_ptr", "edge_grad", p.name, shape=_rows("edges", p.vector),
                    zero_init=True, lifetime="layout")


def chunk_grad(name):
    """Deterministic plans: every chunk's gradient of a global."""
    return Argument(f"chunk_{grad_name(name)}_ptr", "chunk_grad", name, shape=("n_chunks",), zero_init=True,
                    lifetime="layout")


def batch_edge_grad(p):
    """Edge updates: one batch's cold-edge gradients of param p, chunk_edges slots per chunk."""
    return Argument(f"batch_edge_{grad_name(p.name)}_ptr", "batch_edge_grad", p.name,
                    shape=_rows("batch_edges", p.vector), zero_init=True, lifetime="layout")


def stage_rows(name, vector):
    """Stage kernels: per-row data one kernel writes and a later one reads (an accum or a delta)."""
    return Argument(f"{name}_buffer_ptr", "stage_rows", name, shape=_rows("slots", vector), zero_init=True,
                    lifetime="layout")


def regularizer(kind, param_name):
    """A param's L1 or L2 coefficient: applied to the gradient (gradient_l2) or in the update."""
    name = {"gradient_l2": l2_name(param_name), "update_l1": f"reg_l1_{param_name}",
            "update_l2": f"reg_l2_{param_name}"}[kind]
    return Argument(name, kind, param_name, "float", lifetime="call")


def hyper(name):
    return Argument(f"h_{name}", "hyper", name, "float", lifetime="call")


# --- what a generated module holds --------------------------------------------------------

@dataclass(frozen=True)
class KernelSpec:
    name: str
    role: str          # "train" (one per group, in launch order), "update", "epoch", "async" or "predict"
    stages: tuple
    args: tuple        # Arguments, in order; the generator's constexprs follow as keywords


_DTYPE_BYTES = {"float64": 8, "float32": 4, "bfloat16": 2, "float16": 2, "int32": 4, "int64": 8}


def allocated_row_bytes(manifest, k):
    """Bytes per feature row of the buffers the runtime allocates for these arguments (gradient
    accumulators, touched flags): they grow with the rows on the device as the params do."""
    return sum(_DTYPE_BYTES[a.dtype] * (k if "K" in a.shape else 1) for a in manifest
               if a.role in ALLOCATED_ROLES and a.shape[:1] == ("n_features",))


@dataclass(frozen=True)
class GeneratedKernels:
    model: str
    ir_hash: str
    plan_text: str
    source: str
    train: tuple       # sync: KernelSpecs launched per batch, in order (the last is the update), or
                       # with grid barriers the epoch kernel (a launch runs an epoch or one batch);
                       # async: the one persistent kernel, launched once per epoch
    predict: KernelSpec
    manifest: tuple = field(default=())  # every Argument of the module's kernels, once
    derived_params: tuple = ()           # params the kernels compute from their state, never store
    resident: bool = False               # the epoch kernel has resident chunks (alac.codegen.epoch_kernel)
