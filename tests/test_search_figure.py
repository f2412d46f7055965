"""The picture of the search: its numbers (search_trace) from the plan and the results, the
figure and the results.md section, on a simulated search and on a real smoke run."""

from __future__ import annotations

import json

import matplotlib.image as mpimg
import numpy as np
import pytest
from mlflow.tracking import MlflowClient

from focus_tune.config.space import GridConfig
from focus_tune.procedure.plan import SearchPlan
from focus_tune.report import plot_search, search_figure, search_trace, write_report

GRID = GridConfig(lambdas=(0.01, 0.05), k1=2, k2=(1, 5), constants=(0.01, 0.05))
SCORES = {"stage1-l0.01-s0": 0.30, "stage1-l0.05-s0": None,  # failed
          "stage2-l0.01-s0": 0.22, "stage2-l0.05-s0": 0.25,
          "joint-la0.01-k5-s0": 0.20, "joint-la0.05-k5-s0": 0.27,
          "constant-0.01-s0": 0.28, "constant-0.05-s0": 0.26, "none-s0": 0.33}


def _simulate(plan: SearchPlan) -> dict:
    """Run the plan to the end with SCORES (finals score like their schedule's search trial)."""
    results: dict = {}
    while batch := plan.next_batch(results):
        for t in batch.trials:
            results[t.trial_id] = SCORES.get(t.trial_id, 0.2)
    return results


def _histories(results: dict) -> dict:
    """Three epochs of val/ece for every trial, falling to its score."""
    return {tid: [(1, 0.5), (2, 0.4), (3, score)] for tid, score in results.items() if score is not None}


def _image(path) -> np.ndarray:
    img = mpimg.imread(path)
    assert img.ndim == 3 and img.shape[0] > 500 and img.shape[1] > 1000, img.shape
    assert img[..., :3].std() > 0.05, "the figure is not blank"
    return img


def test_trace_holds_every_candidate_the_chosen_path_and_the_histories():
    plan = SearchPlan(GRID, length=30, seed=0, final_seeds=3)
    results = _simulate(plan)
    trace = search_trace(plan, results, _histories(results))
    assert [s["stage"] for s in trace["stages"]] == ["stage1", "stage2", "joint", "constant", "none"]
    by_stage = {s["stage"]: s for s in trace["stages"]}
    stage1 = {r["trial_id"]: r for r in by_stage["stage1"]["candidates"]}
    assert stage1["stage1-l0.05-s0"]["status"] == "failed" and stage1["stage1-l0.05-s0"]["score"] is None
    assert by_stage["stage1"]["winner"] == "stage1-l0.01-s0"
    assert by_stage["stage2"]["winner"] == "stage2-l0.01-s0"
    joint = {r["trial_id"]: r for r in by_stage["joint"]["candidates"]}
    assert len(joint) == 4 and {r["k2"] for r in joint.values()} == {1, 5}
    # k2 <= k1: no joint entries, the stage-2 winner's schedule, trained once and scored as it.
    for la in ("0.01", "0.05"):
        row = joint[f"joint-la{la}-k1-s0"]
        assert row["trained_as"] == "stage2-l0.01-s0" and row["score"] == pytest.approx(0.22)
    assert by_stage["joint"]["winner"] == "joint-la0.01-k5-s0"
    assert joint["joint-la0.01-k5-s0"]["lambda"] == 0.01
    assert by_stage["constant"]["winner"] == "constant-0.05-s0"
    winners = plan.winners(results)
    assert trace["chosen"] == {"none": str(winners["none"].schedule), "constant": str(winners["constant"].schedule),
                               "time-dependent": str(winners["joint"].schedule)}
    # Histories: the first seed of a family is its search trial (the final only evaluated it).
    td = trace["histories"]["time-dependent"]
    assert [c["seed"] for c in td] == [0, 1, 2]
    assert [c["trial_id"] for c in td] == ["joint-la0.01-k5-s0", "final-time-dependent-s1", "final-time-dependent-s2"]
    assert td[0]["epochs"] == [1, 2, 3] and td[0]["val_ece"] == [0.5, 0.4, 0.20]
    json.dumps(trace)  # plain JSON values


