"""Reading Nsight Compute's raw CSV page and the async floor table built from it, on a hand-written
log in ncu's format (its progress lines, a header of names, a row of units, a row per launch; times
in ns as ncu 2025.3 writes them with --print-units base)."""

from benchmarks.flow_tables import floor_table
from benchmarks.nsight import parse_raw_csv, summary

LOG = """==PROF== Connected to process 4242 (/usr/bin/python3.12)
==PROF== Profiling "alac_lr_0123abcd_async_hot_async" - 0: 0%....50%....100% - 38 passes
"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC",\
"gpu__time_duration.sum","lts__t_sector_hit_rate.pct","lts__throughput.avg.pct_of_peak_sustained_elapsed",\
"gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed",\
"smsp__average_warps_issue_stalled_lg_throttle_per_issue_active.ratio",\
"smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio","dram__bytes.sum",\
"smsp__average_warps_issue_stalled_selected_per_issue_active.ratio","lts__t_sectors_srcunit_tex_op_red.sum",\
"lts__t_sectors_srcunit_tex_op_red_lookup_hit.sum"
"","","","","","","","","","","","ns","%","%","%","inst","inst","byte","inst","sector","sector"
"0","4242","python3.12","127.0.0.1","alac_lr_0123abcd_async_hot_async","1","7","(128, 1, 1)","(528, 1, 1)","0",\
"9.0","4,650,000","92.5","61.25","38","1.5","10.25","1,234,567,890","100","0","0"
"1","4242","python3.12","127.0.0.1","edge_traffic","1","7","(256, 1, 1)","(4096, 1, 1)","0","9.0","512,000",\
"40","70","80","6.5","2","n/a","100","2,000","1,500"
==PROF== Disconnected from process 4242
""".replace("\\\n", "")


def test_raw_csv_rows_are_launches_with_numbers_and_times_in_milliseconds():
    first, second = parse_raw_csv(LOG)
    assert first["Kernel Name"] == "alac_lr_0123abcd_async_hot_async"
    assert first["gpu__time_duration.sum"] == 4.65          # 4,650,000 ns
    assert first["dram__bytes.sum"] == 1_234_567_890.0      # thousands separators dropped, bytes kept
    assert first["Block Size"] == "(128, 1, 1)"
    assert second["gpu__time_duration.sum"] == 0.512
    assert second["dram__bytes.sum"] == "n/a"


def test_a_summary_takes_the_names_ncu_reported_and_the_top_stall():
    # "selected" (the issue itself) is no stall, however many cycles it shows
    first, second = (summary(launch) for launch in parse_raw_csv(LOG))
    assert first == {"ms": 4.65, "l2_hit_pct": 92.5, "l2_busy_pct": 61.25, "dram_busy_pct": 38.0,
                     "dram_bytes": 1_234_567_890.0, "l2_reduction_sectors": 0.0, "l2_reduction_hit_sectors": 0.0,
                     "top_stall": ["long_scoreboard", 10.25]}
    assert second["top_stall"] == ["lg_throttle", 6.5]
    assert "dram_bytes" not in second                       # not a number in this launch
    assert parse_raw_csv("==PROF== no launch profiled\n") == []


def _floor_result(counters):
    traffic = [("w gathered, and the kernel's split of atomic additions", 3.0),
               ("w gathered, and cold edges' atomic additions only (hot sums free)", 2.25),
               ("segment axis: the three together", 2.5)]
    return {"kernels": {"lr": {"ms_per_epoch": 4.5, "hot_size": 1347, "val_logloss": 0.5075}},
            "traffic": [{"model": "lr", "traffic": name, "ms": ms, "gaccesses_per_s": 50.0} for name, ms in traffic],
            "counters": counters}


def test_the_floor_table_bounds_what_free_hot_sums_could_save_and_shows_the_counters():
    launches = [summary(launch) for launch in parse_raw_csv(LOG)]
    text = floor_table(_floor_result({"generated async LR, H = 1,347": launches[0],
                                      "flat: w gathered, and the kernel's split of atomic additions": launches[1]}))
    assert "at most 0.75 ms off LR's floor (3.00 against 2.25 ms): its epoch less that is 3.75 ms" in text
    assert "H = 1,347: 4.65 ms, L2 61 % and DRAM 38 % busy, 0 % occupancy" in text   # no reductions, no share
    assert "warps mostly waiting on long scoreboard (10.2 cycles an issue)" in text
    row = ("| lr | w gathered, and the kernel's split of atomic additions | 3.00 | 50 | 40 | 75.00 | 70 | 80 "
           "| lg throttle (6.5) |")
    assert row in text
    assert "| - | - | - | - | - |" in text                   # the flat kernel ncu did not profile
    plain = floor_table(_floor_result({"unavailable": "ncu is not on the PATH"}))
    assert "L2 hits" not in plain and "Nsight" not in plain
