"""Final report of a search: the paper's three tables, a CSV and three figures.

:func:`write_report` takes the test results of the final models (one flat result per seed and
regularization family, as the trainable reports them) and writes into a run folder:

- ``results.md``: the chosen schedules and the paper's tables (marginal, conditional on the
  first entry, time-to-event interval), each cell the mean ± standard error over seeds, with
  the baselines (temperature-scaled, image-blind, oracle; see :mod:`focus_tune.baselines`) as
  rows beside the three families;
- ``results.csv``: one row per (family, seed) with every numeric metric, then a ``mean`` and
  an ``se`` row per family;
- ``entry_ece.png``, ``reliability.png``, ``intervals.png``: entry-level ECE (the oracle's
  curve is what a perfect simulator scores with the same M), reliability diagrams at the
  stored entries, and interval width against the true time;
- with ``search`` (from :func:`search_trace`): ``search.png`` and ``search.pdf``, the search
  itself (every stage's candidates' validation ECE against lambda and k2, the chosen path,
  the constant and unregularized references; each family's validation ECE over epochs),
  ``search.json`` with the numbers behind it, and a section with them in results.md.

Statistics are NaN-aware: a missing key or a NaN counts as no value, a cell with no value
reads ``n/a``, and a cell whose value count differs from the row's seed count says so. The
module is pure (numpy, matplotlib's Agg canvas, no pyplot state), so the driver can call it
after Ray has shut down and log :attr:`Report.summary` wherever it likes.
"""

from __future__ import annotations

import csv
import io
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from .atomic import write_atomic

BASELINES = ("temperature-scaled", "image-blind", "oracle")
FAMILIES = ("none", "constant", "time-dependent", *BASELINES)
REFERENCES = ("image-blind", "oracle")  # rows to compare against, not ranked with the models
# What a baseline row is, in the chosen-schedules table.
BASELINE_SCHEDULES = {
    "temperature-scaled": "the none finals, one temperature per entry fitted on validation",
    "image-blind": "training frequencies, no image",
    "oracle": "M samples from the true process",
}
FAMILY_COLORS = {"none": "black", "constant": "tab:blue", "time-dependent": "tab:red",
                 "temperature-scaled": "tab:orange", "image-blind": "tab:gray", "oracle": "tab:green"}
OTHER_COLORS = ("tab:purple", "tab:brown", "tab:pink", "tab:olive")
COVERAGE_TARGET = 0.9
DPI = 110
PER_ENTRY_KEY = "test_per_entry"
NA = "n/a"
BASELINE_NOTE = (
    "Baselines: *temperature-scaled* is the `none` final of each seed with one temperature per entry "
    "fitted on the validation split (teacher-forced NLL), no retraining; *image-blind* gives every "
    "item the training sequences' per-entry class frequencies and the pooled training time-to-event "
    "distribution (deterministic: one row); *oracle* samples M sequences per item from the true "
    "process (where the data has one) through the same Monte Carlo estimators, so its ECE is what a "
    "perfect simulator scores with this M and these test items. Image-blind and oracle are not ranked. "
    "*leak*: the fraction of sampled sequences that leave the event class after reaching it; "
    "*p(stay)*: the model's mean teacher-forced p(event -> event) on the test sequences."
)


@dataclass(frozen=True)
class Column:
    """One table column: its label, the flat result key, and how the best mean is chosen.

    ``better`` is ``"min"``, ``"max"``, ``"target"`` (closest to :data:`COVERAGE_TARGET`) or
    ``None`` (not ranked). ``spread`` False shows the mean alone (e.g. item counts).
    """

    label: str
    key: str
    better: str | None = "min"
    decimals: int = 4
    spread: bool = True
    optional: bool = False


MARGINAL = (
    Column("ECE", "test/marginal/ece"),
    Column("AUC", "test/marginal/auc", better="max"),
    Column("CE", "test/marginal/ce"),
    Column("BS", "test/marginal/brier"),
    Column("RMSE to exact", "test/marginal/rmse", optional=True),
    Column("leak", "test/marginal/leak", better=None, optional=True),
    Column("p(stay)", "test/marginal/p_stay", better=None, optional=True),
)
CONDITIONAL = (
    Column("ECE", "test/conditional/ece"),
    Column("AUC", "test/conditional/auc", better="max"),
    Column("CE", "test/conditional/ce"),
    Column("BS", "test/conditional/brier"),
    Column("items", "test/conditional/items", better=None, decimals=0, spread=False),
)
INTERVAL = (
    Column("coverage", "test/interval/coverage", better="target"),
    Column("relative width", "test/interval/relative_width"),
    Column("relative MAE", "test/interval/relative_mae"),
)
SHORT_LABELS = {"RMSE to exact": "RMSE", "relative width": "rel.width",
                "relative MAE": "rel.MAE"}


