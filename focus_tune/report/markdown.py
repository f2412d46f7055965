"""The text of results.md and the plain-text table printed at the end of a run."""

from __future__ import annotations

import math
from typing import Mapping, Sequence

import numpy as np

from ..names import TEMPERATURE_ROWS
from ..scoring.metrics import LABEL_REDRAWS, LABEL_SD_KEYS
from .columns import (
    BASELINE_SCHEDULES,
    BASELINES,
    COMPARED,
    COMPARED_COLUMNS,
    CONDITIONAL,
    CONFORMAL_COLUMNS,
    COVERAGE_TARGET,
    INTERVAL,
    MARGINAL,
    NA,
    Column,
    conformal_base,
    group_columns,
    is_conformal,
)
from .stats import differences, one_sample_test, to_float
from .tables import all_na, markdown_table, plain_table, shown_columns
from .trace import search_lines

TEMPERATURE_KEY = "test/temperature_pooled"  # the temperature a temperature-scaled row used (the rest's, per entry)
TEMPERATURE_ENTRY_KEY = "test/temperature_"  # + i: entry i's own temperature in a time-dependent temperature row

BASELINE_NOTE = (
    "Rows. Every sampled row draws M sequences per test item and goes through the models' own "
    "estimator and metrics (same M, same bins), so it carries the same Monte Carlo noise: "
    "*temperature-scaled* is the `none` final of each seed with one temperature chosen on a grid by "
    "the validation sampled ECE (as the search chooses lambda, with its tie rule: the temperature closest to 1 "
    "within the tie margin of the lowest), no retraining, tested with the unscaled row's uniforms; "
    "*time-dependent temperature* chooses a temperature per entry the way the schedule chooses lambda_i "
    "(T_1..T_k1 one entry at a time, then one T for the rest), applied to each entry's logits in the "
    "sampler; *image-blind* draws each item's M sequences from the training sequences "
    "(no image); *image-Bayes* (procedural FaceMed) draws an age from its posterior given the face's "
    "apparent age, then the chain: the best any image-only simulator can do, and so the target there; "
    "*oracle* samples the true process given the hidden truth (on the Atari data the frame fixes the "
    "player's chain, so the oracle is the image-only target there); *exact* scores the true probabilities "
    "without sampling: its ECE is the floor that this many test items put under the paper's ECE. "
    "The reference rows are not ranked. "
    "*ECE debiased*: the calibration error with the finite-data bias removed (about 0 for a calibrated "
    "predictor; it can be negative); *overconfidence*: mean top-class confidence minus accuracy "
    "(positive: overconfident). *Interval score* (Gneiting & Raftery 2007) charges width and misses, "
    "*CRPS* scores the whole time-to-event distribution; both are relative to mean T, lower is better. "
    "*leak*: the fraction of sampled sequences that leave the event class after reaching it; "
    "*p(stay)*: the model's mean teacher-forced p(event -> event) on the test sequences."
)


def label_noise_lines(finals: Mapping) -> list[str]:
    """One paragraph on how much the test labels alone move a calibrated predictor's scores
    (the ``exact`` row's label-noise keys, :func:`focus_tune.scoring.metrics.label_noise`); [] without them."""
    row = (finals.get("exact") or [{}])[0]
    sd_ece, sd_sq = (to_float(row.get(k)) for k in LABEL_SD_KEYS)
    if not (math.isfinite(sd_ece) and math.isfinite(sd_sq)):
        return []
    return [f"Label noise. With the test items fixed and their label sequences redrawn {LABEL_REDRAWS} times from "
            f"the true process, the exact probabilities' ECE varies with SD {sd_ece:.4f} and their debiased squared "
            f"ECE with SD {sd_sq:.1e}: a calibrated predictor reads *ECE debiased* 0 ± {math.sqrt(sd_sq):.4f} "
            "on these items. Every row is scored on the same stored labels, so read a row against `exact` "
            "(and the families against each other), not against 0.", ""]


