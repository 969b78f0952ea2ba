"""benchmarks/deep_host_tables.py's arms on the CPU and small data: the host arm's cache figures are
there and add up, and the table renders (the GPU runs are the benchmark's own)."""

import argparse

import pytest
import torch

from alac.data.split import split
from alac.data.synthetic import criteo_like
from benchmarks.deep_host_tables import alac_arm, arms_table, torch_arm


def test_the_arms_report_every_figure_and_the_table_renders():
    train, valid, test = split(criteo_like(1200, n_fields=6, model="fm", seed=0, device="cpu"), (0.8, 0.1, 0.1),
                               seed=0)
    args = argparse.Namespace(epochs=1, batch_size=128, seed=0)
    cpu = torch.device("cpu")
    budget = 4 * train.n_features + 2 * 76 * (128 * 6 + 500)
    arms = [alac_arm("alac_gpu", train, valid, test, args, cpu), alac_arm("alac_host_0.1", train, valid, test, args,
                                                                         cpu, budget),
            alac_arm("alac_host_0.1_streamed", train, valid, test, args, cpu, budget, stream=True),
            torch_arm("torch_host_table", train, valid, test, args, cpu)]
    for arm in arms:
        assert arm["samples_per_s"] > 0 and len(arm["valid_auc"]) == 1 and 0.4 < arm["test_auc"] <= 1
    host = arms[1]
    assert 0 < host["cached_rows"] < train.n_features and 0 < host["cached_entry_share"] < 1
    assert host["staged_rows_per_step"] > 0
    assert host["test_auc"] == pytest.approx(arms[0]["test_auc"], abs=1e-5)
    assert arms[2]["streamed"] and arms[2]["test_auc"] == pytest.approx(host["test_auc"], abs=1e-5)
    text = arms_table({"arms": arms, "table_bytes": 76 * train.n_features, "features": train.n_features})
    assert "| alac_host_0.1 | GPU | " in text and "| alac_host_0.1_streamed | host memory | " in text
    assert "| torch_host_table | " in text and "1.00x" in text
