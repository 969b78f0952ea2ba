"""benchmarks/fit_queue.py's summary: medians and ranges per size and mode over the placements, the
ratio to the largest size, and the spread of the medians."""

import pytest

from benchmarks.fit_queue import summarize


def _result(rows, mode, ns_per_nnz, epochs=40):
    nnz = rows * 39
    return {"rows": rows, "nnz": nnz, "mode": mode, "epochs": epochs, "ns_per_nnz": ns_per_nnz,
            "ms_per_epoch": ns_per_nnz * nnz / 1e6, "last_train_loss": 0.5}


def test_summary_takes_medians_over_placements_and_compares_with_the_largest_size():
    results = [_result(1000, "queued", v, epochs=e) for v, e in ((0.030, 50), (0.026, 45), (0.027, 60))]
    results += [_result(4000, "queued", v) for v in (0.025, 0.0262, 0.031)]
    results += [_result(4000, "one at a time", v) for v in (0.05, 0.04)]
    results += [_result(1000, "one at a time", v) for v in (0.06, 0.08)]
    summary, spread = summarize(results, ["queued", "one at a time"])
    by_key = {(r["rows"], r["mode"]): r for r in summary}
    small, large = by_key[1000, "queued"], by_key[4000, "queued"]
    assert small["measurements"] == 3 and small["epochs"] == 45
    assert small["ns_per_nnz_median"] == pytest.approx(0.027)
    assert small["ns_per_nnz_range"] == [0.026, 0.030]
    assert large["ns_per_nnz_median"] == pytest.approx(0.0262)
    assert large["ms_per_epoch_median"] == pytest.approx(0.0262 * 4000 * 39 / 1e6)
    assert small["vs_largest"] == pytest.approx(0.027 / 0.0262) and large["vs_largest"] == 1.0
    assert by_key[1000, "one at a time"]["vs_largest"] == pytest.approx(0.07 / 0.045)
    assert spread == {"queued": pytest.approx(0.027 / 0.0262), "one at a time": pytest.approx(0.07 / 0.045)}