def _header_lines(scenario: str, profile: str, overrides: Sequence[str] = ()) -> list[str]:
    """The title and how to read the tables; ``overrides``: the search's ``--set KEY=VALUE``
    texts, named under the title (nothing when there are none)."""
    changed = ["Search space changed on the command line: " + ", ".join(f"`--set {o}`" for o in overrides) + ".", ""]
    return [
        f"# foCus regularization search: {scenario} ({profile} profile)",
        "",
        *(changed if overrides else []),
        "Test set, final models (last epoch) retrained once per seed. Each cell: mean ± standard "
        "error over seeds (SE = sample standard deviation, ddof=1, / sqrt(n)); a single seed shows "
        "the mean alone, `n/a` means no value, and `(n=k)` marks a cell with values from only k seeds. "
        f"Best mean per column among the models in **bold**: lowest, except AUC (highest) and coverage "
        f"(closest to {COVERAGE_TARGET}; signed and debiased errors: closest to 0); the reference rows "
        "(image-blind, image-Bayes, oracle, exact) are not ranked.",
        "",
    ]


def _schedule_lines(families: Sequence[str], finals: Mapping, schedules: Mapping[str, str]) -> list[str]:
    lines = ["## Chosen schedules", "", "| family | schedule | seeds |", "|---|---|---:|"]
    for f in families:
        schedule = str(schedules.get(f, BASELINE_SCHEDULES.get(f, NA))).replace("|", "\\|")
        chosen = [chosen_temperatures(r) for r in finals[f]]
        if any(chosen):
            schedule += "; T per seed: " + ", ".join(chosen)
        lines.append(f"| {f} | `{schedule}` | n={len(finals[f])} |")
    return lines + [""]


def chosen_temperatures(row: Mapping) -> str:
    """A temperature row's chosen temperatures as text: "0.9" (one T), or "1.1/1.25/1/rest 0.9"
    (T_1..T_k1, ``test/temperature_<i>``, then the rest's); "" for a row without one."""
    entries = sorted((int(k.rsplit("_", 1)[1]), to_float(v)) for k, v in row.items()
                     if k.startswith(TEMPERATURE_ENTRY_KEY) and k.rsplit("_", 1)[1].isdigit())
    rest = to_float(row.get(TEMPERATURE_KEY))
    if not math.isfinite(rest):
        return ""
    if not entries:
        return f"{rest:g}"
    return "/".join(f"{t:g}" for _, t in entries) + f"/rest {rest:g}"


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
    lines += markdown_table(columns, families, finals) + [""]
    if all_na(columns, families, finals):
        lines += [empty_note, ""]
    return lines


def difference_lines(families: Sequence[str], finals: Mapping) -> list[str]:
    """The 'Differences from `none`' section: paired mean differences, p-values and Holm-adjusted
    p-values ([] if none)."""
    diffs = differences(families, finals)
    compared = [f for f in COMPARED if f in families and any(k.startswith(f + "/") for k in diffs)]
    if not compared:
        return []
    cols = [c for c in COMPARED_COLUMNS if any(f"{f}/{c.key}" in diffs for f in compared)]
    n_tests = sum(math.isfinite(d.p) for d in diffs.values())
    lines = ["## Differences from `none`", "",
             "Mean difference (family - none) over the seeds the two share, the two-sided paired "
             "t-test p-value (seed s of every family starts from the same weights, batch order and "
             "Monte Carlo uniforms) and, after it, the p-value Holm-adjusted over the "
             f"{n_tests} tests of this table; a difference is significant at 0.05 only where the "
             f"adjusted value is below 0.05. With {_pairs_text(diffs)} seeds a test has little power: a large "
             "p says the seeds do not separate the families, not that they are equal.", "",
             "| family | " + " | ".join(c.label for c in cols) + " |",
             "|---|" + "---:|" * len(cols)]
    same = {f: identical_seeds(finals[f], finals["none"], [c.key for c in cols]) for f in compared}
    for f in compared:
        cells = []
        for c in cols:
            d = diffs.get(f"{f}/{c.key}")
            if d is None:
                cells.append(NA)
                continue
            mark = "**" if d.holm < 0.05 else ""
            flag = DEGENERATE_MARK if same[f] else ""
            cells.append(f"{mark}{d.diff:+.{c.decimals}f}{mark} (p = {d.p:.3f}{flag}, Holm {d.holm:.2f})"
                         if math.isfinite(d.p) else f"{d.diff:+.{c.decimals}f} (p n/a)")
        lines.append(f"| {f} | " + " | ".join(cells) + " |")
    lines += degenerate_notes(compared, same, diffs, cols)
    lines += ["", f"What these seeds can detect: the smallest true difference that the paired test finds "
              f"4 times in 5 (two-sided 0.05, before Holm), from the observed spread of the per-seed "
              f"differences and {_pairs_text(diffs)} pairs (a rough estimate itself with few seeds; "
              "more seeds: `--final-seeds N`); n/a where the differences do not vary.", "",
              "| family | " + " | ".join(c.label for c in cols) + " |", "|---|" + "---:|" * len(cols)]
    for f in compared:
        cells = []
        for c in cols:
            d = diffs.get(f"{f}/{c.key}")
            shown = d is not None and math.isfinite(d.p) and math.isfinite(d.detectable)
            cells.append(f"{d.detectable:.{c.decimals}f}" if shown else NA)
        lines.append(f"| {f} | " + " | ".join(cells) + " |")
    return lines + [""]


