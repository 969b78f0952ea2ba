"""benchmarks/distributed_tables.py: one row per set and model, each aggregation's validation logloss
against one GPU's, sharded tables beside them, and the SCD arms with their split of an epoch."""

import pytest
import torch

from alac.data.synthetic import criteo_like
from benchmarks import distributed, distributed_tables


def _flow(name, rows, ranks, ms, loss, sent=0):
    return {"name": name, "rows": rows, "ranks": ranks, "ms_per_epoch": ms, "ms_per_epoch_validated": ms + 1.0,
            "val_logloss": [0.7, loss],
            "bytes_communicated": sent, "epochs": 2, "lr": 0.5 if "fm" in name else 2.0}


def test_the_flow_table_compares_every_aggregation_with_one_gpu():
    arms = [_flow("flow_lr_1gpu", 100, 1, 10.0, 0.50), _flow("flow_lr_2gpu_rows", 100, 2, 5.0, 0.51, 2e6),
            _flow("flow_lr_2gpu_adding", 100, 2, 5.0, 0.55, 1e6), _flow("flow_lr_2gpu_averaging", 100, 2, 6.0, 0.49),
            _flow("flow_lr_2gpu_sequential", 100, 2, 4.0, 0.50, 1e6),
            _flow("flow_lr_2gpu_sharded", 100, 2, 8.0, 0.52, 3e6),
            _flow("flow_fm_1gpu", 100, 1, 20.0, 0.45), _flow("flow_fm_2gpu_sequential", 100, 2, 12.0, 0.46, 4e6)]
    scd = {"name": "scd_dual", "ranks": 2, "epochs": 3, "ms_per_epoch": 30.0, "waiting_ms_per_epoch": 1.0,
           "communication_ms_per_epoch": 2.0, "bytes_communicated": 5e6, "gap": [1e-3, 1e-7],
           "time_to_gap": {"1e-06": 0.25}, "gamma": [1.0, 0.5]}
    match = {"name": "scd_match", "ranks": 2, "epochs": 30, "ms_per_epoch": 4.0, "gap": [1e-3, 1e-6],
             "largest_relative_difference": 2e-12}
    text = distributed_tables.tables({"arms": arms + [scd, match]})
    # the replicated tables (the sequential arm) and, beside them, sharded ones for the models that have them
    assert ("| 100 | lr | 2.0 | 10.0 | 4.0 | 2.50× | 2.20× | 0.5000 | +0.0000 | +0.0100 | -0.0100 | +0.0500 | 1.0 "
            "| 8.0, 1.25×, +0.0200, 3.0 | - |") in text
    assert "| 100 | fm | 0.5 | 20.0 | 12.0 | 1.67× | 1.62× | 0.4500 | +0.0100 | - | - | - | 4.0 | - | - |" in text
    assert "| scd_dual | 2 | 3 | 30.0 | 1.0 | 2.0 | 5.0 | 1.00e-07 | 0.25 | 1.00 0.50 |" in text
    assert "| scd_match |" not in text
    assert ("- CoCoA over the ranks against as many virtual workers, the largest relative difference of their gaps: "
            "scd_match 2.0e-12 over 30 epochs (4.0 ms an epoch).") in text


def test_a_scaling_run_reports_each_count_of_ranks_against_one_gpu():
    arms = [_flow("flow_lr_1gpu", 100, 1, 8.0, 0.50), _flow("flow_lr_2gpu_sequential", 100, 2, 4.4, 0.501),
            _flow("flow_lr_4gpu_sequential", 100, 4, 2.5, 0.502)]
    text = distributed_tables.tables({"arms": arms})
    assert "| 100 | lr | 8.0 | 2 | 4.4 | 1.82× | 1.67× | 0.91 | +0.0010 |" in text
    assert "| 100 | lr | 8.0 | 4 | 2.5 | 3.20× | 2.57× | 0.80 | +0.0020 |" in text
    # in place of the table of aggregations, which two counts (one GPU and the ranks) get instead
    assert "Δ adding" not in text
    two = distributed_tables.tables({"arms": arms[:2]})
    assert "of linear" not in two and "Δ adding" in two


def test_a_diverged_arm_is_reported_as_diverged():
    arms = [_flow("flow_fm_1gpu", 100, 1, 20.0, 0.45), _flow("flow_fm_4gpu_sequential", 100, 4, 6.0, 0.46, 4e6),
            {"name": "flow_fm_4gpu_adding", "rows": 100, "ranks": 4, "lr": 0.5, "aggregation": "adding",
             "diverged": "training diverged in epoch 4"}]
    text = distributed_tables.tables({"arms": arms})
    assert "| 100 | fm | 0.5 | 20.0 | 6.0 | 3.33× | 3.00× | 0.4500 | +0.0100 | - | - | diverged | 4.0 | - | - |" in text


@pytest.mark.parametrize(("world", "rank"), [(1, 0), (3, 0), (3, 2)])
def test_each_rank_makes_only_its_share_of_the_rows(world, rank):
    """The share equals the whole set's rows as tensor_split cuts them (without field ids), made in
    pieces smaller than it."""
    whole = criteo_like(1000, seed=4, device="cpu")
    rows = torch.arange(1000).tensor_split(world)[rank]
    expected = whole.take(rows)
    share = distributed.share_rows(1000, world, rank, 4, torch.device("cpu"), piece_rows=128)
    assert torch.equal(share.indptr, expected.indptr) and torch.equal(share.indices, expected.indices)
    assert torch.equal(share.labels, expected.labels) and share.n_features == whole.n_features
    assert share.fields is None


def test_a_placement_run_reports_its_table_against_one_gpu():
    arm = {"name": "placement_fm16_adagrad_kaggle_x32", "ranks": 4, "tables": "hybrid", "table_bytes": 82e9,
           "gpu_bytes": 80e9, "rows_held": 270_000_000, "features": 1_080_000_000, "sync_every": 64,
           "epoch_seconds": [9.87, 5.1234], "ms_per_epoch": 5123.4, "val_logloss": [0.5, 0.49],
           "bytes_communicated": 3e9}
    text = distributed_tables.tables({"arms": [arm]})
    assert ("| placement_fm16_adagrad_kaggle_x32 | 4 | hybrid | 82.0 | 80.0 | 270,000,000 of 1,080,000,000 | 64 | "
            "9.9 / 5.1 | 0.5000 / 0.4900 | 3000 |") in text