@dataclass(frozen=True)
class Stat:
    """Mean, standard error and the number of finite values behind them."""

    mean: float
    se: float
    n: int


@dataclass
class Report:
    """What :func:`write_report` produced.

    ``markdown`` is the text of results.md, ``table`` a plain-text table of the marginal and
    interval means ± SE for the end of a CLI run, ``files`` the written paths, and ``summary``
    the per-family means of every numeric ``test/...`` metric, keyed ``<family>/<metric>``.
    """

    markdown: str
    table: str
    files: list[Path] = field(default_factory=list)
    summary: dict[str, float] = field(default_factory=dict)


# ----------------------------------------------------------------------------- statistics


def _to_float(value: Any) -> float:
    """A float, or NaN for None, booleans and anything that is not a number."""
    if value is None or isinstance(value, bool):
        return math.nan
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def _finite(values: Iterable[Any]) -> np.ndarray:
    x = np.array([_to_float(v) for v in values], dtype=np.float64)
    return x[np.isfinite(x)]


def aggregate(values: Iterable[Any]) -> tuple[float, float]:
    """Mean and standard error of the finite values (NaN, None and non-numbers are ignored).

    SE = sample standard deviation (ddof=1) / sqrt(n). With no finite value both are NaN;
    with one, the mean is that value and the SE is NaN.
    """
    x = _finite(values)
    if x.size == 0:
        return math.nan, math.nan
    if x.size == 1:
        return float(x[0]), math.nan
    return float(x.mean()), float(x.std(ddof=1) / math.sqrt(x.size))


def _stat(rows: Sequence[Mapping[str, Any]], key: str) -> Stat:
    values = [row.get(key) for row in rows]
    mean, se = aggregate(values)
    return Stat(mean, se, int(_finite(values).size))


# ----------------------------------------------------------------------------- families


def _ordered_families(finals: Mapping[str, Sequence]) -> list[str]:
    """The paper's families in the paper's order, then any other family in the given order."""
    return [f for f in FAMILIES if f in finals] + [f for f in finals if f not in FAMILIES]


def _color(family: str, families: Sequence[str]) -> str:
    if family in FAMILY_COLORS:
        return FAMILY_COLORS[family]
    others = [f for f in families if f not in FAMILY_COLORS]
    return OTHER_COLORS[others.index(family) % len(OTHER_COLORS)]


def _class_name(class_names: Sequence[str], index: int) -> str:
    return str(class_names[index]) if 0 <= index < len(class_names) else f"class {index}"


# ----------------------------------------------------------------------------- tables


def _best(column: Column, means: Mapping[str, float]) -> set[str]:
    """Models whose mean is best in the column (none when fewer than two are comparable).

    The reference rows (:data:`REFERENCES`) are never ranked: the oracle would win nearly
    every column and bold nothing the search chose."""
    finite = {f: m for f, m in means.items() if math.isfinite(m) and f not in REFERENCES}
    if column.better is None or len(finite) < 2:
        return set()
    score = {
        "min": lambda m: m,
        "max": lambda m: -m,
        "target": lambda m: abs(m - COVERAGE_TARGET),
    }[column.better]
    top = min(score(m) for m in finite.values())
    return {f for f, m in finite.items() if math.isclose(score(m), top, rel_tol=1e-12, abs_tol=1e-15)}


def _cell(stat: Stat, seeds: int, column: Column, bold: bool = False, sep: str = " ± ") -> str:
    """'mean ± se' (mean in bold if best), 'n/a' without values, '(n=k)' when k differs from seeds."""
    if stat.n == 0:
        return NA
    text = f"{stat.mean:.{column.decimals}f}"
    if bold:
        text = f"**{text}**"
    if column.spread and stat.n >= 2:
        text += f"{sep}{stat.se:.{column.decimals}f}"
    if stat.n != seeds:
        text += f" (n={stat.n})"
    return text


