"""The verdict across the six scenarios: one row per scenario from its replication.

``python -m focus_tune.replicate.verdict --out docs/results/verdict docs/results/replication/*-quick``
reads each folder's ``replication.json`` (:func:`focus_tune.replicate.analysis.summarize`) and
writes ``verdict.md`` (the table README and RESULTS open with), ``verdict.json`` and
``verdict.png`` (the forest plot). Per scenario:

* ``none``'s ECE and coverage of I_0.9 (the mean over the searches of each search's mean over
  its final seeds);
* time-dependent minus ``none`` on ECE, debiased ECE, coverage and interval score, and
  time-dependent against the cheap fixes after training: minus ``temperature-scaled`` on ECE,
  minus ``none +conformal`` (none's I_0.9 calibrated by split conformal) on interval score and
  relative width. Each: the pooled paired difference (per search, the mean over its seeds of
  the per-seed differences), its 95 % t interval over the searches and how many searches are
  below zero (for coverage: how many bring time-dependent's closer to 0.9 than none's);
* how many searches kept the scenario's regime checks;
* the paper's none -> time-dependent ECE and coverage (its Tables 2 and 6: another scale,
  other data).

Below it, what the data show (why the scenarios differ): from the searches' datasets
(``--data``) the test split's mean min(T, L) and the share of items whose event falls within
L; from the replications, how much the frame tells (image-blind's test CE minus the exact
process's) and how much of it ``none`` reads.

Holm's adjustment runs over the declared primary comparisons
(:data:`focus_tune.replicate.analysis.VERDICT_PRIMARY`) of all scenarios together, and
separately within each scenario (the replication's own ``holm_primary``); the table says
which.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import numpy as np

from ..names import conformal_row
from ..report.columns import COVERAGE_TARGET
from ..report.stats import holm
from . import regime_design as design
from .analysis import VERDICT_PRIMARY
from .pooling import equivalence, random_effects
from .regime_design import equivalence_margin

SCENARIOS = ("facemed", "hero", "seaquest", "riverraid", "bankheist", "roadrunner")
NAMES = {"facemed": "FaceMed", "hero": "H.E.R.O.", "seaquest": "Seaquest", "riverraid": "River Raid",
         "bankheist": "Bank Heist", "roadrunner": "Road Runner"}
# The paper's test values, mean over its 3 seeds: marginal ECE (Table 2) and coverage of I_0.9
# (Table 6), none -> time-dependent.
PAPER = {
    "seaquest": {"ece": (0.0435, 0.0277), "coverage": (0.3420, 0.7065)},
    "riverraid": {"ece": (0.0583, 0.0388), "coverage": (0.4463, 0.8345)},
    "bankheist": {"ece": (0.0559, 0.0148), "coverage": (0.7066, 0.9243)},
    "hero": {"ece": (0.0947, 0.0481), "coverage": (0.2252, 0.6850)},
    "roadrunner": {"ece": (0.0779, 0.0204), "coverage": (0.2646, 0.7507)},
    "facemed": {"ece": (0.1503, 0.0757), "coverage": (0.2789, 0.7169)},
}
NONE_CONFORMAL = conformal_row("none")
COVERAGE = "test/interval/coverage"
# (column label, (a, b), metric): the differences a - b the table shows, in its order
COMPARISONS = (
    ("ECE", ("time-dependent", "none"), "test/marginal/ece"),
    ("ECE debiased", ("time-dependent", "none"), "test/marginal/ece_debiased"),
    ("coverage", ("time-dependent", "none"), "test/interval/coverage"),
    ("interval score", ("time-dependent", "none"), "test/interval/interval_score"),
    ("ECE vs temperature-scaled", ("time-dependent", "temperature-scaled"), "test/marginal/ece"),
    ("interval score vs none +conformal", ("time-dependent", NONE_CONFORMAL), "test/interval/interval_score"),
    ("width vs none +conformal", ("time-dependent", NONE_CONFORMAL), "test/interval/relative_width"),
)


HEADERS = {"ECE": "Δ ECE", "ECE debiased": "Δ ECE debiased", "coverage": "Δ coverage",
           "interval score": "Δ interval score", "ECE vs temperature-scaled": "Δ ECE vs temperature-scaled",
           "interval score vs none +conformal": "Δ interval score vs none +conformal",
           "width vs none +conformal": "Δ width vs none +conformal"}


def scenario_of(summary: dict, folder: Path) -> str:
    """The scenario of a replication: from its searches' run folders (<scenario>-<profile>-seed<r>),
    else from its own folder's name (<scenario>-<profile>)."""
    names = [Path(f).name for f in summary.get("folders", [])] or [folder.name]
    return names[0].split("-")[0]


