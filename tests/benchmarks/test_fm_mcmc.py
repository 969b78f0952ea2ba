"""benchmarks/fm_mcmc.py's table: a row per data set and iteration count, the best ALS L2 beside the
samplers, and myFM's seconds over alac's per speed size."""

from benchmarks.fm_mcmc import arms_table


def test_rows_per_data_set_and_iteration_count_and_the_speed_ratio():
    arms = [{"name": "alac_mcmc", "data": "d", "iterations": 200, "test_rmse": 0.85, "seconds_per_iteration": 0.01},
            {"name": "myfm_mcmc", "data": "d", "iterations": 200, "test_rmse": 0.84, "seconds_per_iteration": 0.04},
            {"name": "alac_als_reg5", "data": "d", "iterations": 200, "test_rmse": 0.90},
            {"name": "alac_als_reg20", "data": "d", "iterations": 200, "test_rmse": 0.87},
            {"name": "alac_mcmc", "data": "c", "iterations": 1000, "test_auc": 0.80, "seconds_per_iteration": 0.01},
            {"name": "alac_cuda_float32", "ratings": 10, "seconds_per_iteration": 0.5},
            {"name": "myfm_cpu", "ratings": 10, "seconds_per_iteration": 30.0}]
    text = arms_table({"arms": arms})
    assert "| d, 200 iterations | rmse | 0.8500 | 0.8400 | 0.8700 (20) |  | 0.0100 / 0.0400 |" in text
    assert "| c, 1000 iterations | auc | 0.8000 |  |  |  | 0.0100 |" in text
    assert "| 10 | 0.5000 |  |  | 30.0000 | 60x |" in text
    # one iteration count: the data set's name alone
    assert "| d | rmse |" in arms_table({"arms": arms[:4]})
