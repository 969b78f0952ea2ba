"""benchmarks/deep_ranks.py's arms on one CPU rank and small data: every figure the table reads is
there, and the table renders (the GPU runs are the benchmark's own)."""

import argparse

import torch

from alac.data.split import split
from alac.data.synthetic import criteo_like
from alac.runtime.ranks.distributed import Ranks
from benchmarks.deep_ranks import alac_arm, arms_table, torch_arm


def test_one_rank_arms_report_every_figure():
    train, valid, test = split(criteo_like(1200, n_fields=6, model="fm", seed=0, device="cpu"), (0.8, 0.1, 0.1), seed=0)
    args = argparse.Namespace(epochs=1, batch_size=256, seed=0)
    one = Ranks(device=torch.device("cpu"))
    arms = [alac_arm("alac_1gpu", one, train, valid, test, args, "auto"),
            torch_arm("torch_ddp_1gpu", one, train, valid, test, args)]
    for arm in arms:
        arm["rows"] = train.n_rows
        assert arm["samples_per_s"] > 0 and len(arm["valid_auc"]) == 1 and 0.4 < arm["test_auc"] <= 1
    assert arms[0]["bytes_per_rank"] == 0
    text = arms_table({"arms": arms})
    assert "| alac_1gpu | 1 | 960 |" in text and "| torch_ddp_1gpu | 1 | 960 |" in text
