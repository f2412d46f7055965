"""replication.png: the replication at a glance.

One panel per primary endpoint: the paired difference to ``none`` of each family, one dot
per replicated search (the mean over its final seeds of the per-seed differences) and the
pooled mean with its 95 % t interval over the searches; a dotted line at zero. A last panel
counts how often each schedule was chosen.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from ..report.columns import COMPARED_COLUMNS, COVERAGE_TARGET, ROWS, color
from ..report.figures import save_png
from .analysis import PRIMARY

SHOWN = (("constant", "none"), ("time-dependent", "none"))


def _label(key: str) -> str:
    return next(c.label for c in COMPARED_COLUMNS if c.key == key)


def _direction(key: str) -> str:
    column = next(c for c in COMPARED_COLUMNS if c.key == key)
    return {"min": "lower is better", "max": "higher is better", "zero": "closer to 0 is better",
            "target": f"target {COVERAGE_TARGET:g}"}.get(column.better, "")


def plot_replication(path: Path, summary: dict, title: str) -> Path:
    """Write the figure to ``path`` (PNG) and return it."""
    keys = [k for k in PRIMARY if any(f"{a} - {b}/{k}" in summary["differences"] for a, b in SHOWN)]
    fig = Figure(figsize=(2.6 * len(keys) + 0.8, 6.2))
    FigureCanvasAgg(fig)
    grid = fig.add_gridspec(2, len(keys), height_ratios=(1.6, 1.0))
    axes = [fig.add_subplot(grid[0, i]) for i in range(len(keys))]
    rng = np.random.default_rng(0)  # the dots' horizontal jitter only
    for ax, key in zip(axes, keys):
        for i, (a, b) in enumerate(SHOWN):
            d = summary["differences"].get(f"{a} - {b}/{key}")
            if d is None:
                continue
            c = color(a, ROWS)
            x = np.asarray(d["per_run"], dtype=float)
            ax.scatter(i + rng.uniform(-0.12, 0.12, x.size), x, s=16, color=c, alpha=0.7, zorder=3)
            if math.isfinite(d["low"]):
                ax.errorbar(i + 0.3, d["mean"], yerr=[[d["mean"] - d["low"]], [d["high"] - d["mean"]]],
                            fmt="D", color=c, capsize=4, markersize=5, zorder=4)
            elif math.isfinite(d["mean"]):
                ax.plot(i + 0.3, d["mean"], "D", color=c, markersize=5, zorder=4)
        ax.axhline(0.0, color="grey", linestyle=":", linewidth=1)
        ax.set_xticks(range(len(SHOWN)), [a for a, _ in SHOWN], fontsize=8)
        ax.set_xlim(-0.5, len(SHOWN) - 0.3)
        base = summary["means"].get(key, {}).get("none", {}).get("mean")
        ax.set_title(_label(key) + (f"\n(none: {base:.3f}; {_direction(key)})" if base is not None else ""), fontsize=9)
        ax.tick_params(axis="y", labelsize=8)
    axes[0].set_ylabel("difference to none\n(dots: searches; diamond: mean, 95 % CI)", fontsize=8)

    ax = fig.add_subplot(grid[1, :])
    rows = [(family, sched, n) for family in ("time-dependent", "constant")
            for sched, n in summary["schedules"].get(family, [])]
    y = np.arange(len(rows))[::-1]
    ax.barh(y, [n for _, _, n in rows], color=[color(f, ROWS) for f, _, _ in rows], alpha=0.8)
    ax.set_yticks(y, [sched for _, sched, _ in rows], fontsize=7)
    ax.set_xlim(0, summary["runs"])
    ax.set_xticks(range(summary["runs"] + 1))
    ax.set_xlabel("searches that chose it", fontsize=8)
    ax.set_title("schedules chosen", fontsize=10)
    ax.tick_params(axis="x", labelsize=8)
    fig.suptitle(title, fontsize=11)
    return save_png(fig, path)
