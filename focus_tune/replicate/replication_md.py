"""replication.md: the replication's tables, from :func:`focus_tune.replicate.analysis.summarize`."""

from __future__ import annotations

import math

from ..report.columns import COMPARED_COLUMNS, COVERAGE_TARGET, ROWS
from .analysis import MODELS, PRIMARY


def fmt(x: float, digits: int = 4) -> str:
    return "n/a" if x is None or not math.isfinite(x) else f"{x:.{digits}f}"


def markdown(scenario: str, profile: str, s: dict, search_args: list[str], figure: str | None = None,
             data: str | None = None) -> str:
    """The text of replication.md; ``data``: the dataset folder every search trained on (else
    each seed's built-in data)."""
    seeds = s["seeds"]
    label = {c.key: c.label for c in COMPARED_COLUMNS}
    R = s["runs"]
    which = f"--data {data}" if data else f"--game {scenario}"
    drawn = ("the data is the same for every run; the seed draws the initial weights, batch order and Monte "
             "Carlo draws" if data else "the seed also draws the dataset")
    lines = [f"# Replication: {scenario} ({profile}), R = {R} searches (seeds {', '.join(map(str, seeds))})", "",
             f"Each run: `python -m focus_tune.search {which} --profile {profile} --seed r"
             + (" " + " ".join(search_args) if search_args else "") + f"`; {drawn}.", ""]
    if s.get("missing_seeds"):
        lines += [f"Not finished (not counted): seeds {', '.join(map(str, s['missing_seeds']))}.", ""]
    if figure:
        lines += [f"![paired differences to none, run by run]({figure})", ""]
    lines += regime_lines(s.get("regime"), R)
    lines += ["## Chosen schedules", "", "| family | schedule | runs |", "|---|---|---:|"]
    for family, counts in s["schedules"].items():
        lines += [f"| {family} | `{sched}` | {n}/{R} |" for sched, n in counts]
    d = s["decisions"]
    lines += ["", "## Stage decisions", "",
              f"{d['count']} decisions between two or more candidates; {d['ties']} went to a less penalized "
              f"candidate by the tie rule; {d['within_1se']} were within 1 SE and {d['within_2se']} within 2 SE "
              f"of their closest rival (median {fmt(d['median_z'], 1)} SE).", "",
              "Agreement across runs of the decisions whose candidates are the same in every run "
              "(the modal choice and the share of runs that made it, of the runs that could: a rule "
              "that reads the validation scores of every candidate has them only from a search whose "
              "MLflow store or kept validation.json is at hand):", "",
              "| stage | rule | modal choice | share | runs |", "|---|---|---|---:|---:|"]
    for stage, rules in s["stability"].items():
        lines += [f"| {stage} | {rule} | `{v['modal']}` | {fmt(v['share'], 2)} | {v['runs']}/{s['runs']} |"
                  for rule, v in rules.items()]
    lines += ["", "## Which family is best, run by run", "",
              "Runs in which each family has the best mean over its final seeds (coverage: closest to "
              f"{COVERAGE_TARGET:g}; ECE debiased: closest to 0).", "",
              "| metric | " + " | ".join(MODELS) + " |", "|---|" + "---:|" * len(MODELS)]
    for key, counts in s["wins"].items():
        lines.append(f"| {label[key]} | " + " | ".join(f"{counts.get(f, 0)}/{R}" for f in MODELS) + " |")
    lines += ["", "## Means over runs", "",
              "Mean over runs of each row's mean over its seeds (± SD across runs); the baselines are "
              "scored like the models by the search's report (same estimator, M, bins).", "",
              "| row | " + " | ".join(label[k] for k in s["means"]) + " |", "|---|" + "---:|" * len(s["means"])]
    for f in ROWS:
        cells = [s["means"][k].get(f) for k in s["means"]]
        if any(cells):
            lines.append(f"| {f} | " + " | ".join(
                "n/a" if c is None else f"{fmt(c['mean'])} ± {fmt(c['sd_runs'])}" for c in cells) + " |")
    lines += ["", "## Pooled paired differences", "",
              "Per run, the mean over its seeds of the per-seed differences; over runs, the mean, a 95 % t "
              f"interval ({R - 1} degree{'' if R == 2 else 's'} of freedom), the runs below / above zero, "
              "the t-test p-value and "
              "its Holm adjustment over every row of this table; the primary endpoints (*) are "
              "also adjusted as their own family (" + ", ".join(label[k] for k in PRIMARY) + " of the searched "
              "families; time-dependent against temperature-scaled on ECE and against none +conformal on the "
              "interval score).", "",
              "| difference | metric | mean | 95 % CI | runs < 0 / > 0 | p | Holm p | Holm p, primary |",
              "|---|---|---:|---|---:|---:|---:|---:|"]
    for name, v in s["differences"].items():
        pair, key = name.split("/", 1)
        star = "*" if v["primary"] else ""
        lines.append(f"| {pair} | {label[key]}{star} | {fmt(v['mean'])} | [{fmt(v['low'])}, {fmt(v['high'])}] | "
                     f"{v['below_zero']} / {v['above_zero']} | {fmt(v['p'], 3)} | {fmt(v['holm'], 3)} | "
                     f"{fmt(v['holm_primary'], 3) if v['primary'] else ''} |")
    return "\n".join(lines) + "\n"


def regime_lines(reg: dict | None, R: int, name: str = "search seed") -> list[str]:
    """The regime section: how many searches kept it, and what each other one missed (``name``:
    the first column's heading, what a search's ``seed`` entry holds)."""
    if reg is None:
        return []
    lines = ["## The regime, search by search", "",
             f"**Kept in {reg['kept']} of {R} searches.** The checks (test set, each family's mean over its "
             "final seeds, one search at a time; `focus_tune/replicate/regime.py`): "
             + "; ".join(reg["checks"]) + ".", "", f"| {name} | kept | missed (family: value against its limit) |",
             "|---:|---|---|"]
    for r in reg["runs"]:
        missed = "; ".join(f"{m['check']} — {m['family']}: {fmt(m['value'], 3)} against {fmt(m['limit'], 3)}"
                           for m in r["missed"])
        lines.append(f"| {r['seed']} | {'yes' if r['kept'] else '**no**'} | {missed} |")
    return lines + [""]
