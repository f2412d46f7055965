"""What a finished search leaves: the report (tables, figures, efficiency), the final
models, and their records in MLflow."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import TYPE_CHECKING

from ..config.space import override_text
from ..durable import fsync_path, write_atomic
from ..names import HEADLINE_METRICS, REFERENCE_HEADLINE
from ..procedure.job import PER_ENTRY_FILE
from ..sim.model_io import DataInfo

if TYPE_CHECKING:  # types only: the modules behind them are imported where they are used
    from ..config.space import SearchConfig
    from ..data.dataset_reader import Dataset
    from ..data.manifest import Manifest
    from ..procedure.plan import SearchPlan, StageWinner
    from ..procedure.state import SearchState
    from ..report.writer import Report
    from ..tracking import Tracker
    from .cli import SearchOptions


def read_per_entry(checkpoint: str | None) -> dict:
    """The per-entry arrays a final wrote into its reported checkpoint ({} when none)."""
    if not checkpoint:
        return {}
    from ray import tune

    with tune.Checkpoint(checkpoint).as_directory() as d:
        path = Path(d) / PER_ENTRY_FILE
        return json.loads(path.read_text()) if path.exists() else {}


def final_rows(plan: SearchPlan, state: SearchState) -> tuple[dict[str, list[dict]], list[int]]:
    """family -> one test result per seed (per-entry arrays included), and the seeds."""
    finals, seeds = {}, set()
    for family, by_seed in plan.finals(state.results).items():
        rows = []
        for seed, tid in sorted(by_seed.items()):
            seeds.add(seed)
            if tid in state.finals:
                rows.append({**state.finals[tid], **read_per_entry(state.checkpoints.get(tid))})
        finals[family] = rows
    return finals, sorted(seeds)


def write_outputs(cfg: SearchConfig, opts: SearchOptions, plan: SearchPlan, state: SearchState, dataset: Dataset,
                  folder: Path, tracker: Tracker, winners: dict[str, StageWinner]) -> Report:
    from ..names import SELECT_NAMES
    from ..procedure import cost
    from ..procedure.recommend import recommend
    from ..report import search_trace, write_report
    from ..scoring.baselines import with_baselines
    from ..scoring.evaluation import Scoring

    finals, seeds = final_rows(plan, state)
    # temperature-scaled, image-blind, image-Bayes, oracle, exact: scored like the finals
    finals = with_baselines(finals, dataset, Scoring.of(cfg.train), seeds)
    # the model to use, by the validation evidence alone (focus_tune.procedure.recommend)
    recommendation = recommend(validation_scores(plan, state), finals, cfg.train.select_by, cfg.train.tie_se,
                               cfg.train.alpha, model_seed=min(seeds) if seeds else None)
    schedules = {family: str(winners[stage].schedule)
                 for family, stage in (("none", "none"), ("constant", "constant"), ("time-dependent", "joint"))}
    m = dataset.manifest
    out = folder / "report"
    # The search itself (every stage's candidates, each family's validation ECE over epochs) in the report.
    search = search_trace(plan, state.results, tracker.metric_histories("val/ece"),
                          score=f"validation marginal {SELECT_NAMES[cfg.train.select_by]}", stopped=state.stopped)
    report = write_report(out, opts.scenario, opts.profile, finals, schedules, m.class_names, m.condition_class,
                          search=search, data_notes=data_notes(dataset, finals) + recipe_notes(opts),
                          overrides=[override_text(k, v) for k, v in opts.overrides],
                          recommendation=recommendation.lines if recommendation else ())
    report.recommendation = recommendation
    eff = cost.efficiency(plan, state.results, state.trial_seconds, sum(state.fit_seconds), state.slots)
    eff["posthoc_seconds"] = posthoc_costs(state.posthoc_seconds)
    write_atomic(out / "efficiency.json", json.dumps(eff, indent=1))
    report.summary["search/efficiency"] = eff["ratio"]
    for file in out.iterdir():  # durable before MLflow and the user are told it exists
        if file.is_file():
            fsync_path(file)
    fsync_path(out)
    tracker.log_artifacts(out, "report")
    tracker.log_search(tags={**{f"schedule.{f}": s for f, s in schedules.items()},
                             "mlflow.note.content": search_description(opts, schedules, folder)},
                       params={"chosen_schedule": schedules["time-dependent"]})
    for stage, winner in winners.items():
        tracker.tag_winner(winner.trained_as, stage)
    log_decisions(tracker, search)
    with_model = log_final_models(plan, state, cfg, DataInfo.of(m), tracker, folder, m, report.summary,
                                  register=opts.register)
    tracker.log_search(metrics=parent_metrics(report.summary, without_model=set(schedules) - with_model))
    tracker.log_table(summary_table(report.summary), "report/tables/test_metrics.json")
    return report


def validation_scores(plan: SearchPlan, state: SearchState) -> dict[str, dict[int, float | None]]:
    """family -> final seed -> its last epoch's validation score (the one the stages decide by),
    for the recommendation (focus_tune.procedure.recommend). The retrained seeds only, where a family has
    two or more: the search seed's final is its stage's winner, whose score is the lowest of its
    stage's candidates on these very items (optimistic, and more so the more candidates a
    family's stages had)."""
    sources = {t.trial_id: t.source_trial for t in plan.all_trials(state.results)}
    out = {}
    for family, by_seed in plan.finals(state.results).items():
        scores = {seed: state.results.get(tid) for seed, tid in by_seed.items()}
        retrained = {seed: v for seed, v in scores.items() if not sources.get(by_seed[seed])}
        out[family] = retrained if len(retrained) >= 2 else scores
    return out


