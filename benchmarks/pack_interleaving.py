"""PICASSO's K-interleaving of packed tables by Eq. 3 (alac.nn.interleave.pack_groups): the packs of
benchmarks/fields.py's set (`--fields` one-hot fields of dims 4, 8, 16 and 32: four packs) side by side
on streams of their own where their step's parameters together fit one wave of the GPU's programs,
against the packs in turn, on the tables' generated kernels, eagerly and replayed from CUDA graphs, at
each `--batch-sizes`; one process:
`PYTHONPATH=. python benchmarks/pack_interleaving.py`.

Per arm: `samples_per_s`, `kernels_per_step`, `auc` (fields.arm's figures) and `groups` (Eq. 3's groups
of the packs at that batch; as many as packs: nothing side by side). PackedEmbeddingBags' default
(interleave_packs None) is side by side inside a CUDA graph's capture only. Writes
results/pack_interleaving.json and .md.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from alac.nn.interleave import pack_groups, wave_values
from benchmarks.distributed import recorded_command
from benchmarks.fields import SEED, Packed, arm, field_shapes, rows
from benchmarks.report import environment, write


def groups_at(shapes, batch_size, device):
    """Eq. 3's groups of the packs (dims in the packs' order) for one-hot batches of batch_size rows."""
    dims = sorted({d for _, d in shapes}, key=[d for _, d in shapes].index)
    volumes = [batch_size * sum(1 for _, d in shapes if d == dim) * dim for dim in dims]
    return len(pack_groups(volumes, wave_values(device)))


def arms_table(payload):
    lines = ["| batch | Eq. 3 groups of the packs | eager: in turn | side by side | CUDA graph: in turn | side by side "
             "| test AUC (graph, in turn / side by side) |", "|---|---|---|---|---|---|---|"]
    arms = {(a["batch_size"], a["graphed"], a["interleave_packs"]): a for a in payload["arms"]}
    for batch in sorted({key[0] for key in arms}):
        figures = []
        for graphed in (False, True):
            turn, side = arms[(batch, graphed, False)], arms[(batch, graphed, True)]
            figures += [f"{turn['samples_per_s'] / 1e6:.3f}M",
                        f"{side['samples_per_s'] / 1e6:.3f}M ({side['samples_per_s'] / turn['samples_per_s']:.2f}x)"]
        side = arms[(batch, True, True)]
        lines.append(f"| {batch:,} | {side['groups']} of {side['packs']} | {' | '.join(figures)} | "
                     f"{arms[(batch, True, False)]['auc']:.4f} / {side['auc']:.4f} |")
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fields", type=int, default=200)
    parser.add_argument("--batch-sizes", default="256,1024,4096")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--valid-rows", type=int, default=50_000)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        parser.error("needs a CUDA GPU: streams are a GPU's")
    args.device = "cuda"
    shapes = field_shapes(args.fields)
    valid = rows(shapes, 10**9, args.valid_rows, args.device)

    def batch_of(first, count):
        return rows(shapes, first, count, args.device)

    arms = []
    for batch_size in (int(b) for b in args.batch_sizes.split(",")):
        for graphed in (False, True):
            for interleave in (False, True):
                torch.manual_seed(SEED)
                model = Packed(shapes, args.device, backend="triton", graphed=graphed, interleave_packs=interleave)
                name = f"alac_packed_{'graphed' if graphed else 'kernels'}_{'side' if interleave else 'turn'}"
                result = arm(name, model, model, batch_of, valid, args, batch_size=batch_size)
                result.update(batch_size=batch_size, graphed=graphed, interleave_packs=interleave,
                              packs=len(model.tables.packs), groups=groups_at(shapes, batch_size, args.device))
                arms.append(result)
    payload = {"environment": environment(), "arguments": vars(args), "command": recorded_command(sys.argv[1:]),
               "arms": arms}
    write("pack_interleaving", payload, arms_table(payload), args.out)
    print(arms_table(payload))


if __name__ == "__main__":
    main()