DEGENERATE_MARK = "†"


def identical_seeds(rows: Sequence[Mapping], base: Sequence[Mapping], keys: Sequence[str]) -> list:
    """The seeds of ``rows`` whose row equals ``base``'s row of the same seed on every key of
    ``keys`` that both hold finite (at least one): there the family's model is none's (the
    temperature-scaled row where T = 1), and every paired difference is exactly 0."""
    by_seed = {row.get("seed"): row for row in base}
    out = []
    for row in rows:
        other = by_seed.get(row.get("seed"))
        if other is None:
            continue
        values = [(to_float(row.get(k)), to_float(other.get(k))) for k in keys]
        values = [(a, b) for a, b in values if math.isfinite(a) and math.isfinite(b)]
        if values and all(a == b for a, b in values):
            out.append(row.get("seed"))
    return out


def degenerate_notes(compared: Sequence[str], same: Mapping[str, list], diffs: Mapping, cols) -> list[str]:
    """A note under the differences table for each family with seeds identical to none's: its
    paired tests are degenerate (the zero differences leave the sign of the other seeds' to
    decide the t statistic: with one other seed |t| = 1 whatever the metric, the same p on every
    metric, p = 0.423 with 3 seeds); the family's cells are marked with DEGENERATE_MARK."""
    notes = []
    for f in compared:
        if not same[f]:
            continue
        pairs = max((d.pairs for c in cols if (d := diffs.get(f"{f}/{c.key}")) is not None), default=0)
        why = " (T = 1 there: temperature scaling left none's model as it was)" if f in TEMPERATURE_ROWS else ""
        seeds = ", ".join(str(s) for s in same[f])
        others = pairs - len(same[f])
        if others <= 0:
            reads = "no difference to test (p n/a)"
        elif others == 1:
            reads = (f"the one other seed alone: |t| = 1 on every metric, so p is the same on every metric "
                     f"(p = {_p_of_t_one(pairs):.3f} with {pairs} seeds) whatever the difference")
        else:
            reads = f"the other {others} seeds alone, with too many zeros for a t-test's normal differences"
        notes.append(f"{DEGENERATE_MARK} Degenerate paired test: {len(same[f])} of the {pairs} seeds of {f} "
                     f"(seed {seeds}) are identical to none's on every metric{why}, so their differences are "
                     f"exactly 0 and the test reads {reads}; its p says how many seeds differ, not how much "
                     "the metric does.")
    return ["", *notes] if notes else []


def _p_of_t_one(n: int) -> float:
    """The two-sided p of t = 1 with n - 1 degrees of freedom: what a paired test reads when all
    but one of n differences are 0 (mean x/n, SD |x|/sqrt(n), t = 1)."""
    return one_sample_test(np.array([1.0] + [0.0] * (n - 1)))[1]


def _pairs_text(diffs: Mapping) -> str:
    """The number of paired seeds behind the differences, e.g. "3" or "2-3"."""
    pairs = sorted({d.pairs for d in diffs.values()})
    return str(pairs[0]) if len(pairs) == 1 else f"{pairs[0]}-{pairs[-1]}"


CONFORMAL_NOTE = (
    "Each `+conformal` row is the row above it with its I_{target} replaced by a split conformal "
    "interval: the central interval of the same Monte Carlo time-to-event distribution at the level q "
    "where {target} of the validation items' true times fall inside (the ceil((n + 1) {target})-th smallest "
    "of their scores, scored by the same estimator and M as the test; docs/METRICS.md, 'Conformal "
    "intervals'). When validation and test items are exchangeable its coverage is at least {target} "
    "over the draw of the splits (at most {target} + 1/(n + 1) for continuous scores; a discrete time "
    "can add more); under censoring the scores are IPCW-weighted and the guarantee is asymptotic only. "
    "The calibration moves the interval alone: relative MAE and CRPS are the row's own. A level "
    "above {target} widens the interval, below narrows it."
)