def _columns(columns: Sequence[Column], families: Sequence[str], finals: Mapping) -> list[Column]:
    """The columns to show: optional ones only when some family has a value for them."""
    def present(col: Column) -> bool:
        return any(_stat(finals[f], col.key).n for f in families)
    return [c for c in columns if not c.optional or present(c)]


def _markdown_table(columns: Sequence[Column], families: Sequence[str], finals: Mapping) -> list[str]:
    stats = {f: {c.key: _stat(finals[f], c.key) for c in columns} for f in families}
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


def _plain_table(title: str, columns: Sequence[Column], families: Sequence[str], finals: Mapping) -> list[str]:
    header = ["family", "seeds"] + [SHORT_LABELS.get(c.label, c.label) for c in columns]
    rows = [
        [f, str(len(finals[f]))] + [_cell(_stat(finals[f], c.key), len(finals[f]), c, sep="±") for c in columns]
        for f in families
    ]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    fmt = lambda r: "  ".join(cell.ljust(w) for cell, w in zip(r, widths)).rstrip()  # noqa: E731
    body = [fmt(r) for r in rows] or ["(no results)"]
    return [title, fmt(header), "  ".join("-" * w for w in widths), *body]


def _all_na(columns: Sequence[Column], families: Sequence[str], finals: Mapping) -> bool:
    return all(_stat(finals[f], c.key).n == 0 for f in families for c in columns)


# ----------------------------------------------------------------------------- markdown


def _header_lines(game: str, profile: str) -> list[str]:
    return [
        f"# foCus regularization search: {game} ({profile} profile)",
        "",
        "Test set, final models (last epoch) retrained once per seed. Each cell: mean ± standard "
        "error over seeds (SE = sample standard deviation, ddof=1, / sqrt(n)); a single seed shows "
        "the mean alone, `n/a` means no value, and `(n=k)` marks a cell with values from only k seeds. "
        f"Best mean per column among the models in **bold**: lowest, except AUC (highest) and coverage "
        f"(closest to {COVERAGE_TARGET}); the image-blind and oracle rows are references, not ranked.",
        "",
    ]


def _schedule_lines(families: Sequence[str], finals: Mapping, schedules: Mapping[str, str]) -> list[str]:
    lines = ["## Chosen schedules", "", "| family | schedule | seeds |", "|---|---|---:|"]
    for f in families:
        schedule = str(schedules.get(f, BASELINE_SCHEDULES.get(f, NA))).replace("|", "\\|")
        lines.append(f"| {f} | `{schedule}` | n={len(finals[f])} |")
    return lines + [""]


def _skipped_lines(skipped: Sequence[str]) -> list[str]:
    if not skipped:
        return []
    return [f"Note: family `{f}` has no finished seed and is left out of the tables and figures."
            for f in skipped] + [""]


def _section(title: str, columns: Sequence[Column], families: Sequence[str], finals: Mapping,
             empty_note: str) -> list[str]:
    lines = [f"## {title}", ""]
    if not families:
        return lines + ["No results.", ""]
    lines += _markdown_table(columns, families, finals) + [""]
    if _all_na(columns, families, finals):
        lines += [empty_note, ""]
    return lines


def _figure_lines() -> list[str]:
    return [
        "## Figures",
        "",
        "Entry-level marginal ECE per family, mean over seeds (band: ± SE; dashed: the references).",
        "",
        "![entry-level ECE](entry_ece.png)",
        "",
        "Reliability diagrams at the stored entries (first seed of each family; diagonal: perfect calibration).",
        "",
        "![reliability diagrams](reliability.png)",
        "",
        "Interval width hi - lo against the true time to event (dots: items of all seeds; line: mean width "
        "per true-time bin; coverage in the legend).",
        "",
        "![interval width against true time](intervals.png)",
        "",
    ]