def recipe_notes(opts: SearchOptions) -> list[str]:
    """The recipe's caveat on one's own data (:func:`.checks.recipe_note`, also printed when the
    search starts), as a Data note of the report."""
    from .checks import recipe_note

    note = recipe_note(opts)
    return [f"Recipe: {note}."] if note else []


# A calibrated predictor's test ECE on n items, mean and SD ~ (a / sqrt(n), b / sqrt(n)): the
# worked example's chain, 10 bins (benchmarks/bench_small_data.py: 0.0644 and 0.0090 at 180 items,
# 0.0336 and 0.0047 at 640).
ECE_FLOOR = (0.86, 0.12)


def data_notes(dataset: Dataset, rows: dict[str, list[dict]]) -> list[str]:
    """What the report says of the data beyond its tables: the reference rows this dataset
    cannot have and why, the split sizes of one's own data with the ECE a calibrated predictor
    reads at that test size, and how much of its test split was censored (nothing for a
    built-in scenario's generated data, which has every row and no censoring)."""
    from ..data import BUILTIN_SCENARIOS
    from ..scoring.baselines import EXACT, IMAGE_BAYES, ORACLE

    m, test = dataset.manifest, dataset.test
    why = {
        IMAGE_BAYES: "needs the hidden truth behind each image (procedural FaceMed's apparent ages)",
        ORACLE: "needs the true sequence process (a generator's player model or FaceMed's ages)",
        EXACT: "needs the true probabilities (a generator's exact marginals or process)",
    }
    notes = [f"Row `{row}` is absent: it {reason}, which this dataset does not carry."
             for row, reason in why.items() if not rows.get(row)]
    if m.scenario not in BUILTIN_SCENARIOS:  # one's own data: how far its sizes carry
        sizes = {s: len(getattr(dataset, s)) for s in ("train", "val", "test")}
        n = sizes["test"]
        notes.append(f"Split sizes: train {sizes['train']}, validation {sizes['val']}, test {n} items. A calibrated "
                     f"predictor's ECE is not 0 at this size: on the worked example's chain it is about "
                     f"{ECE_FLOOR[0] / math.sqrt(n):.3f} ± {ECE_FLOOR[1] / math.sqrt(n):.3f} (mean ± SD over draws "
                     f"of {n} test items; docs/DATA.md, 'How small'): read the rows against each other and the "
                     "references, not against 0.")
    if m.censored:
        censored = int(test.censored.sum())
        unobserved = int((~test.observed).sum())
        notes.append(f"Censoring: {censored} of {len(test)} test items are right-censored (their time to event is "
                     f"only known to exceed their last observed entry) and {unobserved} of {test.sequences.size} "
                     "(item, entry) pairs are unobserved. Every metric uses the observed pairs only, weighted by the "
                     "inverse probability of censoring: each (item, entry) pair of the entry-level metrics at "
                     "min(T, entry), each uncensored item of the time-to-event metrics at T (docs/METRICS.md, "
                     "'Censored items').")
        notes += censored_noise_notes(rows)
    return notes


