"""The three figures of the final models: entry-level ECE, reliability diagrams, interval widths.

They are drawn from each result's per-entry data, ``row[PER_ENTRY_KEY]``: a dict of the
entry-level arrays of :func:`focus_tune.scoring.evaluation.test_result` (``marginal`` and ``conditional``:
{metric: [L]}, ``interval``: {lo, hi, point, true: [N]}, ``reliability``: {entry: {confidence,
accuracy, count}}), arrays or lists with NaN (or None) for no value. A row without it, or
without one of its parts, adds nothing to the figure; a figure with nothing reads 'no data'.
Matplotlib's Agg canvas only, no pyplot state.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from ..durable import write_atomic
from .columns import COVERAGE_TARGET, PER_ENTRY_KEY, REFERENCES, color
from .stats import stat

DPI = 110


def _arrays(row: Mapping[str, Any], part: str) -> Mapping[str, Any]:
    """One part of a result's per-entry data ({} where the result has none)."""
    return (row.get(PER_ENTRY_KEY) or {}).get(part) or {}


def _array(values: Any) -> np.ndarray:
    """A flat float array (None -> NaN); empty for None."""
    return np.empty(0) if values is None else np.asarray(values, dtype=np.float64).ravel()


def _column_stats(curves: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """NaN-aware mean and SE across curves of possibly different lengths (NaN-padded)."""
    m = np.full((len(curves), max(c.size for c in curves)), np.nan)
    for i, c in enumerate(curves):
        m[i, : c.size] = c
    ok = np.isfinite(m)
    n = ok.sum(axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(ok, m, 0.0).sum(axis=0) / n
        var = (np.where(ok, m - mean, 0.0) ** 2).sum(axis=0) / (n - 1)
        se = np.sqrt(var / n)
    return np.where(n > 0, mean, np.nan), np.where(n > 1, se, np.nan)


def _new_figure(width: float, height: float, ncols: int = 1) -> tuple[Figure, list]:
    fig = Figure(figsize=(width, height))
    FigureCanvasAgg(fig)
    axes = [fig.add_subplot(1, ncols, i + 1) for i in range(ncols)]
    return fig, axes


def no_data(ax) -> None:
    """Write 'no data' across an empty panel."""
    ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes, fontsize=12, color="grey")


def save_png(fig: Figure, path: Path) -> Path:
    """Lay out ``fig`` and write it to ``path`` as a PNG at the reports' resolution, atomically."""
    fig.tight_layout()
    png = io.BytesIO()
    fig.savefig(png, dpi=DPI, format="png")
    write_atomic(path, png.getvalue())
    return path


def plot_entry_ece(path: Path, families: Sequence[str], finals: Mapping, title: str) -> Path:
    """Marginal ECE at each entry, mean over seeds with a ± SE band; the references dashed."""
    fig, (ax,) = _new_figure(7.5, 4.3)
    drawn = False
    for f in families:
        curves = [a for a in (_array(_arrays(row, "marginal").get("ece")) for row in finals[f]) if a.size]
        if not curves:
            continue
        mean, se = _column_stats(curves)
        x = np.arange(1, mean.size + 1)
        c = color(f, families)
        ls = "--" if f in REFERENCES else "-"
        ax.plot(x, mean, color=c, lw=1.6, ls=ls, label=f"{f} ({len(curves)} seed{'s' * (len(curves) > 1)})")
        if len(curves) > 1:
            ax.fill_between(x, mean - se, mean + se, color=c, alpha=0.15, lw=0)
        drawn = True
    if not drawn:
        no_data(ax)
    else:
        ax.legend(fontsize=9)
    ax.set(xlabel="entry i", ylabel="marginal ECE at entry i", title=f"Entry-level ECE: {title}")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.grid(alpha=0.3)
    return save_png(fig, path)


def _first_reliability(rows: Sequence[Mapping]) -> tuple[Any, Mapping]:
    """(seed, reliability curves by entry) of the first result that has them."""
    for row in rows:
        curves = _arrays(row, "reliability")
        if curves:
            return row.get("seed"), curves
    return None, {}


def _entry_order(name: Any) -> tuple[int, str]:
    try:
        return int(name), str(name)
    except ValueError:
        return 10**9, str(name)


def plot_reliability(path: Path, families: Sequence[str], finals: Mapping, title: str) -> Path:
    """One reliability diagram per stored entry, the first seed of each family."""
    firsts = {f: _first_reliability(finals[f]) for f in families}
    entries = sorted({e for _, curves in firsts.values() for e in curves}, key=_entry_order) or ["-"]
    fig, axes = _new_figure(3.4 * len(entries) + 0.6, 3.8, ncols=len(entries))
    for entry, ax in zip(entries, axes):
        ax.plot([0, 1], [0, 1], ls=":", color="grey", lw=1.2, label="perfect calibration")
        for f in families:
            seed, curves = firsts[f]
            curve = curves.get(entry) or {}
            conf, acc = _array(curve.get("confidence")), _array(curve.get("accuracy"))
            if conf.size and conf.size == acc.size:
                label = f if seed is None else f"{f} (seed {seed})"  # a reference (exact) has no seed
                ax.plot(conf, acc, marker="o", ms=4, lw=1.4, color=color(f, families), label=label)
        ax.set(xlim=(0, 1), ylim=(0, 1), xlabel="confidence", ylabel="accuracy", title=f"entry {entry}")
        ax.set_aspect("equal")
        ax.grid(alpha=0.3)
    if entries == ["-"]:
        no_data(axes[0])
    axes[0].legend(fontsize=8, loc="upper left")
    fig.suptitle(f"Reliability: {title}", fontsize=11)
    return save_png(fig, path)


def _interval_points(rows: Sequence[Mapping]) -> tuple[np.ndarray, np.ndarray]:
    """(true time, width hi - lo) pooled over the seeds, finite points only."""
    true, width = [], []
    for row in rows:
        iv = _arrays(row, "interval")
        t, lo, hi = (_array(iv.get(k)) for k in ("true", "lo", "hi"))
        if t.size and t.size == lo.size == hi.size:
            true.append(t)
            width.append(hi - lo)
    if not true:
        return np.empty(0), np.empty(0)
    t, w = np.concatenate(true), np.concatenate(width)
    ok = np.isfinite(t) & np.isfinite(w)
    return t[ok], w[ok]


def _binned_mean(t: np.ndarray, w: np.ndarray, bins: int = 20) -> tuple[np.ndarray, np.ndarray]:
    """Mean true time and mean width in up to ``bins`` equal-count bins of the true time."""
    edges = np.unique(np.quantile(t, np.linspace(0, 1, bins + 1)))
    if edges.size < 2:
        return np.array([t.mean()]), np.array([w.mean()])
    idx = np.clip(np.searchsorted(edges, t, side="right") - 1, 0, edges.size - 2)
    filled = [b for b in range(edges.size - 1) if np.any(idx == b)]
    return (np.array([t[idx == b].mean() for b in filled]), np.array([w[idx == b].mean() for b in filled]))


def _coverage_label(family: str, rows: Sequence[Mapping]) -> str:
    coverage = stat(rows, "test/interval/coverage")
    if coverage.n == 0:
        return f"{family}: coverage n/a"
    spread = f" ± {coverage.se:.2f}" if coverage.n > 1 else ""
    return f"{family}: coverage {coverage.mean:.2f}{spread} (n={coverage.n})"


def plot_intervals(path: Path, families: Sequence[str], finals: Mapping, title: str) -> Path:
    """Interval width against the true time to event: every item, and the mean per true-time bin.

    The legend sits below the axes, outside them: the points spread over the whole panel, so
    no corner inside is free of them; the figure grows by the legend's rows, not the panel."""
    points = {f: _interval_points(finals[f]) for f in families}
    drawn = [f for f in families if points[f][0].size]
    columns = 2
    rows = -(-len(drawn) // columns)
    fig, (ax,) = _new_figure(7.5, 4.6 + (0.45 + 0.22 * rows if drawn else 0.0))
    for f in drawn:
        t, w = points[f]
        c = color(f, families)
        ax.scatter(t, w, s=12, alpha=0.35, color=c, edgecolors="none")
        ax.plot(*_binned_mean(t, w), color=c, lw=1.8, marker=".", label=_coverage_label(f, finals[f]))
    if drawn:
        ax.legend(fontsize=9, title="line: mean width per true-time bin", title_fontsize=8, loc="upper center",
                  bbox_to_anchor=(0.5, -0.13), ncol=columns, frameon=False)
    else:
        no_data(ax)
    ax.set(xlabel="true time to event T (entries)", ylabel="interval width hi - lo (entries)",
           title=rf"Width of $I_{{{COVERAGE_TARGET}}}$ against true time: {title}")
    ax.grid(alpha=0.3)
    return save_png(fig, path)