def _markdown(game: str, profile: str, families: Sequence[str], skipped: Sequence[str], finals: Mapping,
              schedules: Mapping[str, str], condition: str, search: Mapping | None = None) -> str:
    marginal = _columns(MARGINAL, families, finals)
    lines = _header_lines(game, profile) + _schedule_lines(families, finals, schedules) + _skipped_lines(skipped)
    lines += _section("Marginal", marginal, families, finals, "No marginal results.")
    if any(f in BASELINES for f in families):
        lines += [BASELINE_NOTE, ""]
    lines += _section(f"Conditional on entry 1 = {condition}", CONDITIONAL, families, finals,
                      "No conditional results: the condition was not evaluated or no test item meets it.")
    lines += _section(f"Time to event, I_{COVERAGE_TARGET}", INTERVAL, families, finals, "No interval results.")
    lines += _difference_lines(families, finals)
    if search is not None:
        lines += _search_lines(search)
    return "\n".join(lines + _figure_lines())


def _plain(game: str, profile: str, families: Sequence[str], finals: Mapping) -> str:
    lines = [f"foCus results: {game} ({profile}), test set, mean±SE over seeds", ""]
    lines += _plain_table("Marginal", _columns(MARGINAL, families, finals), families, finals) + [""]
    lines += _plain_table(f"Time to event, I_{COVERAGE_TARGET}", INTERVAL, families, finals)
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------- differences between families

COMPARED = ("constant", "time-dependent", "temperature-scaled")  # each against "none"
COMPARED_COLUMNS = (MARGINAL[0], MARGINAL[2], MARGINAL[1], MARGINAL[4], INTERVAL[0], INTERVAL[1])


def welch(a: Iterable[Any], b: Iterable[Any]) -> tuple[float, float]:
    """(mean(a) - mean(b), two-sided Welch t-test p-value) over the finite values.

    The p-value is NaN with fewer than two values on either side or no spread at all.
    """
    from scipy import stats

    x, y = _finite(a), _finite(b)
    if x.size == 0 or y.size == 0:
        return math.nan, math.nan
    diff = float(x.mean() - y.mean())
    if x.size < 2 or y.size < 2 or (x.std() == 0 and y.std() == 0):
        return diff, math.nan
    return diff, float(stats.ttest_ind(x, y, equal_var=False).pvalue)


def differences(families: Sequence[str], finals: Mapping) -> dict[str, tuple[float, float]]:
    """{"<family>/<key>": (mean difference to none, Welch p)} for the compared families."""
    if "none" not in families:
        return {}
    out = {}
    for f in (f for f in COMPARED if f in families):
        for col in COMPARED_COLUMNS:
            diff, p = welch((r.get(col.key) for r in finals[f]), (r.get(col.key) for r in finals["none"]))
            if math.isfinite(diff):
                out[f"{f}/{col.key}"] = (diff, p)
    return out


def _difference_lines(families: Sequence[str], finals: Mapping) -> list[str]:
    diffs = differences(families, finals)
    compared = [f for f in COMPARED if f in families and any(k.startswith(f + "/") for k in diffs)]
    if not compared:
        return []
    cols = [c for c in COMPARED_COLUMNS if any(f"{f}/{c.key}" in diffs for f in compared)]
    lines = ["## Differences from `none`", "",
             "Mean difference (family - none) over seeds and the two-sided Welch t-test p-value "
             "(with 3 seeds a test has little power: a large p says the seeds do not separate the "
             "families, not that they are equal).", "",
             "| family | " + " | ".join(c.label for c in cols) + " |",
             "|---|" + "---:|" * len(cols)]
    for f in compared:
        cells = []
        for c in cols:
            diff, p = diffs.get(f"{f}/{c.key}", (math.nan, math.nan))
            cells.append(NA if not math.isfinite(diff) else
                         f"{diff:+.{c.decimals}f} (p = {p:.3f})" if math.isfinite(p) else f"{diff:+.{c.decimals}f} (p n/a)")
        lines.append(f"| {f} | " + " | ".join(cells) + " |")
    return lines + [""]


# ----------------------------------------------------------------------------- csv and summary


def _metric_keys(rows: Iterable[Mapping[str, Any]]) -> list[str]:
    """Numeric keys of the flat results: the table metrics first, then the rest sorted."""
    found: set[str] = set()
    for row in rows:
        found |= {k for k, v in row.items() if k not in ("seed", PER_ENTRY_KEY)
                  and isinstance(v, (int, float, np.number)) and not isinstance(v, bool)}
    first = [c.key for c in (*MARGINAL, *CONDITIONAL, *INTERVAL) if c.key in found]
    return first + sorted(found - set(first))


