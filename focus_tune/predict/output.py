"""The outputs of the estimates: the summary on the terminal, the Parquet file and the
figure of each image."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path
from typing import Sequence

import numpy as np

from ..durable import write_atomic

MAX_HEATMAP_CLASSES = 24  # more classes: the most probable ones, the rest summed as "other"


# ----------------------------------------------------------------------------- the terminal


def bands(length: int, count: int) -> list[tuple[int, int]]:
    """``count`` contiguous entry bands (1-based, inclusive) covering 1..length."""
    return [(int(b[0]) + 1, int(b[-1]) + 1) for b in np.array_split(np.arange(length), min(count, length))]


def summary(result: dict, n_bands: int = 6, top: int = 3) -> str:
    """The readable summary of one image: top classes per entry band, the interval."""
    names = result["class_names"]
    lines = [f"{result['input']}" + (f"  ({result['image_note']})" if result["image_note"] else "")]

    def table(marginals, start: int = 1) -> list[str]:
        p = np.asarray(marginals)
        rows = []
        for lo, hi in bands(result["length"] - start + 1, n_bands):
            lo, hi = lo + start - 1, hi + start - 1
            mean = p[lo - 1: hi].mean(axis=0)
            best = np.argsort(-mean, kind="stable")[:top]
            label = f"{lo}" if lo == hi else f"{lo}-{hi}"
            rows.append(f"    {label:<9}" + "  ".join(f"{names[a]} {mean[a]:.2f}" for a in best))
        return rows

    lines.append(f"  marginal P(Y_i = a | x), top {top} classes, mean over the entries of each band:")
    lines += table(result["marginals"])
    lines.append("  " + _tte_line(result["time_to_event"], result["event"], result["length"]))
    truth = result.get("truth")
    if truth:
        where = {True: "inside", False: "outside", None: "not decided by"}[truth["covered"]]
        rmse = (f"; RMSE to the exact marginals {truth['rmse_to_exact']:.4f}"
                if truth["rmse_to_exact"] is not None else "")
        t = f"T > {truth['time_to_event']} (censored)" if truth.get("censored") else f"T = {truth['time_to_event']}"
        lines.append(f"  truth: {t} ({where} the interval){rmse}")
    cond = result.get("conditional")
    if cond:
        k = len(cond["prefix"])
        lines.append(f"  given entries 1..{k} = {', '.join(cond['prefix'])}:")
        lines += table(cond["marginals"], start=k + 1)
        lines.append("  " + _tte_line(cond["time_to_event"], result["event"], result["length"]))
    return "\n".join(lines)


def _tte_line(tte: dict, event: str, length: int) -> str:
    a = tte["alpha"]
    return (f"time to {event}: I_{a:g} = [{tte['lower']:g}, {tte['upper']:g}] entries, mean {tte['mean']:.1f}, "
            f"median {tte['median']:g}; P({event} within {length} entries) = {tte['p_event_within_length']:.2f}")


LEAK_WARNING = 0.05  # above it, predict warns that the model does not keep the event absorbing


def leak_warning(results: Sequence[dict], threshold: float = LEAK_WARNING) -> str | None:
    """One line when the model leaves the event after reaching it in more than ``threshold`` of
    the sampled sequences that reach it, for some image (None otherwise): the data's event is
    absorbing (data.sequences.ONLY_EVENT_ABSORBING), so such draws are the model's behaviour, not the
    process's."""
    leaks = [(r["time_to_event"].get("leak"), r) for r in results]
    over = [(x, r) for x, r in leaks if x is not None and x > threshold]
    if not over:
        return None
    worst, r = max(over, key=lambda pair: pair[0])
    event = r["event"]
    return (f"warning: the model does not keep {event} absorbing: {worst:.0%} of the sampled sequences that reach "
            f"{event} leave it afterwards ({r['input']}; above {threshold:.0%} for {len(over)} of {len(results)} "
            f"image(s)). In the data nothing follows {event}: the probabilities of the entries after it are the "
            "model's, not a process's")


# ----------------------------------------------------------------------------- files


