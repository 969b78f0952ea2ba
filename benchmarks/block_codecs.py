"""Wire forms of a block's edge ids on disk: their bytes per edge and the CPU's decompression speed,
against the entropy of an id given its field (what any codec of ids taken one at a time can reach).

    PYTHONPATH=. python benchmarks/block_codecs.py [--rows 1000000] [--out DIR]

On synthetic Criteo-shaped rows (39 one-hot fields), ids re-indexed by frequency as a block store does:
- the narrow wire form block stores move (alac.runtime.movement.wire: 16 bits an id, escapes of 32);
- that form zstd-compressed at levels 1 and 6, in FRAME_BYTES frames (alac.runtime.movement.block_codec);
- the same ids field-major (a field's ids together) with their bytes shuffled (low bytes, then high)
  before zstd;
- each id as its rank within its field (16 bits, escapes as above), field-major and byte-shuffled,
  before zstd: what a per-field gather on the GPU would have to undo;
- and whole packed blocks of the same rows (what a block file holds) in zstd frames, as they are and
  as byte planes, with 16-bit ids and with ranks within their field (alac.runtime.movement.wire.FieldRanks).
An epoch streamed from a disk is bound by the bytes it reads: a form's ratio to the narrow wire form is
the most it can speed such an epoch up (benchmarks/streaming.py's disk arms measure the epochs).
Writes results/block_codecs.json and .md.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from alac.runtime.movement.block_codec import byte_planes
from benchmarks.report import environment, table, write

LEVELS = (1, 6)


def frequency_ranks(ids, n):
    """Each id's rank by frequency among `n` ids (0: the most frequent)."""
    order = np.argsort(-np.bincount(ids, minlength=n), kind="stable")
    rank = np.empty(n, dtype=np.int64)
    rank[order] = np.arange(n)
    return rank[ids]


def narrow(ids):
    """The narrow wire form of int ids as numpy arrays: 16-bit words, 32-bit escapes (wire.encode; the
    per-tile escape starts left out)."""
    import torch

    from alac.runtime.movement import wire

    words, _, escapes = wire.encode(torch.from_numpy(ids))
    return words.numpy().view(np.uint16), escapes.numpy().view(np.uint32)


def whole_blocks(rows, seed):
    """Packed blocks of a block store of the same rows (ids, labels, chunk bounds, as block stores write
    them, the ids as 16-bit ids and as ranks within their field) zstd-compressed in frames: as they are,
    and each frame as byte planes first; ratios to the packed blocks of 16-bit ids."""
    import tempfile

    from alac.runtime.movement.block_codec import encode
    from alac.runtime.movement.block_store import synthetic_pieces, write_block_store
    from alac.runtime.movement.layout import LayoutOptions

    blocks = {}
    with tempfile.TemporaryDirectory() as folder:
        for ids in ("narrow", "field_ranks"):
            store = write_block_store(Path(folder) / ids, synthetic_pieces(rows, seed=seed, device="cpu"),
                                      LayoutOptions(chunk_size=32), 32, 64 << 20, "cpu", ids=ids)   # raw: packed bytes
            blocks[ids] = [np.frombuffer(path.read_bytes(), dtype=np.uint8)
                           for path in sorted(store.folder.glob("block-*"))]
    packed = sum(block.size for block in blocks["narrow"])
    return {"packed_bytes": packed,
            "zstd_ratio": packed / sum(len(encode(block, "zstd", planes=1)[0]) for block in blocks["narrow"]),
            "byte_planes_zstd_ratio": packed / sum(len(encode(block, "zstd")[0]) for block in blocks["narrow"]),
            "field_ranks_packed_ratio": packed / sum(block.size for block in blocks["field_ranks"]),
            "field_ranks_byte_planes_zstd_ratio": packed / sum(len(encode(block, "zstd")[0])
                                                               for block in blocks["field_ranks"])}


def compressed(buffer, level):
    """(stored bytes, seconds one thread takes to decompress them) of buffer in FRAME_BYTES frames."""
    import zstandard

    from alac.runtime.movement.block_codec import FRAME_BYTES

    compressor, decompressor = zstandard.ZstdCompressor(level=level), zstandard.ZstdDecompressor()
    frames = [compressor.compress(buffer[start:start + FRAME_BYTES]) for start in range(0, buffer.size, FRAME_BYTES)]
    start = time.perf_counter()
    for frame in frames:
        decompressor.decompress(frame)
    return sum(map(len, frames)), time.perf_counter() - start


