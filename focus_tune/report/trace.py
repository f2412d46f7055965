"""The search itself as plain JSON values (:func:`search_trace`) and its results.md section."""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

from ..names import FAMILIES, FAMILY_STAGE
from ..procedure.racing import Lost
from .columns import NA
from .stats import to_float

SEARCH_JSON = "search.json"


def _stage_x(stage: str, params: Mapping[str, Any]) -> dict[str, Any]:
    """The candidate's coordinates in its stage's panel: lambda (and k2 for the joint stage)."""
    if stage.startswith("stage"):
        return {"lambda": params.get(f"lambda_{stage.removeprefix('stage')}"), "k2": None}
    if stage == "joint":
        return {"lambda": params.get("lambda_all"), "k2": params.get("k2")}
    if stage == "constant":
        return {"lambda": params.get("lambda_const"), "k2": None}
    return {"lambda": None, "k2": None}


def search_trace(plan, results: Mapping[str, Any], histories: Mapping[str, Sequence] | None = None,
                 score: str = "validation marginal ECE", stopped: Mapping[str, Mapping] | None = None) -> dict:
    """What the search did, as plain JSON values: every stage's candidates with their
    selection score (named by ``score``), the chosen one and the decision (its rival, the
    score difference and its standard error, the rule that chose: see ``focus_tune.procedure.plan``),
    each candidate's ``se`` (of its difference from the chosen one; None where unknown),
    and each family's validation ECE over epochs for the seeds of its final models.

    ``plan`` is the search's :class:`focus_tune.procedure.plan.SearchPlan`, ``results`` its trial id ->
    score (None = failed), ``histories`` trial id -> [(epoch, val ECE), ...] (the MLflow
    child runs' ``val/ece``; see ``Tracker.metric_histories``). A candidate that the plan
    deduplicated (its schedule was trained by an earlier trial, e.g. k2 <= k1) carries the
    id of that trial in ``trained_as`` and its score. ``stopped``: the trainings racing
    stopped (the search state's, ``racing.Lost`` fields); their candidates have the status
    "stopped" and the race under ``stopped``.
    """
    stopped = stopped or {}
    stages = []
    winners = plan.winners(results)
    noise = plan.difference_se or (lambda a, b: None)
    for name, (candidates, winner) in plan.candidates(results).items():
        chosen = winners.get(name)
        rows = [{"trial_id": c.spec.trial_id, "trained_as": c.trained_as, "schedule": str(c.spec.schedule),
                 **_stage_x(name, c.spec.params), "penalty": float(sum(c.spec.schedule.values)),
                 "score": c.score, "status": "stopped" if c.trained_as in stopped else c.status,
                 "se": (noise(c.trained_as, chosen.trained_as)
                        if chosen and c.status == "ok" and c.trained_as != chosen.trained_as else None),
                 **({"stopped": dict(stopped[c.trained_as])} if c.trained_as in stopped else {})}
                for c in candidates]
        decision = None if chosen is None else {"rule": chosen.rule, "rival": chosen.rival,
                                                "difference": chosen.difference, "se": chosen.difference_se}
        stages.append({"stage": name, "winner": winner, "decision": decision, "candidates": rows})
    specs = {t.trial_id: t for t in plan.all_trials(results)}
    curves: dict[str, list[dict]] = {}
    for family, by_seed in plan.finals(results).items():
        for seed, tid in sorted(by_seed.items()):
            spec = specs.get(tid)
            trained = (spec.source_trial if spec is not None else None) or tid  # a reused search trial
            points = [(int(e), float(v)) for e, v in (histories or {}).get(trained, ()) if math.isfinite(to_float(v))]
            curves.setdefault(family, []).append({"seed": int(seed), "trial_id": trained,
                                                  "epochs": [e for e, _ in points],
                                                  "val_ece": [v for _, v in points]})
    chosen = {family: str(winners[FAMILY_STAGE[family]].schedule)
              for family in FAMILIES if FAMILY_STAGE[family] in winners}
    return {"k1": plan.grid.k1, "seed": plan.seed, "length": plan.length, "score": score, "tie_se": plan.tie_se,
            "chosen": chosen, "stages": stages, "histories": curves}


def search_lines(search: Mapping) -> list[str]:
    """The results.md section: the figure and every candidate's validation ECE."""
    lines = ["## The search", "",
             "Every candidate of every stage against its lambda (and k2), scored by the validation "
             "marginal ECE of the search seed; stars: the chosen candidates (the path of the "
             "time-dependent schedule, and the constant family's); horizontal lines: the chosen "
             "constant and the unregularized model. Bottom: the validation ECE over epochs of the "
             "models behind each family's final rows, one thin line per seed.", "",
             "![the search](search.png)", ""]
    lines += decision_lines(search)
    lines += [f"| stage | candidate | lambda | k2 | {search.get('score', 'validation ECE')} | ± SE vs chosen | note |",
              "|---|---|---:|---:|---:|---:|---|"]
    for stage in search.get("stages", []):
        for row in stage["candidates"]:
            notes = []
            if row["trial_id"] == stage.get("winner"):
                notes.append("**chosen**")
            if row["trained_as"] != row["trial_id"]:
                notes.append(f"same schedule as `{row['trained_as']}`, trained once")
            if row["status"] == "stopped":
                notes.append(Lost(**row["stopped"]).text())
            elif row["status"] != "ok":
                notes.append(row["status"])
            lam = "" if row["lambda"] is None else f"{row['lambda']:g}"
            k2 = "" if row["k2"] is None else str(row["k2"])
            score = NA if row["score"] is None else f"{row['score']:.4f}"
            se = "" if row.get("se") is None else f"{row['se']:.4f}"
            lines.append(f"| {stage['stage']} | `{row['trial_id']}` | {lam} | {k2} | {score} | {se} | "
                         f"{'; '.join(notes)} |")
    return lines + [""]


def decision_text(decision: Mapping | None) -> str:
    """One decision in words: by how much the winner beat its closest rival, in SE."""
    if not decision or decision.get("rival") is None:
        return "only candidate" if decision else "undecided"
    diff, se = decision["difference"], decision.get("se")
    z = "" if not se else f" = {abs(diff) / se:.1f} SE"
    noise = "" if se is None else f" ± {se:.4f}"
    if decision["rule"].startswith("tie"):
        return f"tie → less penalty (the lowest, `{decision['rival']}`, was lower by {-diff:.4f}{noise}{z})"
    return f"lowest, by {diff:.4f}{noise}{z} over `{decision['rival']}`"


def decision_lines(search: Mapping) -> list[str]:
    """Each stage's decision and its noise, before the candidates' table."""
    stages = [s for s in search.get("stages", []) if s.get("decision")]
    if not stages:
        return []
    tie = search.get("tie_se") or 0
    rule = (f"the lowest score wins unless a less penalized candidate is within {tie:g} SE of it"
            if tie else "the lowest score wins (the paper's rule)")
    lines = [f"Decisions ({rule}; SE: of the paired difference over the validation items and "
             "Monte Carlo draws, not over training seeds):", ""]
    lines += [f"- {s['stage']}: `{s['winner']}`, {decision_text(s['decision'])}" for s in stages]
    return lines + [""]