def _csv_value(value: Any) -> str:
    x = _to_float(value)
    if not math.isfinite(x):
        return ""
    return str(int(value)) if isinstance(value, (int, np.integer)) else repr(x)


def _write_csv(path: Path, families: Sequence[str], finals: Mapping) -> None:
    keys = _metric_keys(row for f in families for row in finals[f])
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


def _summary(families: Sequence[str], finals: Mapping) -> dict[str, float]:
    """Per-family means of every numeric ``test/...`` metric (finite ones only)."""
    out: dict[str, float] = {}
    for f in families:
        for key in _metric_keys(finals[f]):
            mean, _ = aggregate(row.get(key) for row in finals[f])
            if key.startswith("test/") and math.isfinite(mean):
                out[f"{f}/{key}"] = mean
    for name, (_, p) in differences(families, finals).items():
        if math.isfinite(p):
            out[f"{name}/welch_p_vs_none"] = p
    return out


# ----------------------------------------------------------------------------- figures


def _per_entry(row: Mapping[str, Any]) -> dict:
    """The decoded ``test_per_entry`` of a result ({} when absent or unreadable)."""
    raw = row.get(PER_ENTRY_KEY)
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except ValueError:
            return {}
    return raw if isinstance(raw, dict) else {}


def _lookup(tree: Mapping, *path: str) -> Any:
    for name in path:
        if not isinstance(tree, Mapping) or name not in tree:
            return None
        tree = tree[name]
    return tree


def _array(values: Any) -> np.ndarray:
    """A float array from a JSON list (null -> NaN); empty for anything else."""
    if not isinstance(values, (list, tuple)):
        return np.empty(0)
    return np.array([_to_float(v) for v in values], dtype=np.float64)


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


def _no_data(ax) -> None:
    ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes, fontsize=12, color="grey")


def _save(fig: Figure, path: Path) -> Path:
    fig.tight_layout()
    png = io.BytesIO()
    fig.savefig(png, dpi=DPI, format="png")
    write_atomic(path, png.getvalue())
    return path


def _plot_entry_ece(path: Path, families: Sequence[str], finals: Mapping, title: str) -> Path:
    fig, (ax,) = _new_figure(7.5, 4.3)
    drawn = False
    for f in families:
        entries = [_per_entry(row) for row in finals[f]]
        curves = [a for a in (_array(_lookup(e, "marginal", "ece")) for e in entries) if a.size]
        if not curves:
            continue
        mean, se = _column_stats(curves)
        x = np.arange(1, mean.size + 1)
        color = _color(f, families)
        ls = "--" if f in REFERENCES else "-"
        ax.plot(x, mean, color=color, lw=1.6, ls=ls, label=f"{f} ({len(curves)} seed{'s' * (len(curves) > 1)})")
        if len(curves) > 1:
            ax.fill_between(x, mean - se, mean + se, color=color, alpha=0.15, lw=0)
        drawn = True
    if not drawn:
        _no_data(ax)
    else:
        ax.legend(fontsize=9)
    ax.set(xlabel="entry i", ylabel="marginal ECE at entry i", title=f"Entry-level ECE: {title}")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.grid(alpha=0.3)
    return _save(fig, path)


def _first_reliability(rows: Sequence[Mapping]) -> tuple[Any, dict]:
    """(seed, reliability dict) of the first result that has reliability curves."""
    for row in rows:
        curves = _lookup(_per_entry(row), "reliability")
        if isinstance(curves, Mapping) and curves:
            return row.get("seed"), dict(curves)
    return None, {}


def _entry_order(name: str) -> tuple[int, str]:
    try:
        return int(name), name
    except ValueError:
        return 10**9, name


