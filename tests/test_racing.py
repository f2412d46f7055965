"""Racing: the rule (focus_tune.procedure.racing), the searcher that applies it, the Tune scheduler that
stops the losers, and how a stopped candidate reads in the search's trace."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from ray.tune.schedulers import TrialScheduler

from focus_tune.config.space import GridConfig, load_search_config, space_path
from focus_tune.errors import ConfigError
from focus_tune.procedure.job import INFLUENCE_KEY, TrialJob, encode_influence
from focus_tune.procedure.plan import SearchPlan
from focus_tune.procedure.racing import Lost, changed_decisions, losers
from focus_tune.procedure.state import SearchState
from focus_tune.report import plot_search, search_trace
from focus_tune.report.trace import search_lines
from focus_tune.search.scheduler import RaceScheduler
from focus_tune.search.searcher import PlanSearcher
from focus_tune.sim.model_io import DataInfo

GRID = GridConfig(lambdas=(0.01, 0.05), k1=1, k2=(1, 5), constants=(0.01, 0.05))
SMOKE = load_search_config(space_path("facemed"), "smoke").train
RACE = dataclasses.replace(SMOKE, racing="stop", race_at=2, race_se=3.0, tie_se=1.0)
INFO = DataInfo(num_classes=3, event=2, condition_class=0, in_channels=3)


def _se(table):
    return lambda a, b: table.get((a, b), table.get((b, a)))


def test_the_leader_is_never_stopped_and_a_loser_needs_race_se():
    entrants = [("a", 0.10, 0.05), ("b", 0.13, 0.05), ("c", 0.20, 0.05)]
    se = _se({("b", "a"): 0.02, ("c", "a"): 0.02})
    out = losers(entrants, 5, race_se=3.0, tie_se=1.0, difference_se=se)
    assert set(out) == {"c"}  # b is 1.5 SE behind, c 5 SE
    assert out["c"] == Lost("a", 5, 0.20, pytest.approx(0.10), 0.02, 3.0)
    assert "5.0 SE > 3" in out["c"].text() and "behind a" in out["c"].text()


def test_a_less_penalized_candidate_must_also_clear_the_tie_rule():
    """The tie rule may still choose a less penalized candidate within tie_se SE at the end:
    it is stopped only beyond race_se + tie_se."""
    se = _se({("light", "heavy"): 0.01})
    lighter = [("heavy", 0.10, 0.5), ("light", 0.135, 0.1)]  # 3.5 SE behind
    assert losers(lighter, 5, 3.0, 1.0, se) == {}
    assert set(losers(lighter, 5, 3.0, 0.0, se)) == {"light"}
    assert set(losers([("heavy", 0.10, 0.5), ("light", 0.145, 0.1)], 5, 3.0, 1.0, se)) == {"light"}


def test_unknown_noise_or_one_entrant_stops_nothing():
    assert losers([("a", 0.1, 0.0), ("b", 0.9, 0.0)], 5, 3.0, 1.0, lambda a, b: None) == {}
    assert losers([("a", 0.1, 0.0)], 5, 3.0, 1.0, lambda a, b: 0.01) == {}


def test_changed_decisions_counts_a_stopped_winner():
    se = _se({("b", "a"): 0.01, ("d", "c"): 0.01})
    out = changed_decisions({"stage1": [("a", 0.1, 0.0), ("b", 0.2, 0.0)],
                             "stage2": [("c", 0.1, 0.0), ("d", 0.2, 0.0)]},
                            {"stage1": "a", "stage2": "d"}, 5, 3.0, 1.0, se)
    assert out["stage1"] == {"stopped": ["b"], "winner": "a", "changed": False, "candidates": 2}
    assert out["stage2"]["changed"] is True  # d won at full training but was behind at the race epoch


def test_racing_needs_a_race_epoch_before_the_last(tmp_path):
    text = (space_path("hero")).read_text().replace("      epochs: 3\n", "      epochs: 3\n      racing: stop\n"
                                                      "      race_at: 3\n", 1)
    path = tmp_path / "hero.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=r"profiles\.smoke\.train\.race_at: .*must be in 1\.\.2"):
        load_search_config(path, "smoke")
    path.write_text(text.replace("race_at: 3", "race_at: 2"))
    assert load_search_config(path, "smoke").train.race_at == 2


def _searcher(tmp_path, train=RACE):
    state = SearchState(path=tmp_path / "state.json")
    plan = SearchPlan(GRID, length=10, seed=0, final_seeds=2, tie_se=train.tie_se, difference_se=state.difference_se)
    searcher = PlanSearcher(plan, state, lambda spec: TrialJob(spec, train, INFO), 4, train.epochs, race=train)
    return searcher, state


def _at(epoch, score, noise):
    """A validation result whose per-item influences (shares of the score, metrics.item_influence)
    vary by ``noise`` (per item, in score units) around the score."""
    noise = np.asarray(noise, dtype=float)
    influence = (score + noise - noise.mean()) / len(noise)
    return {"epoch": epoch, "score": score, INFLUENCE_KEY: encode_influence(influence), "time_total_s": 2.0}


def test_the_searcher_stops_a_loser_and_records_it_stopped(tmp_path):
    searcher, state = _searcher(tmp_path)
    ids = {tune: searcher.suggest(tune)["job"].trial_id for tune in ("t1", "t2", "t3", "t4")}
    assert ids["t1"] == "stage1-l0.01-s0" and ids["t2"] == "stage1-l0.05-s0"
    rng = np.random.default_rng(0)
    base = rng.normal(0.0, 0.1, 50)
    assert searcher.race_result("t1", _at(1, 0.1, base)) == set()  # not the race epoch
    assert searcher.race_result("t1", _at(2, 0.10, base)) == set()  # alone so far
    # stage1-l0.05 is 0.05 behind with a paired SE of ~0.014: it lost.
    assert searcher.race_result("t2", _at(2, 0.15, base + rng.normal(0, 0.1, 50))) == {"t2"}
    assert state.difference_se("stage1-l0.05-s0", "stage1-l0.01-s0", race=True) == pytest.approx(0.014, rel=0.3)
    assert set(state.race) == {"stage1-l0.01-s0", "stage1-l0.05-s0"}
    searcher.on_trial_complete("t2", _at(2, 0.15, base))  # Tune's STOP ends it at this result
    assert state.results["stage1-l0.05-s0"] is None
    lost = Lost(**state.stopped["stage1-l0.05-s0"])
    assert lost.leader == "stage1-l0.01-s0" and lost.epoch == 2 and lost.gap == pytest.approx(0.05)
    searcher.on_trial_complete("t1", _at(RACE.epochs, 0.09, base))
    winners = searcher.plan.winners(state.results)
    assert winners["stage1"].trained_as == "stage1-l0.01-s0"
    # The constants race too; the finals, and a reloaded state, keep what was recorded.
    assert SearchState.load(state.path).stopped == state.stopped


def test_record_mode_keeps_the_race_epoch_and_stops_nothing(tmp_path):
    searcher, state = _searcher(tmp_path, dataclasses.replace(RACE, racing="record"))
    for tune in ("t1", "t2"):
        searcher.suggest(tune)
    base = np.random.default_rng(1).normal(0.0, 0.1, 20)
    assert searcher.race_result("t1", _at(2, 0.1, base)) == set()
    assert searcher.race_result("t2", _at(2, 0.9, base[::-1])) == set()
    assert state.race["stage1-l0.05-s0"]["score"] == 0.9 and not state.stopped


def test_the_scheduler_stops_the_reporting_loser_at_once_and_another_at_its_next_result():
    class Searcher:
        answers = [{"b"}, {"a"}, set()]

        def race_result(self, tune_id, result):
            return self.answers.pop(0)

    class Trial:
        def __init__(self, tid):
            self.trial_id = tid

    sched = RaceScheduler(Searcher())
    assert sched.on_trial_result(None, Trial("a"), {}) == TrialScheduler.CONTINUE  # b lost: at its next result
    assert sched.on_trial_result(None, Trial("a"), {}) == TrialScheduler.STOP  # a lost now
    assert sched.on_trial_result(None, Trial("b"), {}) == TrialScheduler.STOP


def test_a_stopped_candidate_reads_stopped_in_the_trace_lines_and_figure(tmp_path):
    plan = SearchPlan(GRID, length=10, seed=0, final_seeds=1)
    results = {"stage1-l0.01-s0": 0.1, "stage1-l0.05-s0": None, "constant-0.01-s0": 0.2,
               "constant-0.05-s0": 0.3, "none-s0": 0.3}
    while batch := plan.next_batch(results):
        for t in batch.trials:
            results[t.trial_id] = 0.2
    stopped = {"stage1-l0.05-s0": vars(Lost("stage1-l0.01-s0", 2, 0.15, 0.05, 0.01, 3.0))}
    trace = search_trace(plan, results, stopped=stopped)
    row = next(r for r in trace["stages"][0]["candidates"] if r["trial_id"] == "stage1-l0.05-s0")
    assert row["status"] == "stopped" and row["stopped"]["epoch"] == 2
    assert any("stopped at epoch 2: 0.0500 behind stage1-l0.01-s0 (5.0 SE > 3)" in line for line in search_lines(trace))
    png = plot_search(trace, tmp_path / "search.png", "stopped")[0]
    assert png.stat().st_size > 10_000


@pytest.mark.slow
def test_a_racing_search_stops_the_losers_and_shows_them(tmp_path):
    """The search CLI on the smoke profile, one trial at a time, with a lambda so large (1000)
    that its near-uniform predictions are far better calibrated after 2 of the smoke's 3
    epochs than those of lambda = 0.01 (about 10 SE). Each stage's 1000-candidate runs first;
    racing at epoch 2 then stops the 0.01-candidate through Tune. It is recorded stopped (no
    score), trained no further, shows in search.json and results.md, and its MLflow run is
    KILLED with the race it lost; the search finishes and chooses among the others."""
    import json
    import os
    import subprocess
    import sys

    from mlflow.tracking import MlflowClient

    text = space_path("hero").read_text()
    for old, new in (("      lambdas: [0.01, 0.05]\n", "      lambdas: [1000.0, 0.01]\n"),
                     ("      epochs: 3\n", "      epochs: 3\n      racing: stop\n      race_at: 2\n")):
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    space = tmp_path / "hero-racing.yaml"
    space.write_text(text)
    proc = subprocess.run([sys.executable, "-m", "focus_tune.search", "--game", "hero", "--profile", "smoke",
                           "--space", str(space), "--data-root", str(tmp_path / "data"), "--max-concurrent", "1"],
                          cwd=tmp_path,
                          capture_output=True, text=True, timeout=900, env=dict(os.environ, PYTHONUNBUFFERED="1"))
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    run = tmp_path / "runs" / "hero-smoke-seed0"
    state = json.loads((run / "search_state.json").read_text())
    stopped = state["stopped"]
    assert "stage1-l0.01-s0" in stopped, (stopped, state["race"])
    for tid, why in stopped.items():
        assert state["results"][tid] is None and why["epoch"] == 2 and why["gap"] > 3 * why["se"]
        assert "0.01-" in tid  # only the candidates far behind lost
    assert "] stage1-l0.01-s0: stopped at epoch 2: " in proc.stdout and "stage1-l0.01-s0 FAILED" not in proc.stdout
    search = json.loads((run / "report" / "search.json").read_text())
    rows = [r for s in search["stages"] for r in s["candidates"] if r["status"] == "stopped"]
    assert {r["trained_as"] for r in rows} == set(stopped)
    assert "stopped at epoch 2" in (run / "report" / "results.md").read_text()
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    exp = client.get_experiment_by_name("focus-tune/hero")
    runs = {r.data.tags.get("trial_id"): r for r in client.search_runs([exp.experiment_id], max_results=200)}
    for tid in stopped:
        assert runs[tid].info.status == "KILLED" and runs[tid].data.tags["stopped_by"].startswith("racing: stopped")
        epochs = [m.step for m in client.get_metric_history(runs[tid].info.run_id, "train/loss")]
        assert max(epochs) == 2, tid  # trained no further than its race
    assert all(r.info.status == "FINISHED" for tid, r in runs.items() if tid and tid not in stopped
               and state["results"].get(tid) is not None)