def censored_noise_notes(rows: dict[str, list[dict]]) -> list[str]:
    """What censoring costs the numbers, from the test results' censored-data keys
    (focus_tune.scoring.metrics / evaluation on censored data): the positivity check's flag, the
    effective number of items behind the weighted metrics with the largest weight, and each
    time-to-event metric's sampling SE over the test items (the bootstrap of the first model
    row that has it: the items' noise, beside the tables' noise over seeds)."""
    from ..scoring.survival import positivity_note

    family, row = next(((f, r) for f in ("none", "constant", "time-dependent", "image-blind", "exact")
                        for r in rows.get(f, []) if "test/data/effective_items" in r), (None, None))
    if row is None:
        return []
    out = []
    entry = row.get("test/data/positivity")
    if entry is not None and math.isfinite(entry):
        out.append(f"Positivity: {positivity_note(int(entry))} (`n/a` in the tables).")
    value = lambda key: row.get(f"test/{key}", float("nan"))  # noqa: E731
    ses = ", ".join(f"{label} ± {value(f'interval/{key}_se'):.3f}" for label, key in
                    (("coverage", "coverage"), ("relative width", "relative_width"), ("relative MAE", "relative_mae"),
                     ("interval score", "interval_score"), ("CRPS", "crps"))
                    if math.isfinite(value(f"interval/{key}_se")))
    out.append(f"Censoring's noise: the weighted time-to-event metrics rest on about "
               f"{value('data/effective_items'):.0f} effective items "
               f"(coverage: {value('data/coverage_effective_items'):.0f}; Kish's (sum w)^2 / sum w^2, "
               f"largest weight {value('data/largest_weight'):.2f}), the entry-level ones on at least "
               f"{value('data/entry_effective_items'):.0f} at an entry."
               + (f" Sampling SE over the test items (bootstrap, Ĝ re-estimated; `{family}`'s first "
                  f"seed): {ses}." if ses else ""))
    return out


def search_description(opts: SearchOptions, schedules: dict[str, str], folder: Path) -> str:
    """The parent run's description in the MLflow UI: what the search chose and where to look."""
    chosen = "\n".join(f"- {family}: `{schedule}`" for family, schedule in schedules.items())
    return (f"The {opts.profile} search of **{opts.scenario}** (seed {opts.seed}). Chosen schedules:\n\n{chosen}\n\n"
            "Report: the artifacts `report/results.md` (test tables, reference rows, paired tests) and "
            f"`report/search.png` (every stage's candidates), also in `{folder.resolve() / 'report'}`. The trials are "
            "this run's child runs: filter with `tags.stage = \"stage1\"` (or `joint`, `constant`, ...), "
            "select them and press *Compare*.")


def headline(summary: dict[str, float], row: str, keys=HEADLINE_METRICS) -> dict[str, float]:
    """The headline test metrics of one row of the report (a family or a reference row),
    keyed ``<row>/test/<metric>`` as in ``summary``."""
    return {f"{row}/test/{k}": summary[f"{row}/test/{k}"] for k in keys if f"{row}/test/{k}" in summary}


def parent_metrics(summary: dict[str, float], without_model: set[str] = frozenset()) -> dict[str, float]:
    """What the search's parent run keeps as metrics: the headline of the trivial baseline
    (image-blind) and of the best achievable (exact), the search's own figures (``search/...``)
    and the headline of each family in ``without_model`` (a family's final model carries its
    own headline, logged on the parent linked to the model). Everything else is in the tables."""
    from ..scoring.baselines import EXACT, IMAGE_BLIND

    out = {k: v for k, v in summary.items() if k.startswith("search/")}
    for row in (IMAGE_BLIND, EXACT):
        out.update(headline(summary, row, REFERENCE_HEADLINE))
    for family in sorted(without_model):
        out.update(headline(summary, family))
    return out