def verdict(replications: dict[str, dict]) -> dict:
    """{"scenarios": {scenario: row}, "primary_tests": count}: each row holds R, none's means, the
    comparisons (mean, low, high, below, runs, per_run, primary, holm_scenario, holm_all), the
    regime and the paper's values."""
    rows = {}
    for scenario in [g for g in SCENARIOS if g in replications] + [g for g in replications if g not in SCENARIOS]:
        s = replications[scenario]
        means = s.get("means", {})
        row = {"runs": s["runs"], "missing_seeds": s.get("missing_seeds", []),
               "none": {k: means.get(k, {}).get("none", {}).get("mean", math.nan)
                        for k in ("test/marginal/ece", "test/interval/coverage")},
               "none_conformal_coverage": means.get("test/interval/coverage", {}).get(NONE_CONFORMAL, {}).get(
                   "mean", math.nan),
               "regime": None if not s.get("regime") else {"kept": s["regime"]["kept"], "runs": s["runs"]},
               "paper": PAPER.get(scenario), "comparisons": {}}
        for label, (a, b), key in COMPARISONS:
            d = s["differences"].get(f"{a} - {b}/{key}")
            if d is None:
                continue
            row["comparisons"][label] = {**comparison(d, a, b, key), "primary": ((a, b), key) in VERDICT_PRIMARY,
                                         "holm_scenario": d.get("holm_primary", math.nan)}
            if key == COVERAGE:
                row["comparisons"][label]["closer"] = closer_to_nominal(means.get(key, {}), a, b)
                row["comparisons"][label]["closer_to_oracle"] = closer_to_nominal(
                    means.get(key, {}), a, b, nominal=_per_search(means, key, ORACLE))
        row.update(headroom(means))
        ece = row["comparisons"].get("ECE")
        if ece is not None:
            ece["equivalence"] = equivalence(ece["per_run"], row["margin"])
        own = holm({label: c["p"] for label, c in row["comparisons"].items() if c["primary"]})
        for label, c in row["comparisons"].items():
            c["holm_verdict_scenario"] = own.get(label, math.nan)  # over this scenario's verdict primaries alone
        rows[scenario] = row
    pooled = holm({f"{scenario}/{label}": c["p"] for scenario, row in rows.items()
                   for label, c in row["comparisons"].items() if c["primary"]})
    for scenario, row in rows.items():
        for label, c in row["comparisons"].items():
            c["holm_all"] = pooled.get(f"{scenario}/{label}", math.nan)
    games = [g for g in rows if g != "facemed"]
    return {"scenarios": rows, "primary_tests": sum(math.isfinite(p) for p in pooled.values()),
            "pooled": {"all": pooled_ece(rows, list(rows)), "games": pooled_ece(rows, games)}}


ORACLE = "oracle"
ECE = "test/marginal/ece"


def _per_search(means: dict, key: str, row: str) -> dict[str, float]:
    """{search: that search's mean over its seeds} of ``key`` for the report row ``row``."""
    return means.get(key, {}).get(row, {}).get("per_seed") or {}


def headroom(means: dict) -> dict:
    """``none``'s ECE above the oracle's (the best image-only simulator, scored alike): the
    mean over the searches ("headroom") and the equivalence margin it sets
    (:func:`focus_tune.replicate.regime_design.equivalence_margin`); NaN without an oracle row."""
    none, oracle = _per_search(means, ECE, "none"), _per_search(means, ECE, ORACLE)
    both = sorted(none.keys() & oracle.keys())
    if not both:
        return {"headroom": math.nan, "margin": math.nan}
    gaps = [none[r] - oracle[r] for r in both]
    return {"headroom": float(np.mean(gaps)),
            "margin": equivalence_margin([none[r] for r in both], [oracle[r] for r in both])}


def pooled_ece(rows: dict[str, dict], scenarios: list[str]) -> dict:
    """The random-effects pooled time-dependent - none ECE difference over ``scenarios``
    (:func:`focus_tune.replicate.pooling.random_effects` of their searches' differences)."""
    groups = [rows[g]["comparisons"]["ECE"]["per_run"] for g in scenarios if "ECE" in rows[g]["comparisons"]]
    return {**random_effects(groups), "names": [g for g in scenarios if "ECE" in rows[g]["comparisons"]]}


def comparison(d: dict, a: str, b: str, key: str) -> dict:
    """A verdict's cell of the difference ``a - b`` of ``key`` from a replication's record ``d``."""
    return {"pair": [a, b], "key": key, "mean": d["mean"], "low": d["low"], "high": d["high"], "p": d["p"],
            "below": d["below_zero"], "above": d["above_zero"], "runs": d["runs"], "per_run": d["per_run"]}


def closer_to_nominal(coverage: dict, a: str, b: str, nominal: float | dict[str, float] = COVERAGE_TARGET
                      ) -> int | None:
    """In how many searches row ``a``'s test coverage is closer to ``nominal`` than row ``b``'s
    (a difference's sign does not say it: where ``b`` under-covers, a rise is the better way;
    where it over-covers, a fall). ``nominal``: one level, or per search (the oracle's own
    coverage: a discrete T covers I_0.9 at 0.90-0.94, not 0.9). None without both rows'
    per-search means (or a per-search nominal)."""
    per_a, per_b = (coverage.get(row, {}).get("per_seed") for row in (a, b))
    if not per_a or not per_b:
        return None
    both = per_a.keys() & per_b.keys()
    if isinstance(nominal, dict):
        if not nominal:
            return None
        both &= nominal.keys()
        return sum(abs(per_a[r] - nominal[r]) < abs(per_b[r] - nominal[r]) for r in both)
    return sum(abs(per_a[r] - nominal) < abs(per_b[r] - nominal) for r in both)


def _num(x: float, digits: int = 3, signed: bool = False) -> str:
    if x is None or not math.isfinite(x):
        return "n/a"
    return f"{x:+.{digits}f}" if signed else f"{x:.{digits}f}"


def _estimate(p: dict, digits: int = 4) -> str:
    """A pooled estimate as "mean [low, high]", each signed."""
    return f"{_num(p['mean'], digits, True)} [{_num(p['low'], digits, True)}, {_num(p['high'], digits, True)}]"


def _cell(c: dict | None, digits: int) -> str:
    if c is None:
        return "n/a"
    ci = f" [{_num(c['low'], digits, True)}, {_num(c['high'], digits, True)}]" if math.isfinite(c["low"]) else ""
    mark = "**" if c["primary"] and math.isfinite(c["holm_all"]) and c["holm_all"] < 0.05 else ""
    k = c["closer"] if c.get("closer") is not None else c["below"]
    return f"{mark}{_num(c['mean'], digits, True)}{mark}{ci}, {k}/{c['runs']}"


