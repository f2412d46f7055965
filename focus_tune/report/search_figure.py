"""The picture of the search (search.png and search.pdf) from a :func:`~focus_tune.report.search_trace`.

Top row, one panel per stage: each candidate's validation ECE against its lambda, the chosen
path as stars; bottom: each family's validation ECE over epochs. Paper look (vector PDF,
TrueType fonts); matplotlib's Agg canvas only, no pyplot state.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from ..durable import write_atomic
from ..names import FAMILIES
from .columns import FAMILY_COLORS
from .figures import no_data

SEARCH_DPI = 200
# Paper look: small serif-free type, no top/right spines, TrueType fonts in the PDF.
SEARCH_STYLE = {
    "font.size": 8.5, "axes.titlesize": 9, "axes.labelsize": 8.5, "legend.fontsize": 7.5,
    "xtick.labelsize": 7.5, "ytick.labelsize": 7.5, "axes.spines.top": False, "axes.spines.right": False,
    "lines.linewidth": 1.3, "lines.markersize": 4.5, "pdf.fonttype": 42, "ps.fonttype": 42,
}
CHOSEN_COLOR = FAMILY_COLORS["time-dependent"]


def _stage_reference(search: Mapping, name: str) -> float | None:
    """The chosen score of a stage (the constant and none references)."""
    for stage in search.get("stages", []):
        if stage["stage"] == name:
            best = [r["score"] for r in stage["candidates"] if r["trial_id"] == stage.get("winner")]
            return best[0] if best and best[0] is not None else None
    return None


def _lambda_axis(ax, values: Sequence[float]) -> None:
    """Log lambda axis (symlog when 0 is a candidate), ticks at the grid values."""
    grid = sorted({float(v) for v in values if v is not None})
    positive = [v for v in grid if v > 0]
    if positive and len(positive) == len(grid):
        ax.set_xscale("log")
    elif positive:
        ax.set_xscale("symlog", linthresh=min(positive))
    if grid:
        ax.set_xticks(grid)
        ax.set_xticklabels([f"{v:g}" for v in grid])
        ax.minorticks_off()
        if len(grid) > 1:  # room for the markers at both ends
            lo, hi = (min(positive) / 1.6, max(grid) * 1.6) if positive and len(positive) == len(grid) else (None, None)
            if lo is not None:
                ax.set_xlim(lo, hi)


def _draw_references(ax, constant: float | None, none: float | None, with_constant: bool = True) -> None:
    if with_constant and constant is not None:
        ax.axhline(constant, color=FAMILY_COLORS["constant"], ls="--", lw=1.0, zorder=1)
    if none is not None:
        ax.axhline(none, color=FAMILY_COLORS["none"], ls=":", lw=1.2, zorder=1)


def _draw_failed(ax, xs: Sequence[float]) -> None:
    from matplotlib.transforms import blended_transform_factory

    tr = blended_transform_factory(ax.transData, ax.transAxes)
    for x in xs:
        ax.plot([x], [0.96], marker="x", color="grey", ms=6, mew=1.5, transform=tr, clip_on=False, zorder=5)


def _draw_stopped(ax, rows: Sequence[Mapping]) -> None:
    """Candidates the race stopped: a hollow square at the top, with the epoch it stopped at."""
    from matplotlib.transforms import blended_transform_factory

    tr = blended_transform_factory(ax.transData, ax.transAxes)
    for r in rows:
        ax.plot([r["lambda"]], [0.96], marker="s", mfc="white", mec="0.3", ms=5.5, mew=1.2, transform=tr,
                clip_on=False, zorder=5)
        ax.annotate(f"stopped (epoch {r['stopped']['epoch']})", (r["lambda"], 0.96), xycoords=tr,
                    textcoords="offset points", xytext=(0, -9), ha="center", va="top", fontsize=6, color="0.3")


def _draw_stage(ax, stage: Mapping, color: str) -> None:
    """Candidates of one stage against lambda: a line through them, the chosen one as a star."""
    rows = [r for r in stage["candidates"] if r["lambda"] is not None]
    ok = sorted((r for r in rows if r["status"] == "ok"), key=lambda r: r["lambda"])
    if ok:
        ax.plot([r["lambda"] for r in ok], [r["score"] for r in ok], color="0.35", marker="o", lw=1.0,
                mfc="white", mec="0.2", zorder=3)
    _draw_failed(ax, [r["lambda"] for r in rows if r["status"] == "failed"])
    _draw_stopped(ax, [r for r in rows if r["status"] == "stopped"])
    _draw_chosen(ax, stage, color)


def _draw_noise(ax, stage: Mapping) -> None:
    """Error bars of +-1 SE of each candidate's difference from the chosen one."""
    rows = [r for r in stage["candidates"] if r.get("se") is not None and r["score"] is not None
            and r["lambda"] is not None]
    if rows:
        ax.errorbar([r["lambda"] for r in rows], [r["score"] for r in rows], yerr=[r["se"] for r in rows],
                    fmt="none", ecolor="0.45", elinewidth=0.9, capsize=3, zorder=2)


