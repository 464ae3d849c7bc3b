"""Tables and plots every benchmark writes beside its JSON summary.

A benchmark builds its table as rows of cells and gets back markdown to print
and to save; plots are PNG files drawn with matplotlib's non-interactive
backend (no display on a server). Everything goes to the benchmark's results
directory (bench/results/<name>/ for a real run, ignored by git), and each
writer returns the path it wrote so the benchmark can print where to look.

What does not live here: measuring (workload.py) and starting stacks
(stack.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # before pyplot: draw to files, never to a display

import matplotlib.pyplot as plt
from matplotlib.figure import Figure

from harness.bench_stack import write_summary


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A GitHub-flavoured markdown table; floats with two decimals."""

    def cell(value: object) -> str:
        return f"{value:.2f}" if isinstance(value, float) else str(value)

    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def write_markdown(directory: Path, name: str, text: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.md"
    path.write_text(text + "\n")
    return path


def write_results(out: Path | None, name: str, text: str, summary: dict[str, Any]) -> None:
    """A benchmark's summary at `out` (JSON) and its report `text` beside it
    as <name>.md; neither when `out` is None (a smoke run not told where)."""
    if out is not None:
        write_markdown(out.parent, name, text)
    write_summary(out, summary)


def cdf_plot(
    directory: Path, name: str, series: Mapping[str, Sequence[float]], xlabel: str, title: str
) -> Path:
    """One empirical CDF per series (e.g. TTFT in ms per routing policy)."""
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for label, values in series.items():
        ordered = sorted(values)
        if not ordered:
            continue
        ys = [(i + 1) / len(ordered) for i in range(len(ordered))]
        ax.step(ordered, ys, where="post", label=label)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("fraction of requests")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()
    return _save(fig, directory, name)


def bar_plot(
    directory: Path,
    name: str,
    groups: Mapping[str, Mapping[str, float]],
    ylabel: str,
    title: str,
) -> Path:
    """Grouped bars: one group per outer key (e.g. policy), one bar per inner
    key (e.g. replica), such as each replica's share of requests."""
    fig, ax = plt.subplots(figsize=(7, 4.5))
    inner = sorted({key for bars in groups.values() for key in bars})
    width = 0.8 / max(len(inner), 1)
    for j, key in enumerate(inner):
        xs = [i + j * width for i in range(len(groups))]
        ax.bar(xs, [bars.get(key, 0.0) for bars in groups.values()], width, label=key)
    ax.set_xticks([i + width * (len(inner) - 1) / 2 for i in range(len(groups))])
    ax.set_xticklabels(list(groups))
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3, axis="y")
    ax.legend(fontsize="small")
    return _save(fig, directory, name)


def line_plot(
    directory: Path,
    name: str,
    series: Mapping[str, Sequence[tuple[float, float]]],
    xlabel: str,
    ylabel: str,
    title: str,
) -> Path:
    """One line per series of (x, y) points (e.g. events/s against concurrency)."""
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for label, points in series.items():
        ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=label)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()
    return _save(fig, directory, name)


def _save(fig: Figure, directory: Path, name: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.png"
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