def _comparison(row: dict, label: str) -> str:
    """A comparison's cell: ECE differences to 4 digits, the others to 3."""
    return _cell(row["comparisons"].get(label), 4 if label.startswith("ECE") else 3)


def _regime(row: dict) -> str:
    return "n/a" if row["regime"] is None else f"{row['regime']['kept']}/{row['regime']['runs']}"


def _paper(row: dict, key: str, digits: int) -> str:
    values = (row["paper"] or {}).get(key)
    return " → ".join(f"{x:.{digits}f}" for x in values) if values else "n/a"


def markdown(v: dict) -> list[str]:
    """The verdict table and how to read it."""
    cols = [label for label, _, _ in COMPARISONS]
    lines = ["| scenario | R | `none` ECE | `none` coverage | " + " | ".join(HEADERS[c] for c in cols)
             + " | regime kept | paper: ECE none → time-dep. | paper: coverage none → time-dep. |",
             "|---|---:|---:|---:|" + "---|" * len(cols) + "---:|---:|---:|"]
    for scenario, row in v["scenarios"].items():
        lines.append(f"| {NAMES.get(scenario, scenario)} | {row['runs']} | "
                     f"{_num(row['none']['test/marginal/ece'], 4)} | {_num(row['none']['test/interval/coverage'])} | "
                     + " | ".join(_comparison(row, c) for c in cols)
                     + f" | {_regime(row)} | {_paper(row, 'ece', 3)} | {_paper(row, 'coverage', 2)} |")
    return lines


def equivalence_markdown(v: dict) -> list[str]:
    """Per scenario: ``none``'s headroom over the oracle, the 90 % interval of time-dependent -
    none on ECE (the smallest margin it is equivalent within), the declared margin, and
    coverage counted against the oracle's own coverage; then the pooled estimates."""
    lines = ["| scenario | `none` ECE − oracle's | time-dep. − none, ECE: 90 % interval | equivalent within ± "
             "| declared margin (¼ headroom) | equivalent at it | coverage closer to the oracle's, k/R "
             "| Holm over its own six |",
             "|---|---:|---|---:|---:|---|---:|---:|"]
    for scenario, row in v["scenarios"].items():
        ece, cov = row["comparisons"].get("ECE"), row["comparisons"].get("coverage")
        if ece is None:
            continue
        eq = ece["equivalence"]
        within = max(abs(eq["low"]), abs(eq["high"])) if math.isfinite(eq["low"]) else math.nan
        k = "n/a" if cov is None or cov.get("closer_to_oracle") is None else f"{cov['closer_to_oracle']}/{cov['runs']}"
        smallest = min((c["holm_verdict_scenario"] for c in row["comparisons"].values()
                        if math.isfinite(c.get("holm_verdict_scenario", math.nan))), default=math.nan)
        lines.append(f"| {NAMES.get(scenario, scenario)} | {_num(row['headroom'], 4)} | "
                     f"[{_num(eq['low'], 4, True)}, {_num(eq['high'], 4, True)}] | {_num(within, 4)} | "
                     f"{_num(row['margin'], 4)} | {'yes' if eq['equivalent'] else 'no'} | {k} | {_num(smallest, 2)} |")
    lines.append("")
    for name, p in v.get("pooled", {}).items():
        if p["names"] and math.isfinite(p["mean"]):
            names = ", ".join(NAMES.get(g, g) for g in p["names"])
            lines.append(f"Pooled time-dependent − none ECE over {name} ({names}): "
                         f"{_num(p['mean'], 5, True)} [{_num(p['low'], 4, True)}, {_num(p['high'], 4, True)}] "
                         f"(random effects, DerSimonian-Laird tau² {p['tau2']:.1e}, Hartung-Knapp 95 % interval).")
    return lines


# The columns of the short table README and RESULTS open with (:func:`short_markdown`)
SHORT = ("ECE", "coverage", "ECE vs temperature-scaled", "interval score vs none +conformal")
BLOCK_START = "<!-- verdict table: written by python -m focus_tune.replicate.verdict --docs (do not edit) -->"
BLOCK_END = "<!-- end of the verdict table -->"


def short_markdown(v: dict) -> list[str]:
    """The verdict's six rows with the four comparisons a reader asks first, for README and RESULTS
    (verdict.md has them all): the same cells as :func:`markdown`."""
    lines = ["| scenario | R | `none` ECE | time-dep. − none, ECE | `none` coverage | time-dep. − none, coverage "
             "| time-dep. − temperature-scaled, ECE | time-dep. − none +conformal, interval score | regime kept "
             "| paper: ECE none → time-dep. |",
             "|---|---:|---:|---|---:|---|---|---|---:|---:|"]
    for scenario, row in v["scenarios"].items():
        cells = [_comparison(row, c) for c in SHORT]
        lines.append(f"| {NAMES.get(scenario, scenario)} | {row['runs']} | "
                     f"{_num(row['none']['test/marginal/ece'], 4)} | "
                     f"{cells[0]} | {_num(row['none']['test/interval/coverage'])} | {cells[1]} | {cells[2]} | "
                     f"{cells[3]} | {_regime(row)} | {_paper(row, 'ece', 3)} |")
    return lines


# A page may also hold the table of what the data show (optional): the same rule, other markers.
DATA_START = "<!-- verdict data: written by python -m focus_tune.replicate.verdict --docs (do not edit) -->"
DATA_END = "<!-- end of the verdict data -->"


def replace_block(text: str, lines: list[str], where: str, start: str = BLOCK_START, end: str = BLOCK_END) -> str:
    """``text`` with the lines between ``start`` and ``end`` replaced."""
    if text.count(start) != 1 or text.count(end) != 1 or text.index(start) > text.index(end):
        raise ValueError(f"{where}: needs one '{start}' line and one '{end}' line after it")
    head, rest = text.split(start, 1)
    _, tail = rest.split(end, 1)
    return head + start + "\n" + "\n".join(lines) + "\n" + end + tail