def conformal_lines(families: Sequence[str], finals: Mapping) -> list[str]:
    """The section of the ``+conformal`` rows, each beside the row it calibrates ([] without them)."""
    calibrated = [f for f in families if is_conformal(f)]
    if not calibrated:
        return []
    rows = [r for f in calibrated for r in (conformal_base(f), f) if r in finals and finals[r]]
    columns = shown_columns(CONFORMAL_COLUMNS, rows, finals)
    items = sorted({int(to_float(r.get("test/interval/conformal_items"))) for f in calibrated for r in finals[f]
                    if math.isfinite(to_float(r.get("test/interval/conformal_items")))})
    n = NA if not items else str(items[0]) if len(items) == 1 else f"{items[0]}-{items[-1]}"
    spread = ""
    if items:  # the coverage given one calibration split: Beta(k, n + 1 - k), k = ceil((n + 1) alpha)
        sd = math.sqrt(COVERAGE_TARGET * (1 - COVERAGE_TARGET) / (items[0] + 2))
        spread = (f" Given one validation split, the coverage itself varies around its guarantee with SD about "
                  f"{sd:.3f} at {items[0]} items (the split's draw), plus the test items' own noise: a row below "
                  f"{COVERAGE_TARGET} by about that much is the guarantee at work, not a failure of it.")
    return [f"## Time to event, I_{COVERAGE_TARGET} calibrated by split conformal on the validation split "
            f"({n} items)", "", *markdown_table(columns, rows, finals), "",
            CONFORMAL_NOTE.format(target=COVERAGE_TARGET) + spread, ""]


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


def results_markdown(scenario: str, profile: str, families: Sequence[str], skipped: Sequence[str], finals: Mapping,
                     schedules: Mapping[str, str], condition: str, search: Mapping | None = None,
                     data_notes: Sequence[str] = (), overrides: Sequence[str] = (),
                     recommendation: Sequence[str] = ()) -> str:
    """The text of results.md (see :func:`focus_tune.report.write_report`)."""
    everything, families = families, [f for f in families if not is_conformal(f)]
    marginal = shown_columns(MARGINAL, families, finals)
    lines = (_header_lines(scenario, profile, overrides) + _schedule_lines(families, finals, schedules)
             + _skipped_lines(skipped))
    if data_notes:
        lines += ["## Data", ""] + [line for note in data_notes for line in (note, "")]
    lines += _section("Marginal", marginal, families, finals, "No marginal results.")
    if any(f in BASELINES for f in families):
        lines += [BASELINE_NOTE, ""]
    lines += label_noise_lines(finals)
    lines += _section(f"Conditional on entry 1 = {condition}", CONDITIONAL, families, finals,
                      "No conditional results: the condition was not evaluated or no test item meets it.")
    lines += _section(f"Time to event, I_{COVERAGE_TARGET}", shown_columns(INTERVAL, families, finals), families,
                      finals, "No interval results.")
    groups = group_columns({f: finals[f] for f in families})
    if groups:
        lines += _section(f"Coverage of I_{COVERAGE_TARGET} by group (age at the image)", groups, families, finals,
                          "No group results.")
    lines += conformal_lines(everything, finals)
    lines += difference_lines(families, finals)
    if recommendation:
        lines += ["## Which model to use", ""] + [line for text in recommendation for line in (text, "")]
    if search is not None:
        lines += search_lines(search)
    return "\n".join(lines + _figure_lines())


def plain_text(scenario: str, profile: str, families: Sequence[str], finals: Mapping) -> str:
    """The marginal and interval means ± SE as aligned plain text, for the end of a CLI run."""
    everything, families = families, [f for f in families if not is_conformal(f)]
    lines = [f"foCus results: {scenario} ({profile}), test set, mean±SE over seeds", ""]
    lines += plain_table("Marginal", shown_columns(MARGINAL, families, finals), families, finals) + [""]
    lines += plain_table(f"Time to event, I_{COVERAGE_TARGET}", shown_columns(INTERVAL, families, finals), families,
                         finals)
    calibrated = [r for f in everything if is_conformal(f) for r in (conformal_base(f), f) if finals.get(r)]
    if calibrated:
        lines += [""] + plain_table(f"Time to event, I_{COVERAGE_TARGET} calibrated by split conformal (validation)",
                                    shown_columns(CONFORMAL_COLUMNS, calibrated, finals), calibrated, finals)
    return "\n".join(lines) + "\n"
