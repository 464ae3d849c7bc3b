"""The shared table and plot writers of harness/plots.py."""

from __future__ import annotations

from pathlib import Path

from harness import plots


def test_markdown_table_formats_floats_and_aligns_columns() -> None:
    text = plots.markdown_table(["policy", "TTFT p50 (ms)"], [["a", 1.234], ["b", 10]])
    assert text.splitlines() == [
        "| policy | TTFT p50 (ms) |",
        "|---|---|",
        "| a | 1.23 |",
        "| b | 10 |",
    ]


def test_plots_are_png_files_in_the_directory(tmp_path: Path) -> None:
    cdf = plots.cdf_plot(tmp_path, "cdf", {"a": [3.0, 1.0, 2.0], "empty": []}, "ms", "t")
    bars = plots.bar_plot(tmp_path, "bars", {"p1": {"r0": 0.5, "r1": 0.5}}, "share", "t")
    line = plots.line_plot(tmp_path, "line", {"w1": [(1, 10.0), (2, 19.0)]}, "c", "ev/s", "t")
    md = plots.write_markdown(tmp_path / "sub", "table", "| a |")
    for path in (cdf, bars, line):
        assert path.parent == tmp_path
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert md.read_text() == "| a |\n"