def update_doc(text: str, v: dict, where: str) -> str:
    """A page with its verdict block (required) and its data block (where it has one) rewritten."""
    text = replace_block(text, short_markdown(v), where)
    if DATA_START in text or DATA_END in text:
        text = replace_block(text, facts_markdown(v["frame"], v["data"]), where, DATA_START, DATA_END)
    return text


def notes(v: dict) -> list[str]:
    return [
        "Δ: time-dependent minus `none` (or minus the row named). Each: the pooled paired difference over the R "
        "searches of the scenario (per search, the "
        "mean over its final seeds of the per-seed differences; seed s of every row shares its initial weights, "
        "batches and Monte Carlo uniforms), its 95 % t interval over the searches and k/R: the searches in "
        "which it is below zero (lower is better for ECE, interval score and width), and for coverage the "
        "searches in which time-dependent's coverage is closer to 0.9 than `none`'s (a rise is better only "
        "where `none` under-covers). "
        "*temperature-scaled*: the `none` finals with one temperature chosen on the validation split; "
        "*none +conformal*: the `none` finals with I_0.9 recalibrated by split conformal on the validation "
        "split (coverage at least 0.9 on exchangeable data; docs/METRICS.md, 'Conformal intervals'). "
        f"**Bold**: significant at 0.05 after Holm over the {v['primary_tests']} primary comparisons of all "
        "scenarios together (time-dependent − none on ECE, debiased ECE, coverage and interval score; against "
        "temperature-scaled on ECE; against none +conformal on the interval score; the width beside it is not "
        "tested as primary); each replication.md also adjusts its own scenario's primary comparisons alone. "
        "The paper's values are its Tables 2 and 6 (mean over 3 seeds): another scale and other data, for "
        "the direction only."]


def frame_facts(replications: dict[str, dict]) -> dict[str, dict]:
    """Per scenario, how much the frame tells and how much of it the models read, from the
    replications' test marginal CE (nats per entry, mean over the searches): ``blind`` the
    image-blind reference (the same distribution for every frame), ``exact`` the true
    process (the most any model can reach), ``none`` and ``time-dependent`` the models.
    ``tells`` = blind - exact; ``read`` = (blind - none) / tells."""
    out = {}
    for scenario, s in replications.items():
        ce = s.get("means", {}).get("test/marginal/ce", {})
        mean = {row: ce.get(row, {}).get("mean", math.nan)
                for row in ("image-blind", "exact", "none", "time-dependent")}
        tells = mean["image-blind"] - mean["exact"]
        out[scenario] = {"blind": mean["image-blind"], "exact": mean["exact"], "none": mean["none"],
                         "time-dependent": mean["time-dependent"], "tells": tells,
                         "read": (mean["image-blind"] - mean["none"]) / tells if tells > 0 else math.nan}
    return out


def data_facts(folders: list[Path]) -> dict[str, dict]:
    """Per scenario, what its datasets' test splits show (the searches' own data: one dataset folder
    per search, ``data_cache/<scenario>-<profile>-seed<r>``): L, the mean of min(T, L) in entries
    (and the validation split's, on which the post-hoc fixes are fitted), the share of items whose
    event falls within L, and the share censored."""
    from ..data import load_dataset
    from ..data.sequences import censored_items, time_to_event

    grouped: dict[str, list] = {}
    for folder in folders:
        ds = load_dataset(folder)
        m, test, val = ds.manifest, ds.test, ds.val
        T = time_to_event(test.sequences, m.event_class, test.observed_length)
        L = test.sequences.shape[1]
        observed = test.observed_length if test.observed_length is not None else np.full(len(T), L)
        censored = censored_items(test.sequences, m.event_class, observed)
        hit = (test.sequences == m.event_class).any(axis=1) & ~censored
        T_val = time_to_event(val.sequences, m.event_class, val.observed_length)
        grouped.setdefault(m.game or m.name, []).append(
            {"folder": folder.name, "seed": m.seed, "L": L, "items": len(T),
             "mean_length": float(np.minimum(T, L).mean()),
             "val_mean_length": float(np.minimum(T_val, L).mean()),
             "event_rate": float(hit.mean()), "censored": float(censored.mean())})
    keys = ("mean_length", "val_mean_length", "event_rate", "censored")
    return {scenario: {"datasets": [d["folder"] for d in ds], "L": ds[0]["L"], "items": ds[0]["items"],
                       **{k: float(np.mean([d[k] for d in ds])) for k in keys},
                       "per_dataset": [{k: d[k] for k in ("folder", "seed", "mean_length", "val_mean_length")}
                                       for d in ds]}
            for scenario, ds in grouped.items()}


def split_association(replications: dict[str, dict], data: dict[str, dict]) -> dict:
    """Search by search, how far the validation split's mean min(T, L) lies from the test split's
    ((validation - test) / test) beside ``none +conformal``'s test coverage: its level is fitted on
    the validation split, and its guarantee needs the two splits exchangeable. Spearman's rank
    correlation over the searches whose dataset is given (the dataset's manifest seed r is the
    search's seed r). Exploratory: not among the declared comparisons, not adjusted."""
    from scipy.stats import spearmanr

    pairs = []
    for scenario, facts in data.items():
        per_seed = (replications.get(scenario, {}).get("means", {}).get("test/interval/coverage", {})
                    .get(NONE_CONFORMAL, {}).get("per_seed", {}))
        for d in facts.get("per_dataset", []):
            seed = str(d["seed"])
            if seed in per_seed and d["mean_length"] > 0:
                pairs.append({"scenario": scenario, "seed": int(seed), "coverage": per_seed[seed],
                              "val_vs_test": (d["val_mean_length"] - d["mean_length"]) / d["mean_length"]})
    out: dict = {"searches": pairs, "n": len(pairs)}
    if len(pairs) >= 8:  # fewer: no rank correlation worth a p-value
        x, y = [p["val_vs_test"] for p in pairs], [p["coverage"] for p in pairs]
        rho, p = spearmanr(x, y)
        out.update(rho=float(rho), p=float(p))
    return out