def write_parquet(path: Path, results: Sequence[dict]) -> Path:
    """One row per image: marginals [L][c], the interval, the distribution of T, the truth if known."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    def tte(r: dict | None, key: str):
        return None if r is None else r["time_to_event"][key]

    cond = [r["conditional"] for r in results]
    columns = {
        "input": [r["input"] for r in results],
        "model": [r["model"] for r in results],
        "family": [r["family"] for r in results],
        "num_samples": pa.array([r["num_samples"] for r in results], pa.int32()),
        "seed": pa.array([r["seed"] for r in results], pa.int64()),
        "estimator": [r["estimator"] for r in results],
        "image_note": [r["image_note"] for r in results],
        "marginals": pa.array([r["marginals"] for r in results], pa.list_(pa.list_(pa.float64()))),
        "tte_alpha": [r["time_to_event"]["alpha"] for r in results],
        "tte_lower": [r["time_to_event"]["lower"] for r in results],
        "tte_upper": [r["time_to_event"]["upper"] for r in results],
        "tte_mean": [r["time_to_event"]["mean"] for r in results],
        "tte_median": [r["time_to_event"]["median"] for r in results],
        "tte_distribution": pa.array([r["time_to_event"]["distribution"] for r in results], pa.list_(pa.float64())),
        "p_event_within_length": [r["time_to_event"]["p_event_within_length"] for r in results],
        "prefix": pa.array([c["prefix"] if c else None for c in cond], pa.list_(pa.string())),
        "conditional_marginals": pa.array([c["marginals"] if c else None for c in cond],
                                          pa.list_(pa.list_(pa.float64()))),
        "conditional_tte_lower": pa.array([tte(c, "lower") for c in cond], pa.float64()),
        "conditional_tte_upper": pa.array([tte(c, "upper") for c in cond], pa.float64()),
        "conditional_tte_mean": pa.array([tte(c, "mean") for c in cond], pa.float64()),
        "true_time_to_event": pa.array([r["truth"]["time_to_event"] if r["truth"] else None for r in results],
                                       pa.int32()),
        "true_covered": pa.array([r["truth"]["covered"] if r["truth"] else None for r in results], pa.bool_()),
        "true_censored": pa.array([r["truth"].get("censored", False) if r["truth"] else None for r in results],
                                  pa.bool_()),
    }
    first = results[0]
    meta = {"focus_tune.class_names": json.dumps(first["class_names"]), "focus_tune.event": first["event"],
            "focus_tune.length": str(first["length"])}
    table = pa.table(columns).replace_schema_metadata(meta)
    buf = io.BytesIO()
    pq.write_table(table, buf)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, buf.getvalue())
    return path


def _file_name(name: str, taken: set[str]) -> str:
    stem = re.sub(r"[^A-Za-z0-9._-]+", "_", Path(name).with_suffix("").as_posix().strip("/")).strip("._") or "image"
    stem = stem[-80:]
    candidate, n = stem, 2
    while candidate in taken:
        candidate, n = f"{stem}-{n}", n + 1
    taken.add(candidate)
    return candidate + ".png"


def plot_prediction(result: dict, image: np.ndarray, path: Path) -> Path:
    """One image's figure: the input, P(Y_i = a | x) as a heatmap over entries and classes,
    and the distribution of the time to the event with I_alpha shaded (and the truth)."""
    import matplotlib
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    from ..report import SEARCH_STYLE

    names = result["class_names"]
    p = np.asarray(result["marginals"])  # (L, c)
    L = p.shape[0]
    rows = np.arange(p.shape[1])
    if p.shape[1] > MAX_HEATMAP_CLASSES:  # the most probable classes, the rest summed
        keep = np.sort(np.argsort(-p.sum(axis=0), kind="stable")[: MAX_HEATMAP_CLASSES - 1])
        rest = np.setdiff1d(rows, keep)
        p = np.concatenate([p[:, keep], p[:, rest].sum(axis=1, keepdims=True)], axis=1)
        labels = [names[a] for a in keep] + [f"other ({len(rest)})"]
    else:
        labels = list(names)
    tte = result["time_to_event"]
    with matplotlib.rc_context(SEARCH_STYLE):
        fig = Figure(figsize=(11.5, max(3.2, 0.17 * len(labels) + 1.3)), layout="constrained")
        fig.get_layout_engine().set(wspace=0.06)
        FigureCanvasAgg(fig)
        grid = fig.add_gridspec(1, 3, width_ratios=(0.8, 3.2, 2.0))
        ax_img = fig.add_subplot(grid[0, 0])
        shown = image.transpose(1, 2, 0) if image.shape[0] == 3 else image[0]
        ax_img.imshow(shown, cmap=None if image.shape[0] == 3 else "gray", interpolation="nearest")
        ax_img.set_axis_off()
        ax_img.set_title(_wrap(result["input"], 16), fontsize=7)

        ax = fig.add_subplot(grid[0, 1])
        mesh = ax.imshow(p.T, aspect="auto", origin="upper", cmap="viridis", vmin=0, vmax=1,
                         extent=(0.5, L + 0.5, len(labels) - 0.5, -0.5), interpolation="nearest")
        ax.set_yticks(range(len(labels)))
        ax.set_yticklabels(labels, fontsize=6.5 if len(labels) > 12 else 7.5)
        ax.set(xlabel="entry i", title=f"Marginal probabilities, M = {result['num_samples']} samples"
               + (f", {result['family']} model" if result.get("family") else ""))
        ax.spines[["top", "right"]].set_visible(True)
        fig.colorbar(mesh, ax=ax, fraction=0.04, pad=0.01, label=r"$P(Y_i = a \mid x)$")

        ax_t = fig.add_subplot(grid[0, 2])
        t = np.arange(1, L + 1)
        ax_t.bar(t, tte["distribution"], width=1.0, color="0.55", edgecolor="white", lw=0.3,
                 label=r"$P(T = t \mid x)$")
        ax_t.axvspan(tte["lower"], tte["upper"], color="tab:red", alpha=0.15,
                     label=f"$I_{{{tte['alpha']:g}}}$ = [{tte['lower']:g}, {tte['upper']:g}]")
        ax_t.axvline(tte["mean"], color="tab:red", lw=1.2, label=f"mean {tte['mean']:.1f}")
        cond = result.get("conditional")
        if cond:
            ax_t.step(t, cond["time_to_event"]["distribution"], where="mid", color="tab:blue", lw=1.1,
                      label=f"given {', '.join(cond['prefix'])}: [{cond['time_to_event']['lower']:g}, "
                            f"{cond['time_to_event']['upper']:g}]")
        truth = result.get("truth")
        if truth:
            rel = ">" if truth.get("censored") else "="
            ax_t.axvline(truth["time_to_event"], color="black", ls="--", lw=1.0,
                         label=f"true T {rel} {truth['time_to_event']}{' (censored)' if rel == '>' else ''}")
        ax_t.set(xlabel=f"time to {result['event']} T (entries; T = {L}: not within {L})", ylabel="probability",
                 xlim=(0.5, L + 0.5), title=f"Time to {result['event']}")
        ax_t.legend(frameon=False, loc="best")
        ax_t.grid(alpha=0.25, lw=0.5)
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=150)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, buf.getvalue())
    return path


def _wrap(text: str, width: int = 28) -> str:
    return "\n".join(text[i: i + width] for i in range(0, len(text), width))
