"""BENCHMARKS.md and the README's performance table are what benchmarks/render.py makes of the
committed results: neither can drift from the measurements."""

from pathlib import Path

from benchmarks.render import headline_table, render

ROOT = Path(__file__).resolve().parents[2]


def test_benchmarks_md_is_generated_from_the_results():
    assert (ROOT / "BENCHMARKS.md").read_text() == render(), "run: PYTHONPATH=. python benchmarks/render.py"


def test_benchmarks_md_holds_the_current_tables_in_at_most_500_lines():
    text = render()
    assert len(text.splitlines()) <= 500
    # every section's description sits under its heading, each table follows a blank line or a heading
    lines = text.splitlines()
    for before, line in zip(lines, lines[1:]):
        if line.startswith("|---"):
            continue
        if line.startswith("| ") and not before.startswith("|"):
            assert before == "" or before.startswith("## "), before


def test_the_readme_table_is_generated_from_the_results():
    assert headline_table() in (ROOT / "README.md").read_text()


def test_the_tiles_table_shows_each_k_automatic_and_fastest_against_its_floor():
    from benchmarks.flow_tables import tiles_table

    def run(k, automatic, ms, floor):
        return {"k": k, "automatic_tile": automatic, "chunk_size": 32, "slots": 8, "warps": 8, "programs": 528,
                "ms_per_epoch": ms, "floor_ms": floor, "val_logloss": 0.5}

    text = tiles_table({"results": [run(16, True, 12.0, 8.0), run(16, False, 10.0, 8.0), run(16, False, 11.0, 8.0),
                                    run(32, True, 20.0, 10.0)]})
    assert "| 16 | automatic | 32 | 8 | 8 | 528 | 12.00 | 8.00 | 1.50× | 0.5000 |" in text
    assert "| 16 | fastest | 32 | 8 | 8 | 528 | 10.00 | 8.00 | 1.25× | 0.5000 |" in text
    assert "| 32 | automatic |" in text and "| 32 | fastest | 32 | 8 | 8 | 528 | 20.00 |" in text


def test_the_hot_table_shows_each_k_without_with_the_cost_models_the_planners_and_the_fastest_h():
    from benchmarks.flow_tables import hot_table

    def run(k, choice, hot, ms, floor=10.0):
        return {"k": k, "hot_choice": choice, "hot_size": hot, "hot_sums_mb": hot / 10, "ms_per_epoch": ms,
                "floor_ms": floor, "val_logloss": 0.5}

    text = hot_table({"results": [run(16, None, 0, 30.0), run(16, "model", 700, 12.0), run(16, "uncapped", 1100, 13.0),
                                  run(16, 256, 256, 18.0), run(16, 768, 768, 11.5, 9.0)]})
    assert ("| 16 | 30.00 | 1,100 (110 MB): 13.00 (1.30×), 0.5000 | 700 (70 MB): 12.00 (1.20×), 0.5000 | "
            "768 (77 MB): 11.50 (1.28×), 0.5000 |") in text


def test_the_streaming_table_sets_compressed_blocks_against_the_raw_store():
    from benchmarks.render import streaming_table

    def arm(name, ms, **extra):
        return {"name": name, "source": "disk", "bytes_per_epoch": 3000, "bytes_per_edge": 3.0, "ms_per_epoch": ms,
                "read_bound_ms": 10.0, "resident_ms": 5.0, "val_logloss": [0.5], **extra}

    text = streaming_table({"pinned_h2d_gb_per_s": 50.0, "arms": [
        arm("lr_streamed_from_disk", 30.0, stored_bytes=3000, ids="narrow"),
        arm("lr_streamed_from_disk_zstd", 20.0, stored_bytes=2000, codec="zstd", ids="narrow"),
        arm("lr_streamed_from_disk_zstd_field_ranks", 12.0, stored_bytes=1200, codec="zstd", ids="field_ranks")]})
    assert "lr_streamed_from_disk_zstd (narrow ids, stored 1.50x smaller than the raw store): 1.50x the raw store's " \
           "speed." in text
    assert "lr_streamed_from_disk_zstd_field_ranks (field_ranks ids, stored 2.50x smaller than the raw store): 2.50x " \
           "the raw store's speed." in text
    assert "| lr_streamed_from_disk_zstd | disk | narrow |" in text