def _draw_chosen(ax, stage: Mapping, color: str) -> None:
    _draw_noise(ax, stage)
    for r in stage["candidates"]:
        if r["trial_id"] == stage.get("winner") and r["score"] is not None and r["lambda"] is not None:
            ax.plot([r["lambda"]], [r["score"]], marker="*", ms=13, color=color, mec="black", mew=0.6, zorder=6)
            ax.annotate(f"{r['score']:.4f}", (r["lambda"], r["score"]), textcoords="offset points",
                        xytext=(0, 7), ha="center", va="bottom", fontsize=7, color=color, zorder=7)


def _draw_joint(ax, stage: Mapping, k1: int) -> None:
    """Joint candidates: one line per k2 over lambda_all; hollow where the schedule was trained before."""
    from matplotlib import colormaps

    rows = [r for r in stage["candidates"] if r["lambda"] is not None and r["k2"] is not None]
    k2s = sorted({int(r["k2"]) for r in rows})
    cmap = colormaps["viridis"]
    for n, k2 in enumerate(k2s):
        color = cmap(0.1 + 0.75 * n / max(1, len(k2s) - 1))
        mine = sorted((r for r in rows if int(r["k2"]) == k2 and r["status"] == "ok"), key=lambda r: r["lambda"])
        reused = bool(mine) and all(r["trained_as"] != r["trial_id"] for r in mine)
        label = f"$k_2$ = {k2}" + (f" (= stage {k1}, trained once)" if reused and k2 <= k1 else "")
        if mine:
            ax.plot([r["lambda"] for r in mine], [r["score"] for r in mine], color=color, marker="o", lw=1.0,
                    mfc="white" if reused else color, mec=color, ls="--" if reused else "-", label=label, zorder=3)
        _draw_failed(ax, [r["lambda"] for r in rows if int(r["k2"]) == k2 and r["status"] == "failed"])
    _draw_stopped(ax, [r for r in rows if r["status"] == "stopped"])
    _draw_chosen(ax, stage, CHOSEN_COLOR)


def _stage_title(stage: Mapping, k1: int) -> str:
    name = stage["stage"]
    chosen = next((r for r in stage["candidates"] if r["trial_id"] == stage.get("winner")), None)
    if name.startswith("stage"):
        i = name.removeprefix("stage")
        head = f"Stage {i}: $\\lambda_{{{i}}}$"
        pick = f"$\\lambda_{{{i}}}$ = {chosen['lambda']:g}" if chosen else "undecided"
    elif name == "joint":
        head = f"Joint: $\\lambda_{{all}}$ for entries {k1 + 1}..$k_2$"
        if not chosen:
            pick = "undecided"
        elif chosen["k2"] is not None and int(chosen["k2"]) <= k1:  # no joint entries: the stage-k1 schedule
            pick = f"$k_2$ = {chosen['k2']} (stage {k1} as is)"
        else:
            pick = f"$\\lambda_{{all}}$ = {chosen['lambda']:g}, $k_2$ = {chosen['k2']}"
    else:
        head = "Constant: $\\lambda_{const}$"
        pick = f"$\\lambda_{{const}}$ = {chosen['lambda']:g}" if chosen else "undecided"
    return f"{head}\nchosen: {pick}{_decision_note(stage.get('decision'))}"