def association_markdown(a: dict) -> list[str]:
    if a["n"] == 0:
        return []
    x = [p["val_vs_test"] for p in a["searches"]]
    y = [p["coverage"] for p in a["searches"]]
    text = (f"Search by search ({a['n']} searches with their datasets), the validation split's mean min(T, L) lies "
            f"{min(x):+.0%} to {max(x):+.0%} from the test split's, and `none +conformal`'s test coverage of I_0.9 is "
            f"{min(y):.3f} to {max(y):.3f} (mean {np.mean(y):.3f}; its level is fitted on the validation split, and "
            f"its guarantee of at least 0.9 needs the two splits exchangeable). ")
    if "rho" in a:
        stat = (f"Spearman's rho = {a['rho']:.2f} (p = {a['p']:.3f}, two-sided, n = {a['n']}; exploratory: not among "
                f"the declared comparisons and not adjusted)")
        if a["p"] >= 0.05:
            text += f"No rank association shows at this size: {stat}."
        else:
            sooner = "less" if a["rho"] > 0 else "more"
            text += (f"The two go together: {stat}; where the validation split's items reach the event sooner than "
                     f"the test split's, the calibrated intervals cover {sooner} on the test split.")
    else:
        text += "Fewer than 8 searches: no rank correlation is given."
    return [text]