def _plot_reliability(path: Path, families: Sequence[str], finals: Mapping, title: str) -> Path:
    firsts = {f: _first_reliability(finals[f]) for f in families}
    entries = sorted({e for _, curves in firsts.values() for e in curves}, key=_entry_order) or ["-"]
    fig, axes = _new_figure(3.4 * len(entries) + 0.6, 3.8, ncols=len(entries))
    for entry, ax in zip(entries, axes):
        ax.plot([0, 1], [0, 1], ls=":", color="grey", lw=1.2, label="perfect calibration")
        for f in families:
            seed, curves = firsts[f]
            conf = _array(_lookup(curves, entry, "confidence"))
            acc = _array(_lookup(curves, entry, "accuracy"))
            if conf.size and conf.size == acc.size:
                ax.plot(conf, acc, marker="o", ms=4, lw=1.4, color=_color(f, families), label=f"{f} (seed {seed})")
        ax.set(xlim=(0, 1), ylim=(0, 1), xlabel="confidence", ylabel="accuracy", title=f"entry {entry}")
        ax.set_aspect("equal")
        ax.grid(alpha=0.3)
    if entries == ["-"]:
        _no_data(axes[0])
    axes[0].legend(fontsize=8, loc="upper left")
    fig.suptitle(f"Reliability: {title}", fontsize=11)
    return _save(fig, path)


def _interval_points(rows: Sequence[Mapping]) -> tuple[np.ndarray, np.ndarray]:
    """(true time, width hi - lo) pooled over the seeds, finite points only."""
    true, width = [], []
    for row in rows:
        iv = _lookup(_per_entry(row), "interval") or {}
        t, lo, hi = (_array(_lookup(iv, k)) for k in ("true", "lo", "hi"))
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
    stat = _stat(rows, "test/interval/coverage")
    if stat.n == 0:
        return f"{family}: coverage n/a"
    spread = f" ± {stat.se:.2f}" if stat.n > 1 else ""
    return f"{family}: coverage {stat.mean:.2f}{spread} (n={stat.n})"


def _plot_intervals(path: Path, families: Sequence[str], finals: Mapping, title: str) -> Path:
    fig, (ax,) = _new_figure(7.5, 4.6)
    drawn = False
    for f in families:
        t, w = _interval_points(finals[f])
        if not t.size:
            continue
        color = _color(f, families)
        ax.scatter(t, w, s=12, alpha=0.35, color=color, edgecolors="none")
        ax.plot(*_binned_mean(t, w), color=color, lw=1.8, marker=".", label=_coverage_label(f, finals[f]))
        drawn = True
    if drawn:
        ax.legend(fontsize=9, title="line: mean width per true-time bin", title_fontsize=8)
    else:
        _no_data(ax)
    ax.set(xlabel="true time to event T (entries)", ylabel="interval width hi - lo (entries)",
           title=rf"Width of $I_{{{COVERAGE_TARGET}}}$ against true time: {title}")
    ax.grid(alpha=0.3)
    return _save(fig, path)


# ----------------------------------------------------------------------------- the search itself

SEARCH_JSON = "search.json"
SEARCH_DPI = 200
# Paper look: small serif-free type, no top/right spines, TrueType fonts in the PDF.
SEARCH_STYLE = {
    "font.size": 8.5, "axes.titlesize": 9, "axes.labelsize": 8.5, "legend.fontsize": 7.5,
    "xtick.labelsize": 7.5, "ytick.labelsize": 7.5, "axes.spines.top": False, "axes.spines.right": False,
    "lines.linewidth": 1.3, "lines.markersize": 4.5, "pdf.fonttype": 42, "ps.fonttype": 42,
}
CHOSEN_COLOR = FAMILY_COLORS["time-dependent"]
SEARCH_FAMILIES = ("none", "constant", "time-dependent")
FAMILY_STAGE = {"none": "none", "constant": "constant", "time-dependent": "joint"}  # as in plan.py


def _stage_x(stage: str, params: Mapping[str, Any]) -> dict[str, Any]:
    """The candidate's coordinates in its stage's panel: lambda (and k2 for the joint stage)."""
    if stage.startswith("stage"):
        return {"lambda": params.get(f"lambda_{stage.removeprefix('stage')}"), "k2": None}
    if stage == "joint":
        return {"lambda": params.get("lambda_all"), "k2": params.get("k2")}
    if stage == "constant":
        return {"lambda": params.get("lambda_const"), "k2": None}
    return {"lambda": None, "k2": None}