def _decision_note(decision: Mapping | None) -> str:
    """The decision's margin in SE under the title: how sure the choice was."""
    if not decision or decision.get("difference") is None:
        return ""
    diff, se = decision["difference"], decision.get("se")
    if decision["rule"].startswith("tie"):
        return f"\n(tie: +{-diff:.4f}, {-diff / se:.1f} SE)"
    return f"\n(by {diff:.4f}" + (f", {diff / se:.1f} SE)" if se else ")")


def _draw_histories(ax, search: Mapping) -> None:
    evaluated = sorted({e for curves in search.get("histories", {}).values() for c in curves for e in c["epochs"]})
    if len(evaluated) == 1:  # validated at the last epoch only (the quick profile): no curve to draw
        _draw_last_validation(ax, search, evaluated[0])
        return
    drawn = False
    for family in FAMILIES:
        seeds = [c for c in search.get("histories", {}).get(family, []) if c["epochs"]]
        if not seeds:
            continue
        color = FAMILY_COLORS[family]
        for c in seeds:
            ax.plot(c["epochs"], c["val_ece"], color=color, lw=0.8, alpha=0.35, marker=".", ms=3)
        epochs = sorted({e for c in seeds for e in c["epochs"]})
        by_epoch = [[v for c in seeds for e2, v in zip(c["epochs"], c["val_ece"]) if e2 == e] for e in epochs]
        mean = [float(np.mean(v)) for v in by_epoch]
        schedule = search.get("chosen", {}).get(family, "")
        ax.plot(epochs, mean, color=color, lw=1.8, marker="o", ms=3.5,
                label=f"{family} ({schedule}): mean of {len(seeds)} seed{'s' * (len(seeds) > 1)}")
        drawn = True
    if drawn:
        ax.legend(loc="best", frameon=False)
        if len(evaluated) <= 12:  # few evaluations (eval_every > 1): tick exactly those epochs
            ax.set_xticks(evaluated)
        else:
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    else:
        no_data(ax)
    ax.set(xlabel="epoch", ylabel="validation ECE",
           title="Validation ECE over epochs: the chosen schedule of each family (thin: one seed)")
    ax.grid(alpha=0.25, lw=0.5)


def _draw_last_validation(ax, search: Mapping, epoch: int) -> None:
    """Each family's validation ECE at the one evaluated epoch: one dot per seed, a bar at the mean."""
    families = [f for f in FAMILIES if any(c["epochs"] for c in search.get("histories", {}).get(f, []))]
    for x, family in enumerate(families):
        values = [v for c in search["histories"][family] for v in c["val_ece"]]
        color = FAMILY_COLORS[family]
        ax.scatter([x] * len(values), values, color=color, s=18, alpha=0.6, zorder=3)
        ax.hlines(float(np.mean(values)), x - 0.25, x + 0.25, color=color, lw=2.2, zorder=4)
    ax.set_xticks(range(len(families)),
                  [f"{f}\n({search.get('chosen', {}).get(f, '')})" for f in families])
    ax.set_xlim(-0.6, len(families) - 0.4)
    ax.set(ylabel="validation ECE",
           title=f"Validation ECE at epoch {epoch}, the only validation of this profile: "
                 "the chosen schedule of each family (dots: seeds, bar: mean)")
    ax.grid(alpha=0.25, lw=0.5, axis="y")