def facts_markdown(frame: dict[str, dict], data: dict[str, dict]) -> list[str]:
    """The table of what the scenarios' data show: why the games differ."""
    lines = ["| scenario | L | mean min(T, L) | validation's | event within L | censored | test CE image-blind | "
             "exact | `none` | time-dependent | frame tells (blind − exact) | `none` reads |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]

    def pct(x):
        return "n/a" if x is None or not math.isfinite(x) else f"{100 * x:.0f} %"

    others = sorted((set(frame) | set(data)) - set(SCENARIOS))
    for scenario in [g for g in SCENARIOS if g in frame or g in data] + others:
        f, d = frame.get(scenario, {}), data.get(scenario, {})
        lines.append(f"| {NAMES.get(scenario, scenario)} | {d.get('L', 'n/a')} | {_num(d.get('mean_length'), 1)} | "
                     f"{_num(d.get('val_mean_length'), 1)} | "
                     f"{pct(d.get('event_rate'))} | {pct(d.get('censored'))} | {_num(f.get('blind'))} | "
                     f"{_num(f.get('exact'))} | {_num(f.get('none'))} | {_num(f.get('time-dependent'))} | "
                     f"{_num(f.get('tells'))} | {pct(f.get('read'))} |")
    return lines


def search_times(folders: dict[str, Path]) -> dict[str, dict[str, dict]]:
    """Per scenario and per machine (CPU kind and cores: times compare within a kind only), the
    wall seconds of its replicated searches and their commits, from the
    ``searches/seed<r>/provenance.json`` files beside its replication (scripts/verdict_replications.sh)."""
    out = {}
    for scenario, folder in folders.items():
        for f in sorted((folder / "searches").glob("seed*/provenance.json")):
            r = json.loads(f.read_text())
            group = out.setdefault(scenario, {}).setdefault(f"{r['cpu']}, {r['cores']} cores",
                                                            {"wall_s": [], "commits": []})
            group["wall_s"].append(r["wall_s"])
            group["commits"] = sorted({*group["commits"], r["commit"][:7]})
    return out


def times_markdown(times: dict[str, dict[str, dict]]) -> list[str]:
    """The search times table (docs/BENCHMARKS.md): minutes per quick search of each scenario,
    a row per machine it ran on."""
    lines = ["| scenario | searches | wall time per search, mean (min-max) | commit | machine |",
             "|---|---:|---|---|---|"]
    for scenario, machines in times.items():
        for machine, t in machines.items():
            minutes = np.array(t["wall_s"], dtype=float) / 60
            lines.append(f"| {NAMES.get(scenario, scenario)} | {minutes.size} | {minutes.mean():.1f} min "
                         f"({minutes.min():.1f}-{minutes.max():.1f}) | {', '.join(t['commits'])} | {machine} |")
    return lines


def plot(v: dict, path: Path, comparisons: tuple = COMPARISONS) -> Path:
    """The forest plot: one panel per comparison, a row per scenario; dots: the searches, diamond
    and bar: the pooled mean and its 95 % t interval; a dotted line at zero."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    from ..report.figures import save_png

    scenarios = list(v["scenarios"])
    panels = [c for c in comparisons if any(c[0] in r["comparisons"] for r in v["scenarios"].values())]
    fig = Figure(figsize=(2.5 * len(panels) + 1.2, 0.55 * len(scenarios) + 1.6))
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, len(panels), sharey=True, squeeze=False)[0]
    rng = np.random.default_rng(0)  # the dots' vertical jitter only
    y = np.arange(len(scenarios))[::-1]
    for ax, (label, (a, b), key) in zip(axes, panels):
        for yi, scenario in zip(y, scenarios):
            c = v["scenarios"][scenario]["comparisons"].get(label)
            if c is None:
                continue
            x = np.asarray(c["per_run"], dtype=float)
            ax.scatter(x, yi + rng.uniform(-0.15, 0.15, x.size), s=12, color="tab:gray", alpha=0.7, zorder=3)
            color = "tab:red" if c["primary"] and math.isfinite(c["holm_all"]) and c["holm_all"] < 0.05 else "black"
            if math.isfinite(c["low"]):
                ax.errorbar(c["mean"], yi, xerr=[[c["mean"] - c["low"]], [c["high"] - c["mean"]]], fmt="D",
                            color=color, capsize=3, markersize=4, zorder=4)
            elif math.isfinite(c["mean"]):
                ax.plot(c["mean"], yi, "D", color=color, markersize=4, zorder=4)
        ax.axvline(0.0, color="grey", linestyle=":", linewidth=1)
        ax.set_title(f"{a} − {b}\n{label.split(' vs ')[0]}", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.xaxis.set_major_locator(MaxNLocator(nbins=4, symmetric=True))  # tick labels that do not overlap
    axes[0].set_yticks(y, [f"{NAMES.get(g, g)} (R={v['scenarios'][g]['runs']})" for g in scenarios], fontsize=8)
    fig.suptitle("time-dependent against none and the post-hoc fixes: paired differences per scenario "
                 "(dots: searches; diamond: mean, 95 % t interval; red: significant after Holm over all)",
                 fontsize=8)
    fig.tight_layout()
    return save_png(fig, path)


# -- the verdict in the paper's regime (its design: focus_tune/replicate/regime_design.py) --------------

REGIME_COMPARISONS = (design.PRIMARY, *design.SECONDARY)
REGIME_START = ("<!-- regime verdict table: written by python -m focus_tune.replicate.verdict --regime --docs "
                "(do not edit) -->")
REGIME_END = "<!-- end of the regime verdict table -->"


def regime_verdict(replications: dict[str, dict]) -> dict:
    """The verdict as declared in :mod:`focus_tune.replicate.regime_design`: per scenario the
    primary comparison (time-dependent - none, ECE; Holm over the scenarios), its equivalence
    within a quarter of the scenario's headroom, the secondary comparisons with their
    intervals; the random-effects pooled primary difference (the headline)."""
    rows = {}
    for scenario in [g for g in SCENARIOS if g in replications] + [g for g in replications if g not in SCENARIOS]:
        s = replications[scenario]
        means = s.get("means", {})
        row = {"runs": s["runs"], "missing_seeds": s.get("missing_seeds", []),
               "none": {k: means.get(k, {}).get("none", {}).get("mean", math.nan) for k in (ECE, COVERAGE)},
               "oracle": {k: means.get(k, {}).get(ORACLE, {}).get("mean", math.nan) for k in (ECE, COVERAGE)},
               "regime": None if not s.get("regime") else {"kept": s["regime"]["kept"], "runs": s["runs"]},
               "paper": PAPER.get(scenario), "comparisons": {}, **headroom(means)}
        for label, (a, b), key in REGIME_COMPARISONS:
            d = s["differences"].get(f"{a} - {b}/{key}")
            if d is None:
                continue
            row["comparisons"][label] = {**comparison(d, a, b, key), "primary": label == design.PRIMARY[0]}
            if key == COVERAGE:
                row["comparisons"][label]["closer"] = closer_to_nominal(means.get(key, {}), a, b,
                                                                        nominal=_per_search(means, key, ORACLE))
        primary = row["comparisons"].get(design.PRIMARY[0])
        if primary is not None:
            primary["equivalence"] = equivalence(primary["per_run"], row["margin"])
        rows[scenario] = row
    adjusted = holm({g: r["comparisons"][design.PRIMARY[0]]["p"] for g, r in rows.items()
                     if design.PRIMARY[0] in r["comparisons"]})
    for g, r in rows.items():
        for label, c in r["comparisons"].items():
            c["holm_all"] = adjusted.get(g, math.nan) if c["primary"] else math.nan
    held = [g for g, r in rows.items() if r["regime"] and design.in_regime(r["regime"]["kept"], r["regime"]["runs"])]
    return {"design": "regime", "scenarios": rows, "primary_tests": sum(math.isfinite(p) for p in adjusted.values()),
            "pooled": {"all": pooled_ece(rows, list(rows)), "in_regime": pooled_ece(rows, held)}}


def grid_reach(folders: dict[str, Path]) -> dict[str, dict]:
    """Whether the lambda grid reached far enough, per scenario, from its kept searches'
    ``searches/seed<r>/search.json``: every choice of a time-dependent stage (stage 1..k1 or
    the joint stage) and of the constant stage, counted at its grid's largest lambda (the top),
    its smallest (the bottom) or between (the stage's candidates are the grid as the search saw
    it), and the searches in which some time-dependent stage chose the top. With a grid of two
    values every choice is at an edge, so it is the share of the choices at the top, not the
    number of searches with one, that says whether the grid is too narrow."""
    out = {}
    for scenario, folder in folders.items():
        counts = {"searches": 0, "lambdas": set(), "td_searches_top": 0,
                  **{f"{family}_{what}": 0 for family in ("td", "constant") for what in ("choices", "top", "bottom")}}
        for f in sorted((folder / "searches").glob("seed*/search.json")):
            stages = json.loads(f.read_text()).get("stages", [])
            counts["searches"] += 1
            top_here = False
            for st in stages:
                family = "constant" if st["stage"] == "constant" else "td" if (
                    st["stage"] == "joint" or st["stage"].startswith("stage")) else None
                grid = sorted({c["lambda"] for c in st["candidates"] if c.get("lambda") is not None})
                won = [c["lambda"] for c in st["candidates"] if c["trial_id"] == st["winner"]]
                if family is None or len(grid) < 2 or not won:
                    continue
                counts["lambdas"].update(grid)
                counts[f"{family}_choices"] += 1
                if won[0] == grid[-1]:
                    counts[f"{family}_top"] += 1
                    top_here = top_here or family == "td"
                elif won[0] == grid[0]:
                    counts[f"{family}_bottom"] += 1
            counts["td_searches_top"] += top_here
        counts["lambdas"] = sorted(counts["lambdas"])
        out[scenario] = counts
    return out


def grid_reach_markdown(reach: dict[str, dict]) -> list[str]:
    lines = ["| scenario | searches | lambda grid | time-dependent stages' choices: top / bottom / all | "
             "searches with a top choice | constant's choices: top / bottom / all |", "|---|---:|---|---|---:|---|"]
    for scenario, c in reach.items():
        n = c["searches"]
        grid = ", ".join(f"{x:g}" for x in c["lambdas"])
        lines.append(f"| {NAMES.get(scenario, scenario)} | {n} | {grid} | "
                     f"{c['td_top']} / {c['td_bottom']} / {c['td_choices']} | {c['td_searches_top']}/{n} | "
                     f"{c['constant_top']} / {c['constant_bottom']} / {c['constant_choices']} |")
    return lines


def regime_markdown(v: dict) -> list[str]:
    """The regime's verdict table (README and RESULTS beside the quick one) and its headline."""
    labels = [label for label, _, _ in design.SECONDARY]
    def header(label: str) -> str:  # "ECE vs temperature-scaled" -> "time-dep. − temperature-scaled, ECE"
        metric, _, rival = label.partition(" vs ")
        return f"time-dep. − {rival or 'none'}, {metric}"

    lines = ["| scenario | R | `none` ECE | oracle ECE | time-dep. − none, ECE (primary) | Holm | equivalent within "
             "¼ headroom | " + " | ".join(header(label) for label in labels)
             + " | regime kept | paper: ECE none → time-dep. |",
             "|---|---:|---:|---:|---|---:|---|" + "---|" * len(labels) + "---:|---:|"]
    for scenario, row in v["scenarios"].items():
        primary = row["comparisons"].get(design.PRIMARY[0])
        eq = "n/a" if primary is None else (
            f"{'yes' if primary['equivalence']['equivalent'] else 'no'} (±{_num(row['margin'], 4)})")
        lines.append(f"| {NAMES.get(scenario, scenario)} | {row['runs']} | {_num(row['none'][ECE], 4)} | "
                     f"{_num(row['oracle'][ECE], 4)} | {_cell(primary, 4)} | "
                     f"{_num(primary['holm_all'], 3) if primary else 'n/a'} | {eq} | "
                     + " | ".join(_comparison(row, label) for label in labels)
                     + f" | {_regime(row)} | {_paper(row, 'ece', 3)} |")
    p = v["pooled"]["all"]
    lines += ["", f"**Pooled over {len(p['names'])} scenario(s)** (random effects, Hartung-Knapp 95 % interval): "
                  f"time-dependent − none ECE {_estimate(p)}."
              if math.isfinite(p["mean"]) else "No pooled estimate: fewer than two searches in a scenario."]
    held = v["pooled"].get("in_regime")
    if held is not None and math.isfinite(held["mean"]):
        lines += ["", f"**In the regime** (the scenarios whose searches kept the regime's checks in more than half: "
                      f"{', '.join(NAMES.get(g, g) for g in held['names'])}): time-dependent − none ECE "
                      f"{_estimate(held)}."]
    elif held is not None:
        lines += ["", "**In the regime**: " + (
            "no scenario's searches kept the regime's checks in more than half, so there is no estimate where the "
            "regime held." if not held["names"] else "no estimate: fewer than two searches in a scenario.")]
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m focus_tune.replicate.verdict",
                                 description="The verdict table and forest plot across scenarios, from their "
                                             "replications' replication.json.")
    ap.add_argument("folders", nargs="+", type=Path, help="replication folders (each with a replication.json)")
    ap.add_argument("--out", type=Path, required=True, help="where verdict.md, verdict.json and verdict.png go")
    ap.add_argument("--docs", nargs="*", type=Path, default=[],
                    help="Markdown files (README.md, docs/RESULTS.md) whose verdict block gets the short table")
    ap.add_argument("--data", nargs="*", type=Path, default=[],
                    help="the searches' dataset folders (data_cache/<scenario>-<profile>-seed<r>), for the table of "
                         "what the data show (mean length, event rate); without them it shows the CE columns only")
    ap.add_argument("--data-facts", type=Path, default=None,
                    help="instead of --data: the data facts of an earlier verdict.json of the same searches (their "
                         "datasets are the same: a search's seed r draws its data), so they need not be built again")
    ap.add_argument("--regime", action="store_true",
                    help="the verdict in the paper's regime (the overconfident profile's replications), as declared in "
                         "focus_tune/replicate/regime_design.py; --docs then rewrites the pages' regime block")
    args = ap.parse_args(argv)
    if args.regime:
        return _regime_main(ap, args)
    if args.data and args.data_facts:
        ap.error("--data and --data-facts say the same: give one of them")
    replications, folders = _read_replications(ap, args.folders)
    v = verdict(replications)
    v["search_times"] = search_times(folders)
    args.out.mkdir(parents=True, exist_ok=True)
    plot(v, args.out / "verdict.png")
    missing = [NAMES[g] for g in SCENARIOS if g not in v["scenarios"]]
    pending = ([f"Not searched yet: {', '.join(missing)}."] if missing else []) + (
        ["With R < 2 a scenario has no interval and no test: its row is one search's paired differences."]
        if any(r["runs"] < 2 for r in v["scenarios"].values()) else [])
    text = ["# The verdict across scenarios", "", *markdown(v), "", *pending, *([""] if pending else []), *notes(v), "",
            "![paired differences per scenario](verdict.png)", "",
            "## Equivalence, headroom and the pooled estimate", "", *equivalence_markdown(v), "",
            "*Headroom*: `none`'s test ECE above the oracle's (the best image-only simulator, scored with the same "
            "estimator, M and items), mean over the searches. *Equivalent within ±x*: the 90 % t interval over the "
            "searches (two one-sided tests at 5 %) lies within ±x. The declared margin is a quarter of the median "
            "headroom (focus_tune/replicate/regime_design.py). Coverage is counted against the oracle's own coverage "
            "of I_0.9 in the same search (a discrete T covers at 0.90-0.94, not 0.9). Holm over its own six: the "
            "smallest Holm-adjusted p over the scenario's six verdict primaries alone.", ""]
    v["frame"] = frame_facts(replications)
    if args.data_facts:
        earlier = json.loads(args.data_facts.read_text())
        if "data" not in earlier:
            ap.error(f"{args.data_facts}: no 'data' (a verdict.json written with --data)")
    v["data"] = earlier["data"] if args.data_facts else data_facts(args.data)
    v["split_association"] = split_association(replications, v["data"])
    used = {s: d["datasets"] for s, d in v["data"].items()}
    text += ["## What the data show", "", *facts_markdown(v["frame"], v["data"]), "",
             "The test split's min(T, L) (T: the first entry of the event), the validation split's beside it (where "
             "the temperature and the conformal level are fitted: a fix transfers as far as the two splits are alike), "
             "and the share of items whose event falls within L, over the datasets named below (one per search; "
             "a search's seed r is its data's "
             "seed r); test marginal CE in nats per entry, mean over the searches. *Frame tells*: image-blind's "
             "CE minus the exact process's, the most a model can gain from the frame; *`none` reads*: the share "
             "of it `none` gains. Datasets: "
             + ("; ".join(f"{NAMES.get(s, s)}: {', '.join(d)}" for s, d in used.items()) or "none given") + ".", "",
             *association_markdown(v["split_association"]), ""]
    (args.out / "verdict.json").write_text(json.dumps(v, indent=1))
    if v["search_times"]:
        text += ["## The searches' wall time", "", *times_markdown(v["search_times"]), "",
                 "Each search alone on the machine named, or beside other work there: the times of one session "
                 "are comparable only within it.", ""]
    (args.out / "verdict.md").write_text("\n".join(text))
    try:  # every file checked before any is written
        updated = {doc: update_doc(doc.read_text(), v, str(doc)) for doc in args.docs}
    except (OSError, ValueError) as e:
        ap.exit(2, f"verdict: {e}; no file was changed\n")
    for doc, new_text in updated.items():
        doc.write_text(new_text)
    print("\n".join(markdown(v)))
    print(f"wrote {args.out / 'verdict.md'}, verdict.json, verdict.png")
    return 0