def search_trace(plan, results: Mapping[str, Any], histories: Mapping[str, Sequence] | None = None) -> dict:
    """What the search did, as plain JSON values: every stage's candidates with their
    validation ECE (the selection score) and the chosen one, and each family's validation
    ECE over epochs for the seeds of its final models.

    ``plan`` is the search's :class:`focus_tune.plan.SearchPlan`, ``results`` its trial id ->
    score (None = failed), ``histories`` trial id -> [(epoch, val ECE), ...] (the MLflow
    child runs' ``val/ece``; see ``Tracker.metric_histories``). A candidate that the plan
    deduplicated (its schedule was trained by an earlier trial, e.g. k2 <= k1) carries the
    id of that trial in ``trained_as`` and its score.
    """
    stages = []
    for name, (candidates, winner) in plan.candidates(results).items():
        rows = [{"trial_id": c.spec.trial_id, "trained_as": c.trained_as, "schedule": str(c.spec.schedule),
                 **_stage_x(name, c.spec.params), "score": c.score, "status": c.status} for c in candidates]
        stages.append({"stage": name, "winner": winner, "candidates": rows})
    specs = {t.trial_id: t for t in plan.all_trials(results)}
    curves: dict[str, list[dict]] = {}
    for family, by_seed in plan.finals(results).items():
        for seed, tid in sorted(by_seed.items()):
            spec = specs.get(tid)
            trained = (spec.source_trial if spec is not None else None) or tid  # a reused search trial
            points = [(int(e), float(v)) for e, v in (histories or {}).get(trained, ()) if math.isfinite(_to_float(v))]
            curves.setdefault(family, []).append({"seed": int(seed), "trial_id": trained,
                                                  "epochs": [e for e, _ in points],
                                                  "val_ece": [v for _, v in points]})
    winners = plan.winners(results)
    chosen = {family: str(winners[FAMILY_STAGE[family]].schedule)
              for family in SEARCH_FAMILIES if FAMILY_STAGE[family] in winners}
    return {"k1": plan.grid.k1, "seed": plan.seed, "length": plan.length, "score": "validation marginal ECE",
            "chosen": chosen, "stages": stages, "histories": curves}


def _search_lines(search: Mapping) -> list[str]:
    """The results.md section: the figure and every candidate's validation ECE."""
    lines = ["## The search", "",
             "Every candidate of every stage against its lambda (and k2), scored by the validation "
             "marginal ECE of the search seed; stars: the chosen candidates (the path of the "
             "time-dependent schedule, and the constant family's); horizontal lines: the chosen "
             "constant and the unregularized model. Bottom: the validation ECE over epochs of the "
             "models behind each family's final rows, one thin line per seed.", "",
             "![the search](search.png)", "",
             "| stage | candidate | lambda | k2 | validation ECE | note |", "|---|---|---:|---:|---:|---|"]
    for stage in search.get("stages", []):
        for row in stage["candidates"]:
            notes = []
            if row["trial_id"] == stage.get("winner"):
                notes.append("**chosen**")
            if row["trained_as"] != row["trial_id"]:
                notes.append(f"same schedule as `{row['trained_as']}`, trained once")
            if row["status"] != "ok":
                notes.append(row["status"])
            lam = "" if row["lambda"] is None else f"{row['lambda']:g}"
            k2 = "" if row["k2"] is None else str(row["k2"])
            score = NA if row["score"] is None else f"{row['score']:.4f}"
            lines.append(f"| {stage['stage']} | `{row['trial_id']}` | {lam} | {k2} | {score} | {'; '.join(notes)} |")
    return lines + [""]


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


def _draw_stage(ax, stage: Mapping, color: str) -> None:
    """Candidates of one stage against lambda: a line through them, the chosen one as a star."""
    rows = [r for r in stage["candidates"] if r["lambda"] is not None]
    ok = sorted((r for r in rows if r["status"] == "ok"), key=lambda r: r["lambda"])
    if ok:
        ax.plot([r["lambda"] for r in ok], [r["score"] for r in ok], color="0.35", marker="o", lw=1.0,
                mfc="white", mec="0.2", zorder=3)
    _draw_failed(ax, [r["lambda"] for r in rows if r["status"] == "failed"])
    _draw_chosen(ax, stage, color)


def _draw_chosen(ax, stage: Mapping, color: str) -> None:
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
    return f"{head}\nchosen: {pick}"


