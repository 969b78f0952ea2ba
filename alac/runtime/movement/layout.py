"""The bigraph layout: the on-device form of a data set that every generated kernel reads.

Features are re-indexed by descending frequency (ties keep their original order), so the hot
segment of the H most frequent features is the id range [0, H). Rows are grouped into chunks of
C samples; a chunk's edges are stored slot-major ("ELL"): edge k of the chunk's row r sits at
`chunk_start[c] + k * C + r`, so the C programs lanes that read slot k of their rows read C
consecutive words. A chunk is as wide as its longest row; padding edges have feature -1 and value 0.
For one-hot data where every row has the same W entries the layout is fixed-width (chunk c starts
at c * C * W) and no row is moved. Otherwise rows are sorted by length inside windows of
`bin_window_chunks` chunks, so rows of similar length share a chunk and padding stays small while
the row order changes only locally. Padding rows of the partial last chunk have row id -1.

Built with torch, on the GPU when there is one, on the CPU otherwise; the result is the same
arrays on either (stable sorts, integer arithmetic only).
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass

import numpy as np
import torch

from alac.data.dataset import SparseDataset, mean_scale
from alac.errors import OptionError
from alac.runtime.device.memory import LAYOUT_BYTES_PER_FEATURE, check_feature_tables
from alac.runtime.movement.permutation import chunk_order

# Shares of the most frequent features whose access share the statistics report.
TOP_FEATURE_FRACTIONS = (0.001, 0.01, 0.1)


@dataclass(frozen=True)
class LayoutOptions:
    """How a data set is laid out. chunk_size and hot_size come from the plan."""

    # 128 samples per chunk is a starting point (one Triton program per chunk, 4 warps); the
    # planner of the performance issue tunes it per model, data shape and GPU.
    chunk_size: int = 128
    hot_size: int = 0
    # Rows are binned by length within windows of this many chunks. Measured on 20news (C = 128):
    # windows of 1 / 16 / 64 / 256 chunks leave 481 % / 76 % / 24 % / 12 % ELL padding; 64 keeps
    # every row within 8k positions of its place in the file.
    bin_window_chunks: int = 64

    def __post_init__(self):
        if self.chunk_size < 1 or self.hot_size < 0 or self.bin_window_chunks < 1:
            raise OptionError(f"invalid layout options {self}")


@dataclass(frozen=True)
class LayoutStats:
    rows: int
    nnz: int
    mean_nnz: float
    max_nnz: int
    n_features: int
    features_seen: int
    top_share: tuple          # (fraction of seen features, share of accesses) for TOP_FEATURE_FRACTIONS
    padding_overhead: float   # padded edge slots / nnz - 1
    chunks: int
    chunk_size: int
    fixed_width: int | None
    hot_size: int
    hot_edge_share: float
    build_seconds: float
    device: str

    def lines(self):
        top = ", ".join(f"top {100 * f:g}%: {100 * s:.1f}%" for f, s in self.top_share)
        return [
            ("rows", f"{self.rows:,}"),
            ("non-zeros", f"{self.nnz:,}"),
            ("nnz per row", f"mean {self.mean_nnz:.2f}, max {self.max_nnz:,}"),
            ("features", f"{self.n_features:,} declared, {self.features_seen:,} seen"),
            ("access share of the most frequent features", top),
            ("chunks", f"{self.chunks:,} of {self.chunk_size} rows"
                       + (f", fixed width {self.fixed_width}" if self.fixed_width is not None else ", ELL")),
            ("padding overhead", f"{100 * self.padding_overhead:.2f}%"),
            ("hot segment", f"H = {self.hot_size:,}: {100 * self.hot_edge_share:.1f}% of edges"),
            ("layout build", f"{self.build_seconds:.3f} s on {self.device}"),
        ]


@dataclass(eq=False)
class BigraphLayout:
    options: LayoutOptions
    n_rows: int
    n_features: int
    n_fields: int
    fixed_width: int | None
    row_of_slot: torch.Tensor      # int64 [chunks * C], original row id, -1 for padding
    labels: torch.Tensor           # float32 [chunks * C], 0 for padding
    row_nnz: torch.Tensor          # int32 [chunks * C]
    chunk_start: torch.Tensor      # int64 [chunks + 1], first edge of every chunk
    chunk_width: torch.Tensor      # int32 [chunks], slots per row
    edge_feature: torch.Tensor     # int32 [edges], re-indexed feature id, -1 for padding
    edge_value: torch.Tensor | None  # float32 [edges]; None when every value is 1
    edge_field: torch.Tensor | None  # int32 [edges]
    new_to_old: torch.Tensor       # int32 [n_features], original id of re-indexed id
    old_to_new: torch.Tensor       # int32 [n_features]
    frequency: torch.Tensor        # int64 [n_features], by re-indexed id (non-increasing but in a
                                   # spread zone: alac.runtime.movement.line_spread)
    hot_edges: torch.Tensor        # int64 [chunks], edges with feature < hot_size
    cold_edges: torch.Tensor       # int64 [chunks]
    stats: LayoutStats
    # the chunks' mean width where it is not this layout's own: a streamed block takes its whole
    # layout's, so that its edge tiles (and sums) are the resident ones
    tile_width: int | None = None
    # (widest chunk's slots per row, edge slots) where the host knows them (a streamed block's): its
    # kernels are then launched without reading anything back from the device, which would wait for
    # the kernels before them
    host_extent: tuple | None = None

    @property
    def chunk_size(self):
        return self.options.chunk_size

    @property
    def n_chunks(self):
        return self.chunk_width.numel()

    def mean_width(self):
        """Edge slots per row of the mean chunk, rounded up (what edge tiles are sized by)."""
        if self.tile_width is not None:
            return self.tile_width
        return int(self.chunk_width.float().mean().ceil()) if self.n_chunks else 1

    def extent(self):
        """(the widest chunk's slots per row, edge slots): kept on the host or read from the device."""
        if self.host_extent is not None:
            return self.host_extent
        return (int(self.chunk_width.max()) if self.n_chunks else 0), int(self.chunk_start[-1])

    def value_scale(self):
        """The mean magnitude of the feature values (1 for one-hot data): the scale of one
        occurrence's gradient, which batch-dependent optimizer defaults (AdaGrad's eps, FTRL's beta) use."""
        if self.edge_value is None:
            return 1.0
        real = self.edge_feature >= 0
        return mean_scale(self.edge_value[real].double().abs().sum(), int(real.sum()))

    @property
    def hot_size(self):
        return self.options.hot_size

    @property
    def device(self):
        return self.edge_feature.device

    def chunk_order(self, epoch, seed=0):
        """The chunk visiting order of an epoch: a permutation reshuffled per epoch, the same on any
        device, drawn where the layout lives (one launch on a GPU: `alac.runtime.movement.permutation`)."""
        return chunk_order(self.n_chunks, seed, epoch, self.device)

    def edges_of(self, chunks):
        """The real (non-padding) edges of the given chunks, in layout order: (edge positions,
        re-indexed features as int64, row of each edge within the chunks, i - th chunk's rows at
        i * C .. i * C + C - 1)."""
        C = self.chunk_size
        sizes = self.chunk_width[chunks].long() * C
        position = torch.repeat_interleave(torch.arange(chunks.numel(), device=chunks.device), sizes)
        first = torch.cumsum(sizes, 0) - sizes
        offset = torch.arange(position.numel(), device=chunks.device) - first[position]
        edges = self.chunk_start[chunks][position] + offset
        features = self.edge_feature[edges]
        keep = features >= 0
        return edges[keep], features[keep].long(), (position * C + offset % C)[keep]

    def with_hot_size(self, hot_size):
        """The same layout with another hot-segment boundary (only the per-chunk counts change)."""
        options = dataclasses.replace(self.options, hot_size=hot_size)
        hot, cold = _hot_cold_counts(self.edge_feature, self.chunk_start, hot_size)
        total = max(1, self.stats.nnz)
        stats = dataclasses.replace(self.stats, hot_size=hot_size,
                                    hot_edge_share=float(hot.sum()) / total)
        return dataclasses.replace(self, options=options, hot_edges=hot, cold_edges=cold, stats=stats)

    def tensors(self):
        """{field name: tensor} of the layout's arrays (the optional ones only where present)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
                if isinstance(getattr(self, f.name), torch.Tensor)}

    def to(self, device):
        return dataclasses.replace(self, **{name: array.to(device) for name, array in self.tensors().items()})

    def to_csr(self):
        """Rebuild the data set (original row order, original feature ids) from the layout."""
        cpu = self.to("cpu")
        real = cpu.row_of_slot >= 0
        slots = torch.nonzero(real).squeeze(1)
        rows = cpu.row_of_slot[slots]
        lengths = cpu.row_nnz[slots].long()
        order = torch.argsort(rows)
        slots, lengths = slots[order], lengths[order]
        indptr = torch.zeros(self.n_rows + 1, dtype=torch.int64)
        torch.cumsum(lengths, 0, out=indptr[1:])
        entry_row = torch.repeat_interleave(torch.arange(self.n_rows), lengths)
        k = torch.arange(int(indptr[-1])) - indptr[:-1][entry_row]
        slot = slots[entry_row]
        C = self.chunk_size
        edge = cpu.chunk_start[slot // C] + k * C + slot % C
        values = None if cpu.edge_value is None else cpu.edge_value[edge]
        return SparseDataset(indptr=indptr, indices=cpu.new_to_old[cpu.edge_feature[edge].long()],
                             values=values, labels=cpu.labels[slots],
                             n_features=self.n_features,
                             fields=None if cpu.edge_field is None else cpu.edge_field[edge],
                             n_fields=self.n_fields)

    def to_numpy_dict(self):
        arrays = {name: array.cpu().numpy() for name, array in self.tensors().items()}
        meta = {"options": dataclasses.asdict(self.options), "n_rows": self.n_rows,
                "n_features": self.n_features, "n_fields": self.n_fields,
                "fixed_width": self.fixed_width, "stats": dataclasses.asdict(self.stats)}
        return arrays, meta

    @classmethod
    def from_numpy_dict(cls, arrays, meta):
        tensors = {name: torch.from_numpy(np.ascontiguousarray(a)) for name, a in arrays.items()}
        stats = dict(meta["stats"], top_share=tuple(tuple(p) for p in meta["stats"]["top_share"]))
        return cls(options=LayoutOptions(**meta["options"]), n_rows=meta["n_rows"],
                   n_features=meta["n_features"], n_fields=meta["n_fields"],
                   fixed_width=meta["fixed_width"], edge_value=tensors.pop("edge_value", None),
                   edge_field=tensors.pop("edge_field", None), stats=LayoutStats(**stats), **tensors)


def default_device():
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


# Edges per block of the chunk-count prefix sums: 2**27 int64 partial sums (1 GiB) at a time; one
# prefix over all edges of 64M rows x 39 ran an 80 GB GPU out of memory.
PREFIX_BLOCK = 1 << 27


def _hot_cold_counts(edge_feature, chunk_start, hot_size):
    def per_chunk(flag):
        # the prefix sum of flag(edges) at every chunk boundary, one block of edges at a time (whole
        # flag tensors of a 10-billion-edge layout would take 10 GB each)
        at_bounds = torch.zeros(chunk_start.numel(), dtype=torch.int64, device=edge_feature.device)
        carried = torch.zeros((), dtype=torch.int64, device=edge_feature.device)
        for start in range(0, edge_feature.numel(), PREFIX_BLOCK):
            prefix = torch.cumsum(flag(edge_feature[start:start + PREFIX_BLOCK]), 0)
            inside = (chunk_start > start) & (chunk_start <= start + prefix.numel())
            at_bounds[inside] = carried + prefix[chunk_start[inside] - start - 1]
            carried = carried + prefix[-1]
        return at_bounds[1:] - at_bounds[:-1]

    hot = per_chunk(lambda features: (features >= 0) & (features < hot_size))
    return hot, per_chunk(lambda features: features >= 0) - hot


def reindex_by_frequency(indices, n_features):
    """(frequency in new order, new_to_old, old_to_new): descending frequency, stable ties."""
    return order_by_frequency(torch.bincount(indices, minlength=n_features))


def order_by_frequency(frequency):
    """(frequency in new order, new_to_old, old_to_new) of per-feature counts: descending, stable ties."""
    # Only seen features need sorting (hashed spaces are mostly empty: criteo-tiny sees 8k of 41M
    # ids); unseen ones follow in id order, which is what a stable sort of all ids would give.
    seen = torch.nonzero(frequency).squeeze(1)
    new_to_old = torch.empty(frequency.numel(), dtype=torch.int32, device=frequency.device)
    new_to_old[:seen.numel()] = seen[torch.argsort(frequency[seen], descending=True, stable=True)]
    at = seen.numel()
    del seen
    # the unseen block by block: as one int64 list they would take 8 bytes per feature (17 GB at 2.1 billion)
    for start in range(0, frequency.numel(), PREFIX_BLOCK):
        unseen = torch.nonzero(frequency[start:start + PREFIX_BLOCK] == 0).squeeze(1) + start
        new_to_old[at:at + unseen.numel()] = unseen
        at += unseen.numel()
    return frequency[new_to_old], new_to_old, inverse_order(new_to_old)


def inverse_order(new_to_old):
    """old_to_new (int32) of a permutation, block by block (no arange or int64 copy of its size)."""
    old_to_new = torch.empty_like(new_to_old)
    for start in range(0, new_to_old.numel(), PREFIX_BLOCK):
        part = new_to_old[start:start + PREFIX_BLOCK]
        old_to_new[part] = torch.arange(start, start + part.numel(), dtype=old_to_new.dtype, device=part.device)
    return old_to_new


def top_share(frequency, nnz):
    """((fraction of seen features, share of accesses), ...) for TOP_FEATURE_FRACTIONS."""
    present = frequency[frequency > 0]      # sorting only these: the feature space may be billions
    seen = present.numel()
    cumulative = torch.cumsum(torch.sort(present, descending=True).values, 0)
    return tuple((fraction, float(cumulative[max(1, math.ceil(fraction * seen)) - 1]) / nnz if nnz else 0.0)
                 for fraction in TOP_FEATURE_FRACTIONS)


def _chunk_starts(chunk_width, chunk_size):
    starts = torch.zeros(chunk_width.numel() + 1, dtype=torch.int64, device=chunk_width.device)
    torch.cumsum(chunk_width.long() * chunk_size, 0, out=starts[1:])
    return starts


def _scatter_edges(values, fill, destination, edges):
    """values placed at their edge slots, fill elsewhere (None stays None)."""
    if values is None:
        return None
    out = torch.full((edges,), fill, dtype=values.dtype, device=values.device)
    out[destination] = values
    return out


# Chunks a piece of _fixed_width_edges lays out at once: 2M rows of 32, a few hundred MB of
# temporaries at 39 entries a row, whatever the set's size
FIXED_WIDTH_PIECE_CHUNKS = 1 << 16


def _fixed_width_edges(entries, mapping, fill, rows, width, chunk_size, piece_chunks=FIXED_WIDTH_PIECE_CHUNKS):
    """`rows` rows of `width` entries each (row-major), mapped through `mapping` where given, laid out
    slot-major inside every chunk of chunk_size rows, fill in the last chunk's empty slots (None stays
    None). Piece by piece: a whole-set int64 index tensor of a 256M-row set would take 80 GB."""
    if entries is None:
        return None
    n_chunks = math.ceil(rows / chunk_size)
    dtype = mapping.dtype if mapping is not None else entries.dtype
    out = torch.full((n_chunks * chunk_size * width,), fill, dtype=dtype, device=entries.device)
    chunks = out.view(n_chunks, width, chunk_size)
    for first in range(0, n_chunks, piece_chunks):
        last = min(first + piece_chunks, n_chunks)
        present = min(last * chunk_size, rows) - first * chunk_size
        piece = entries[first * chunk_size * width:(first * chunk_size + present) * width]
        if mapping is not None:
            piece = mapping[piece]
        whole = torch.full(((last - first) * chunk_size, width), fill, dtype=dtype, device=entries.device)
        whole[:present] = piece.view(present, width)
        chunks[first:last] = whole.view(last - first, chunk_size, width).transpose(1, 2)
    return out


def _synchronize(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def build_layout(dataset, options=LayoutOptions(), device=None, feature_order=None, maps_of=None):
    """Lay `dataset` out for the kernels (module docstring); runs on `device` (default: GPU if any).

    feature_order: the new_to_old permutation of another layout (a training set's), so that a
    validation or test set shares its feature ids; by default features are ordered by frequency here.
    maps_of: a layout on `device` whose re-index maps this one shares (no copies: they are as large
    as the feature space, hundreds of millions of rows for the largest models).
    """
    device = torch.device(device) if device is not None else default_device()
    check_feature_tables(dataset.n_features, LAYOUT_BYTES_PER_FEATURE, "the layout's feature tables", device,
                         dataset)
    _synchronize(device)
    started = time.perf_counter()
    data = dataset.to(device)
    C = options.chunk_size
    n, nnz = data.n_rows, data.nnz
    row_nnz = data.row_lengths()
    max_nnz = int(row_nnz.max()) if n else 0
    fixed_width = max_nnz if n and int(row_nnz.min()) == max_nnz else None
    n_chunks = math.ceil(n / C)
    slots = n_chunks * C
    if maps_of is not None:
        if maps_of.n_features != data.n_features:
            raise OptionError(f"the layout whose maps are shared has {maps_of.n_features} features, not "
                              f"{data.n_features}")
        new_to_old, old_to_new = maps_of.new_to_old, maps_of.old_to_new
        frequency = torch.bincount(data.indices, minlength=data.n_features)[new_to_old]
    elif feature_order is None:
        frequency, new_to_old, old_to_new = reindex_by_frequency(data.indices, data.n_features)
    else:
        if feature_order.numel() != data.n_features:
            raise OptionError(f"feature_order has {feature_order.numel()} ids for {data.n_features} features")
        new_to_old = feature_order.to(device=device, dtype=torch.int32)
        old_to_new = inverse_order(new_to_old)
        frequency = torch.bincount(data.indices, minlength=data.n_features)[new_to_old]

    if fixed_width is not None:
        order = torch.arange(n, device=device)
        chunk_width = torch.full((n_chunks,), fixed_width, dtype=torch.int32, device=device)
        edges = slots * fixed_width
        edge_feature = _fixed_width_edges(data.indices, old_to_new, -1, n, fixed_width, C)
        edge_value = _fixed_width_edges(data.values, None, 0.0, n, fixed_width, C)
        edge_field = _fixed_width_edges(data.fields, None, -1, n, fixed_width, C)
    else:
        features = old_to_new[data.indices]
        window = torch.arange(n, device=device) // (C * options.bin_window_chunks)
        order = torch.argsort(window * (max_nnz + 1) + (max_nnz - row_nnz), stable=True)
        slot_nnz = torch.zeros(slots, dtype=torch.int64, device=device)
        slot_nnz[:n] = row_nnz[order]
        chunk_width = slot_nnz.view(n_chunks, C).amax(dim=1).int()
        edges = int(chunk_width.long().sum()) * C
        slot_of_row = torch.empty(n, dtype=torch.int64, device=device)
        slot_of_row[order] = torch.arange(n, device=device)
        entry_row = torch.repeat_interleave(torch.arange(n, device=device), row_nnz, output_size=nnz)
        k = torch.arange(nnz, device=device) - data.indptr[:-1][entry_row]
        slot = slot_of_row[entry_row]
        del entry_row
        destination = _chunk_starts(chunk_width, C)[slot // C] + k * C + slot % C
        del k, slot
        edge_feature = _scatter_edges(features.int(), -1, destination, edges)
        del features
        edge_value = _scatter_edges(data.values, 0.0, destination, edges)
        edge_field = _scatter_edges(data.fields, -1, destination, edges)
        del destination
    chunk_start = _chunk_starts(chunk_width, C)

    row_of_slot = torch.full((slots,), -1, dtype=torch.int64, device=device)
    row_of_slot[:n] = order
    labels = torch.zeros(slots, dtype=torch.float32, device=device)
    labels[:n] = data.labels[order]
    slot_row_nnz = torch.zeros(slots, dtype=torch.int32, device=device)
    slot_row_nnz[:n] = row_nnz[order].int()
    hot, cold = _hot_cold_counts(edge_feature, chunk_start, options.hot_size)

    _synchronize(device)
    stats = LayoutStats(
        rows=n, nnz=nnz, mean_nnz=nnz / n if n else 0.0, max_nnz=max_nnz, n_features=data.n_features,
        features_seen=int((frequency > 0).sum()), top_share=top_share(frequency, nnz),
        padding_overhead=(edges - nnz) / nnz if nnz else 0.0,
        chunks=n_chunks, chunk_size=C, fixed_width=fixed_width, hot_size=options.hot_size,
        hot_edge_share=float(hot.sum()) / nnz if nnz else 0.0,
        build_seconds=time.perf_counter() - started, device=str(device))
    return BigraphLayout(
        options=options, n_rows=n, n_features=data.n_features, n_fields=data.n_fields,
        fixed_width=fixed_width, row_of_slot=row_of_slot, labels=labels, row_nnz=slot_row_nnz,
        chunk_start=chunk_start, chunk_width=chunk_width, edge_feature=edge_feature,
        edge_value=edge_value, edge_field=edge_field, new_to_old=new_to_old, old_to_new=old_to_new,
        frequency=frequency, hot_edges=hot, cold_edges=cold, stats=stats)


def load_layout(path, format="auto", options=LayoutOptions(), device=None, cache=True, cache_dir=None,
                **load_options):
    """(dataset, layout) of a file; both are cached on disk by the file's content hash and options.

    The layout is cached without its hot-segment boundary (a plan may change H without a rebuild).
    """
    from alac.cache import DiskCache
    from alac.data import formats

    format = formats.resolve_format(path, format)
    if not cache:
        dataset = formats.load(path, format, **load_options)
        return dataset, build_layout(dataset, options, device)
    store = DiskCache(cache_dir)
    dataset_key = formats.dataset_cache_key(path, format, load_options)
    dataset, _ = store.get_or_build(dataset_key, SparseDataset,
                                    lambda: formats.load(path, format, **load_options))
    base_options = dataclasses.replace(options, hot_size=0)
    layout_key = DiskCache.key("layout", dataset=dataset_key, options=dataclasses.asdict(base_options))
    layout, _ = store.get_or_build(layout_key, BigraphLayout,
                                   lambda: build_layout(dataset, base_options, device))
    layout = layout.to(device if device is not None else default_device())
    if options.hot_size:
        layout = layout.with_hot_size(options.hot_size)
    return dataset, layout