def _read_replications(ap, folders: list[Path]) -> tuple[dict[str, dict], dict[str, Path]]:
    """Each folder's replication.json by its scenario, and the folder of each scenario."""
    replications, where = {}, {}
    for folder in folders:
        path = folder / "replication.json"
        if not path.exists():
            ap.error(f"{path}: no replication.json (run python -m focus_tune.replicate first)")
        summary = json.loads(path.read_text())
        scenario = scenario_of(summary, folder)
        replications[scenario], where[scenario] = summary, folder
    return replications, where


def _regime_main(ap, args) -> int:
    """``verdict --regime``: verdict.md, verdict.json and verdict.png of the regime's design."""
    replications, where = _read_replications(ap, args.folders)
    v = regime_verdict(replications)
    v["grid_reach"] = grid_reach(where)
    args.out.mkdir(parents=True, exist_ok=True)
    plot(v, args.out / "verdict.png", REGIME_COMPARISONS)
    table = regime_markdown(v)
    text = ["# The verdict in the paper's regime", "", *table, "",
            "Declared before the first search (focus_tune/replicate/regime_design.py): the primary comparison, "
            "time-dependent − `none` on the test marginal ECE, per search the mean over its paired final seeds, its "
            f"95 % t interval over the searches and k/R below zero; Holm over the {v['primary_tests']} scenarios' "
            "primaries; *equivalent*: its 90 % interval within ± a quarter of the scenario's headroom (`none`'s ECE "
            "minus the oracle's, median over the searches). The other comparisons are secondary (intervals, no "
            "test); coverage counts the searches where time-dependent's is closer to the oracle's own coverage than "
            "`none`'s. The paper's values are its Tables 2 and 6 (another scale, other data).", "",
            "![paired differences per scenario](verdict.png)", "",
            "## Does the lambda grid reach?", "",
            "Every choice of a time-dependent stage (stage 1..k1 or the joint stage) and of the constant stage over "
            "the kept searches, at its grid's largest lambda (the top), its smallest (the bottom), or between; and the "
            "searches in which some time-dependent stage chose the top. Most choices at the top would say the grid is "
            "too narrow for the profile's models; with a grid of two values every choice is at an edge, so the share "
            "at the top is the reading, not the count of searches with one.", "",
            *grid_reach_markdown(v["grid_reach"]), ""]
    (args.out / "verdict.json").write_text(json.dumps(v, indent=1))
    (args.out / "verdict.md").write_text("\n".join(text))
    try:
        updated = {doc: replace_block(doc.read_text(), table, str(doc), REGIME_START, REGIME_END) for doc in args.docs}
    except (OSError, ValueError) as e:
        ap.exit(2, f"verdict: {e}; no file was changed\n")
    for doc, new_text in updated.items():
        doc.write_text(new_text)
    print("\n".join(table))
    print(f"wrote {args.out / 'verdict.md'}, verdict.json, verdict.png")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