def plot_search(search: Mapping, path: Path, title: str) -> list[Path]:
    """The search in one figure, as ``path`` (PNG) and the same name .pdf (vector, for a paper).

    Top row, one panel per stage (shared y axis): each candidate's validation ECE against
    its lambda, the chosen one as a star; the joint stage has one line per k2. Dashed blue:
    the chosen constant; dotted black: the unregularized model. Bottom: the validation ECE
    over epochs of each family's final models. Returns the written paths.
    """
    import matplotlib

    path = Path(path)
    k1 = int(search.get("k1", 0))
    stages = [s for s in search.get("stages", []) if s["stage"] not in ("none",)]
    constant, none = _stage_reference(search, "constant"), _stage_reference(search, "none")
    with matplotlib.rc_context(SEARCH_STYLE):
        ncols = max(1, len(stages))
        fig = Figure(figsize=(max(7.0, 2.45 * ncols), 5.6), layout="constrained")
        FigureCanvasAgg(fig)
        grid = fig.add_gridspec(2, ncols, height_ratios=(1.15, 1.0))
        top = []
        for n, stage in enumerate(stages):
            ax = fig.add_subplot(grid[0, n], sharey=top[0] if top else None)
            top.append(ax)
            if stage["stage"] == "joint":
                _draw_joint(ax, stage, k1)
                xlabel = r"$\lambda_{all}$"
            else:
                color = FAMILY_COLORS["constant"] if stage["stage"] == "constant" else CHOSEN_COLOR
                _draw_stage(ax, stage, color)
                i = stage["stage"].removeprefix("stage")
                xlabel = r"$\lambda_{const}$" if stage["stage"] == "constant" else f"$\\lambda_{{{i}}}$"
            _draw_references(ax, constant, none, with_constant=stage["stage"] != "constant")
            if ax.get_legend_handles_labels()[0]:  # the joint stage's k2 lines, placed clear of the references
                ax.legend(loc="best", handlelength=1.6, framealpha=0.85, edgecolor="none")
            _lambda_axis(ax, [r["lambda"] for r in stage["candidates"]])
            ax.set_xlabel(xlabel)
            ax.set_title(_stage_title(stage, k1))
            ax.margins(y=0.12)
            ax.grid(alpha=0.25, lw=0.5)
            if n:
                ax.tick_params(labelleft=False)
            else:
                ax.set_ylabel("validation ECE")
        if not stages:
            no_data(fig.add_subplot(grid[0, :]))
        _draw_histories(fig.add_subplot(grid[1, :]), search)
        from matplotlib.lines import Line2D

        handles = [
            Line2D([], [], color="0.35", marker="o", mfc="white", mec="0.2", label="candidate"),
            Line2D([], [], ls="", marker="*", ms=11, color=CHOSEN_COLOR, mec="black", mew=0.6, label="chosen"),
            Line2D([], [], ls="", marker="x", color="grey", mew=1.5, label="failed"),
            *([Line2D([], [], ls="", marker="s", mfc="white", mec="0.3", mew=1.2, label="stopped by racing")]
              if any(r["status"] == "stopped" for st in stages for r in st["candidates"]) else []),
            Line2D([], [], color=FAMILY_COLORS["constant"], ls="--", label=_ref_label("chosen constant", constant)),
            Line2D([], [], color=FAMILY_COLORS["none"], ls=":", lw=1.2, label=_ref_label("unregularized", none)),
        ]
        fig.legend(handles=handles, loc="outside lower center", ncol=len(handles), frameon=False)
        chosen = search.get("chosen", {}).get("time-dependent")
        fig.suptitle(f"Search: {title}" + (f"; chosen time-dependent schedule {chosen}" if chosen else ""),
                     fontsize=10)
        out = []
        for target, fmt in ((path, "png"), (path.with_suffix(".pdf"), "pdf")):
            buf = io.BytesIO()
            fig.savefig(buf, format=fmt, dpi=SEARCH_DPI)
            write_atomic(target, buf.getvalue())
            out.append(target)
    return out


def _ref_label(name: str, value: float | None) -> str:
    return f"{name} ({value:.4f})" if value is not None else f"{name} (n/a)"