def _draw_histories(ax, search: Mapping) -> None:
    evaluated = sorted({e for curves in search.get("histories", {}).values() for c in curves for e in c["epochs"]})
    if len(evaluated) == 1:  # validated at the last epoch only (the quick profile): no curve to draw
        _draw_last_validation(ax, search, evaluated[0])
        return
    drawn = False
    for family in SEARCH_FAMILIES:
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
        _no_data(ax)
    ax.set(xlabel="epoch", ylabel="validation ECE",
           title="Validation ECE over epochs: the chosen schedule of each family (thin: one seed)")
    ax.grid(alpha=0.25, lw=0.5)


def _draw_last_validation(ax, search: Mapping, epoch: int) -> None:
    """Each family's validation ECE at the one evaluated epoch: one dot per seed, a bar at the mean."""
    families = [f for f in SEARCH_FAMILIES if any(c["epochs"] for c in search.get("histories", {}).get(f, []))]
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
            _no_data(fig.add_subplot(grid[0, :]))
        _draw_histories(fig.add_subplot(grid[1, :]), search)
        from matplotlib.lines import Line2D

        handles = [
            Line2D([], [], color="0.35", marker="o", mfc="white", mec="0.2", label="candidate"),
            Line2D([], [], ls="", marker="*", ms=11, color=CHOSEN_COLOR, mec="black", mew=0.6, label="chosen"),
            Line2D([], [], ls="", marker="x", color="grey", mew=1.5, label="failed"),
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

# ----------------------------------------------------------------------------- entry point


def write_report(
    out_dir: Path,
    game: str,
    profile: str,
    finals: dict[str, list[dict]],
    schedules: dict[str, str],
    class_names: list[str],
    condition_class: int,
    search: Mapping | None = None,
) -> Report:
    """Write results.md, results.csv and the three figures into ``out_dir``; return a :class:`Report`.

    With ``search`` (a :func:`search_trace`), also search.json, search.png, search.pdf and
    a section on the search in results.md.

    ``finals`` maps a family ("none", "constant", "time-dependent", the baselines of
    :data:`FAMILIES`, any subset) to its flat test results, one per seed; ``schedules`` maps a
    family to its compact schedule string. A family with no result is skipped with a note;
    missing or NaN metrics read ``n/a``.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    ordered = _ordered_families(finals)
    families = [f for f in ordered if finals[f]]
    skipped = [f for f in ordered if not finals[f]]
    condition = _class_name(class_names, condition_class)
    title = f"{game} ({profile})"

    markdown = _markdown(game, profile, families, skipped, finals, schedules, condition, search)
    md_path = out_dir / "results.md"
    write_atomic(md_path, markdown)
    csv_path = out_dir / "results.csv"
    _write_csv(csv_path, families, finals)
    files = [
        md_path,
        csv_path,
        _plot_entry_ece(out_dir / "entry_ece.png", families, finals, title),
        _plot_reliability(out_dir / "reliability.png", families, finals, title),
        _plot_intervals(out_dir / "intervals.png", families, finals, title),
    ]
    if search is not None:
        write_atomic(out_dir / SEARCH_JSON, json.dumps(search, indent=1))
        files += [out_dir / SEARCH_JSON, *plot_search(search, out_dir / "search.png", title)]
    return Report(markdown=markdown, table=_plain(game, profile, families, finals),
                  files=files, summary=_summary(families, finals))


# ----------------------------------------------------------------------------- command line


def read_finals(csv_path: str | Path) -> dict[str, list[dict[str, float]]]:
    """The per-seed rows of a results.csv, back as ``finals`` ({family: [flat result per seed]})."""
    finals: dict[str, list[dict[str, float]]] = {}
    with Path(csv_path).open(newline="") as fh:
        for row in csv.DictReader(fh):
            if row.get("stat") != "value":
                continue
            values = {k: float(v) if v not in ("", None) else math.nan for k, v in row.items()
                      if k not in ("family", "stat")}
            finals.setdefault(row["family"], []).append(values)
    return finals


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m focus_tune.report RESULTS_CSV``: the differences from none, with Welch p-values."""
    import argparse

    ap = argparse.ArgumentParser(prog="python -m focus_tune.report", description=main.__doc__)
    ap.add_argument("results_csv", help="a report's results.csv")
    args = ap.parse_args(argv)
    finals = read_finals(args.results_csv)
    lines = _difference_lines(_ordered_families(finals), finals)
    print("\n".join(lines) if lines else "no family to compare with none in this file")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
