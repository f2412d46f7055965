"""The report's tables: markdown and plain-text cells (mean ± SE, best in bold) and results.csv."""

from __future__ import annotations

import csv
import io
import math
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from ..durable import write_atomic
from .columns import COVERAGE_TARGET, NA, REFERENCES, SHORT_LABELS, Column
from .stats import Stat, aggregate, metric_keys, stat, to_float


def _best(column: Column, means: Mapping[str, float]) -> set[str]:
    """Models whose mean is best in the column (none when fewer than two are comparable).

    The reference rows (:data:`REFERENCES`) are never ranked: the oracle would win nearly
    every column and bold nothing the search chose. A signed column (``better="zero"``)
    ranks by the distance from 0."""
    finite = {f: m for f, m in means.items() if math.isfinite(m) and f not in REFERENCES}
    if column.better is None or len(finite) < 2:
        return set()
    score = {
        "min": lambda m: m,
        "max": lambda m: -m,
        "target": lambda m: abs(m - COVERAGE_TARGET),
        "zero": abs,
    }[column.better]
    top = min(score(m) for m in finite.values())
    return {f for f, m in finite.items() if math.isclose(score(m), top, rel_tol=1e-12, abs_tol=1e-15)}


def _cell(value: Stat, seeds: int, column: Column, bold: bool = False, sep: str = " ± ") -> str:
    """'mean ± se' (mean in bold if best), 'n/a' without values, '(n=k)' when k differs from seeds."""
    if value.n == 0:
        return NA
    text = f"{value.mean:.{column.decimals}f}"
    if bold:
        text = f"**{text}**"
    if column.spread and value.n >= 2:
        text += f"{sep}{value.se:.{column.decimals}f}"
    if value.n != seeds:
        text += f" (n={value.n})"
    return text


def shown_columns(columns: Sequence[Column], families: Sequence[str], finals: Mapping) -> list[Column]:
    """The columns to show: optional ones only when some family has a value for them."""
    def present(col: Column) -> bool:
        return any(stat(finals[f], col.key).n for f in families)
    return [c for c in columns if not c.optional or present(c)]


def markdown_table(columns: Sequence[Column], families: Sequence[str], finals: Mapping) -> list[str]:
    """The lines of a markdown table, one row per family, the best mean per column in bold."""
    stats = {f: {c.key: stat(finals[f], c.key) for c in columns} for f in families}
    best = {c.key: _best(c, {f: stats[f][c.key].mean for f in families}) for c in columns}
    lines = [
        "| family | seeds | " + " | ".join(c.label for c in columns) + " |",
        "|---|---:|" + "---:|" * len(columns),
    ]
    for f in families:
        seeds = len(finals[f])
        cells = [_cell(stats[f][c.key], seeds, c, bold=f in best[c.key]) for c in columns]
        lines.append(f"| {f} | n={seeds} | " + " | ".join(cells) + " |")
    return lines


def plain_table(title: str, columns: Sequence[Column], families: Sequence[str], finals: Mapping) -> list[str]:
    """The lines of an aligned plain-text table (for a terminal), headed by ``title``."""
    header = ["family", "seeds"] + [SHORT_LABELS.get(c.label, c.label) for c in columns]
    rows = [
        [f, str(len(finals[f]))] + [_cell(stat(finals[f], c.key), len(finals[f]), c, sep="±") for c in columns]
        for f in families
    ]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    fmt = lambda r: "  ".join(cell.ljust(w) for cell, w in zip(r, widths)).rstrip()  # noqa: E731
    body = [fmt(r) for r in rows] or ["(no results)"]
    return [title, fmt(header), "  ".join("-" * w for w in widths), *body]


def all_na(columns: Sequence[Column], families: Sequence[str], finals: Mapping) -> bool:
    """True when no family has a value in any of the columns."""
    return all(stat(finals[f], c.key).n == 0 for f in families for c in columns)


def _csv_value(value: Any) -> str:
    x = to_float(value)
    if not math.isfinite(x):
        return ""
    return str(int(value)) if isinstance(value, (int, np.integer)) else repr(x)


def write_csv(path: Path, families: Sequence[str], finals: Mapping) -> None:
    """results.csv: a ``value`` row per (family, seed) with every numeric metric, then a
    ``mean`` and an ``se`` row per family; an empty cell is no value."""
    keys = metric_keys(row for f in families for row in finals[f])
    table = io.StringIO(newline="")
    writer = csv.writer(table)
    writer.writerow(["family", "stat", "seed", *keys])
    for f in families:
        for row in finals[f]:
            writer.writerow([f, "value", _csv_value(row.get("seed"))] + [_csv_value(row.get(k)) for k in keys])
        stats = [aggregate(row.get(k) for row in finals[f]) for k in keys]
        writer.writerow([f, "mean", ""] + [_csv_value(m) for m, _ in stats])
        writer.writerow([f, "se", ""] + [_csv_value(s) for _, s in stats])
    write_atomic(path, table.getvalue())  # the whole table at once: never a half-written file


def read_finals(csv_path: str | Path) -> dict[str, list[dict[str, float]]]:
    """The per-seed rows of a results.csv, back as ``finals`` ({family: [flat result per seed]})."""
    finals: dict[str, list[dict[str, float]]] = {}
    with Path(csv_path).open(newline="") as fh:
        for row in csv.DictReader(fh):
            if row.get("stat") != "value":
                continue
            values = {k: float(v) if v else math.nan for k, v in row.items() if k not in ("family", "stat")}
            finals.setdefault(row["family"], []).append(values)
    return finals