def test_figure_and_report_section(tmp_path):
    plan = SearchPlan(GRID, length=30, seed=0, final_seeds=3)
    results = _simulate(plan)
    trace = search_trace(plan, results, _histories(results))
    png, pdf = plot_search(trace, tmp_path / "search.png", "hero (test)")
    _image(png)
    assert pdf.read_bytes().startswith(b"%PDF")
    finals = {"none": [{"seed": 0, "test/marginal/ece": 0.1}],
              "time-dependent": [{"seed": 0, "test/marginal/ece": 0.09}]}
    report = write_report(tmp_path / "report", "hero", "test", finals, trace["chosen"], ["a", "b"], 0, search=trace)
    names = {f.name for f in report.files}
    assert {"search.png", "search.pdf", "search.json"} <= names
    assert json.loads((tmp_path / "report" / "search.json").read_text()) == trace
    md = report.markdown
    assert "## The search" in md and "![the search](search.png)" in md
    assert "| stage1 | `stage1-l0.05-s0` | 0.05 |  | n/a |  | failed |" in md
    assert "| joint | `joint-la0.01-k5-s0` | 0.01 | 5 | 0.2000 |  | **chosen** |" in md
    assert ("| joint | `joint-la0.05-k1-s0` | 0.05 | 1 | 0.2200 |  | same schedule as `stage2-l0.01-s0`, "
            "trained once |") in md
    assert "- joint: `joint-la0.01-k5-s0`, lowest, by " in md  # no noise known: no SE


def test_one_validation_per_training_draws_the_seeds_per_family(tmp_path, monkeypatch):
    """eval_every = epochs (the quick profile): one validation per training, no curve; the
    bottom panel shows each family's seeds at that epoch instead."""
    plan = SearchPlan(GRID, length=30, seed=0, final_seeds=3)
    results = _simulate(plan)
    trace = search_trace(plan, results, {tid: [(30, s)] for tid, s in results.items() if s is not None})
    assert {e for curves in trace["histories"].values() for c in curves for e in c["epochs"]} == {30}
    titles = []
    monkeypatch.setattr(search_figure, "_draw_histories", _spy(search_figure._draw_histories, titles))
    _image(plot_search(trace, tmp_path / "one.png", "one validation")[0])
    assert titles and "Validation ECE at epoch 30, the only validation" in titles[0]


def _spy(draw, titles):
    def wrapped(ax, search):
        draw(ax, search)
        titles.append(ax.get_title())
    return wrapped


def test_a_search_without_histories_or_decisions_still_draws(tmp_path):
    plan = SearchPlan(GRID, length=30, seed=0, final_seeds=3)
    results = {"stage1-l0.01-s0": 0.3}  # an interrupted search: stage 1 undecided, nothing over epochs
    trace = search_trace(plan, results)
    assert [s["stage"] for s in trace["stages"]] == ["stage1", "constant", "none"]
    assert trace["histories"] == {} and trace["chosen"] == {}
    status = {r["trial_id"]: r["status"] for s in trace["stages"] for r in s["candidates"]}
    assert status["stage1-l0.01-s0"] == "ok" and status["stage1-l0.05-s0"] == "not run"
    assert all(s["winner"] is None for s in trace["stages"])
    _image(plot_search(trace, tmp_path / "s.png", "partial")[0])


@pytest.mark.slow
def test_real_smoke_run_has_the_search_in_its_report_and_in_mlflow(smoke_search, tmp_path):
    from smoke_search import GAME, RUN, state_of

    work = smoke_search.work
    report = work / "runs" / RUN / "report"
    trace = json.loads((report / "search.json").read_text())
    results = state_of(work)["results"]
    # Every trained candidate carries its trial's validation ECE from the search state.
    for stage in trace["stages"]:
        for row in stage["candidates"]:
            assert row["score"] == results[row["trained_as"]], row
    stage1 = {r["trial_id"]: r for r in trace["stages"][0]["candidates"]}
    assert stage1["stage1-l0.05-s0"]["status"] == "failed"  # the injected NaN
    # Each family's curves: three seeds, the smoke profile's three evaluated epochs each.
    assert set(trace["histories"]) == {"none", "constant", "time-dependent"}
    for family, curves in trace["histories"].items():
        assert [c["seed"] for c in curves] == [0, 1, 2], family
        assert all(c["epochs"] == [1, 2, 3] and len(c["val_ece"]) == 3 for c in curves), family
        assert not any(c["trial_id"].startswith("final-") and c["trial_id"].endswith("-s0") for c in curves)
    _image(report / "search.png")
    assert (report / "search.pdf").read_bytes().startswith(b"%PDF")
    assert "## The search" in (report / "results.md").read_text()
    # The same figure rebuilds from search.json alone.
    _image(plot_search(trace, tmp_path / "again.png", "again")[0])

    client = MlflowClient(f"sqlite:///{work / 'mlflow.db'}")
    exp = client.get_experiment_by_name(f"focus-tune/{GAME}")
    parent = next(r for r in client.search_runs([exp.experiment_id]) if r.data.tags.get("kind") == "search")
    assert trace["chosen"]["time-dependent"] == parent.data.params["chosen_schedule"]
    artifacts = {a.path for a in client.list_artifacts(parent.info.run_id, "report")}
    assert {"report/search.png", "report/search.pdf", "report/search.json"} <= artifacts