def entropy_bits(ids, fields):
    """Bits per id of the ids' order-0 entropy given their field."""
    total = 0.0
    for field in np.unique(fields):
        counts = np.bincount(ids[fields == field])
        p = counts[counts > 0] / counts.sum()
        total += -(counts[counts > 0] * np.log2(p)).sum()
    return total / ids.size


def measure(rows, seed=0):
    from alac.data.synthetic import criteo_like

    data = criteo_like(rows, seed=seed, device="cpu")
    fields_per_row = data.indices.numel() // rows
    raw = data.indices.numpy().astype(np.int64)
    ids = frequency_ranks(raw, data.n_features)                  # the store's re-index
    field = data.fields.numpy().astype(np.int64)
    edges = ids.size
    words, escapes = narrow(ids)
    forms = {"narrow wire form (as stored)": (np.concatenate([words.view(np.uint8), escapes.view(np.uint8)]), None)}
    for level in LEVELS:
        forms[f"narrow, zstd {level}"] = (forms["narrow wire form (as stored)"][0], level)
    # field-major: a field's ids together (the rows are one id a field, in field order)
    assert (field.reshape(rows, fields_per_row) == np.arange(fields_per_row)).all()
    major = words.reshape(rows, fields_per_row).T.ravel()
    forms["narrow, field-major, bytes shuffled, zstd 1"] = (
        np.concatenate([byte_planes(major.view(np.uint8), 2), escapes.view(np.uint8)]), 1)
    local = np.empty_like(ids)
    for f in np.unique(field):
        at = field == f
        local[at] = frequency_ranks(ids[at], int(ids[at].max()) + 1)
    local_words, local_escapes = narrow(local)
    local_major = local_words.reshape(rows, fields_per_row).T.ravel()
    forms["field-local ranks, field-major, bytes shuffled"] = (
        np.concatenate([byte_planes(local_major.view(np.uint8), 2), local_escapes.view(np.uint8)]), None)
    forms["field-local ranks, field-major, bytes shuffled, zstd 1"] = (
        forms["field-local ranks, field-major, bytes shuffled"][0], 1)
    base = forms["narrow wire form (as stored)"][0].size
    arms = []
    for name, (buffer, level) in forms.items():
        stored, seconds = (buffer.size, None) if level is None else compressed(buffer, level)
        arms.append({"name": name, "bytes_per_edge": stored / edges, "ratio": base / stored,
                     "decompress_gb_per_s": None if seconds is None else buffer.size / seconds / 1e9})
    bits = entropy_bits(ids, field)
    arms.append({"name": "entropy of an id given its field", "bytes_per_edge": bits / 8,
                 "ratio": base / (edges * bits / 8), "decompress_gb_per_s": None})
    return {"rows": rows, "edges": edges, "fields": fields_per_row, "escaped_share": escapes.size / edges,
            "local_escaped_share": local_escapes.size / edges, "arms": arms, "blocks": whole_blocks(rows, seed)}


def codecs_table(result):
    rows = [[a["name"], f"{a['bytes_per_edge']:.3f}", f"{a['ratio']:.2f}×",
             "-" if a["decompress_gb_per_s"] is None else f"{a['decompress_gb_per_s']:.2f}"] for a in result["arms"]]
    return (table(["ids on disk", "bytes / edge", "smaller than stored", "zstd decompression, one thread (GB/s)"], rows)
            + f"\n\n{result['edges']:,} edges; escaped ids {100 * result['escaped_share']:.1f} % globally, "
            f"{100 * result['local_escaped_share']:.2f} % as field-local ranks. Whole packed blocks of the same rows "
            f"(ids, labels, chunk bounds): zstd {result['blocks']['zstd_ratio']:.2f}× smaller, their frames as "
            f"4 byte planes first {result['blocks']['byte_planes_zstd_ratio']:.2f}×; with the ids as ranks within "
            f"their field (what a store of these rows holds by default) "
            f"{result['blocks']['field_ranks_packed_ratio']:.2f}× smaller packed, "
            f"{result['blocks']['field_ranks_byte_planes_zstd_ratio']:.2f}× as zstd byte planes.")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    result = measure(args.rows, args.seed)
    env = environment()
    payload = {"environment": env, "device": env["device"], "arguments": vars(args), **result}
    markdown = (f"Wire forms of block ids ({env['cpu']} x {env['cpu_count']}, {env['date']}; `PYTHONPATH=. python "
                f"benchmarks/block_codecs.py --rows {args.rows}`)\n\n" + codecs_table(payload))
    print(markdown)
    write("block_codecs", payload, markdown, args.out)


if __name__ == "__main__":
    main()