def summary_table(summary: dict[str, float]) -> list[dict]:
    """The report's summary as table rows: per row of the report (family or reference) and
    test metric, its mean over the seeds and, where it was compared with ``none``, the
    paired p-value and its Holm adjustment."""
    from ..report.stats import P_KEYS

    rows: dict[str, dict] = {}
    for key, value in summary.items():
        if key.startswith("search/"):
            continue
        suffix = next((p for p in P_KEYS if key.endswith("/" + p)), None)
        base = key.removesuffix("/" + suffix) if suffix else key
        name, _, metric = base.partition("/test/")
        row = rows.setdefault(base, {"row": name, "metric": f"test/{metric}", "mean": None,
                                     **{p: None for p in P_KEYS}})
        row[suffix or "mean"] = value
    return list(rows.values())


def log_decisions(tracker: Tracker, search: dict) -> None:
    """Each stage decision on the parent run: a tag in words (``decision.<stage>``) and its
    score difference and standard error as metrics (``decision/<stage>/difference``, ``/se``)."""
    from ..report.trace import decision_text

    tags, metrics = {}, {}
    for stage in search["stages"]:
        decision = stage.get("decision")
        if not decision:
            continue
        tags[f"decision.{stage['stage']}"] = f"{stage['winner']}: {decision_text(decision)}"
        for key in ("difference", "se"):
            if decision.get(key) is not None:
                metrics[f"decision/{stage['stage']}/{key}"] = decision[key]
    tracker.log_search(tags=tags, metrics=metrics)


def log_final_models(plan: SearchPlan, state: SearchState, cfg: SearchConfig, data_info: DataInfo,
                     tracker: Tracker, folder: Path, manifest: Manifest, summary: dict[str, float],
                     register: str | None = None) -> set[str]:
    """Each family's final model of the search seed, without pickle (``model_io``: numpy
    weights + JSON), in ``<run>/models/<family>`` and as a logged model of the parent run
    with the family's headline test metrics (means over the seeds) from the report's
    ``summary`` (``<family>/test/...``: the parent run holds every family's, so the keys name
    the family), linked to the runs of the trial that trained it and of its final, and with ``register`` as
    a version of that registered model with the family as its alias. Its model.json also records what
    ``focus_tune.predict`` needs to use it without the dataset: the class names, the
    sequence length and the image shape. Returns the families logged."""
    import torch
    from ray import tune

    from ..sim.model_io import build_model, save_model
    from .trainable import load_checkpoint

    sources = {t.trial_id: t.source_trial for t in plan.all_trials(state.results)}
    logged = set()
    for family, by_seed in plan.finals(state.results).items():
        tid = by_seed[min(by_seed)]
        trained = sources.get(tid) or tid
        path = state.checkpoints.get(trained)
        if path is None:
            continue
        model = build_model(cfg.train, data_info)
        model.load_state_dict(load_checkpoint(tune.Checkpoint(path))["model"])
        saved = save_model(folder / "models" / family, model.eval().to(torch.float32), cfg.train, data_info,
                           extra={"family": family, "trial_id": trained, "scenario": manifest.scenario,
                                  "class_names": list(manifest.class_names), "length": manifest.length,
                                  "image_shape": list(manifest.image_shape)})
        model_id = tracker.log_model(saved, name=f"model-{family}", metrics=headline(summary, family))
        for run in dict.fromkeys((trained, tid)):  # the trial that trained it, and its final's run
            tracker.link_model(run, model_id)
        logged.add(family)
        if register:  # one version per family, aliased by the family: models:/<name>@time-dependent
            version = tracker.register_model(model_id, register, family)
            print(f"registered: models:/{register}@{family} (version {version})", flush=True)
    return logged


def posthoc_costs(seconds: dict[str, dict]) -> dict[str, dict]:
    """{row: {"mean", "finals"}}: the seconds of validation sampling each temperature row took
    per 'none' final (its whole cost: no training), from the search state."""
    rows: dict[str, list[float]] = {}
    for by_row in seconds.values():
        for row, s in by_row.items():
            rows.setdefault(row, []).append(float(s))
    return {row: {"mean": sum(v) / len(v), "finals": len(v)} for row, v in rows.items()}
