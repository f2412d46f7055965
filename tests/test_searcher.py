"""The PlanSearcher without a Tuner: what it hands out, when it waits, what it records."""

from __future__ import annotations

import json

import pytest
from ray.tune.search import Searcher

from focus_tune.config.space import GridConfig, load_search_config, space_path
from focus_tune.interrupt import INTERRUPT
from focus_tune.procedure.job import TrialJob
from focus_tune.procedure.plan import SearchPlan
from focus_tune.procedure.state import SearchState
from focus_tune.search.searcher import PlanSearcher
from focus_tune.sim.model_io import DataInfo

GRID = GridConfig(lambdas=(0.01, 0.05), k1=1, k2=(1, 5), constants=(0.01,))
TRAIN = load_search_config(space_path("facemed"), "smoke").train
INFO = DataInfo(num_classes=3, event=2, condition_class=0, in_channels=3)


def _searcher(tmp_path, slots=2):
    state = SearchState(path=tmp_path / "state.json")
    plan = SearchPlan(GRID, length=10, seed=0, final_seeds=2)
    handed = []
    searcher = PlanSearcher(plan, state, lambda spec: TrialJob(spec, TRAIN, INFO), slots, TRAIN.epochs,
                            on_handout=handed.append)
    return searcher, state, handed


def _ids(suggestions):
    return [s["job"].trial_id for s in suggestions]


def _done(score, **extra):
    return {"score": score, "epoch": TRAIN.epochs, "time_total_s": 3.0, **extra}


def test_hands_out_at_most_the_slots_critical_path_first(tmp_path):
    searcher, state, handed = _searcher(tmp_path, slots=2)
    first = [searcher.suggest("a"), searcher.suggest("b")]
    assert _ids(first) == ["stage1-l0.01-s0", "stage1-l0.05-s0"]  # before constant and none
    assert searcher.suggest("c") is None, "both slots are taken"
    searcher.on_trial_complete("a", _done(0.2))
    assert state.results == {"stage1-l0.01-s0": 0.2} and json.loads(state.path.read_text())["results"]
    assert _ids([searcher.suggest("c")]) == ["constant-0.01-s0"]  # stage 2 needs both stage-1 results
    searcher.on_trial_complete("b", _done(0.1))
    # Stage 1 decided (lambda_1 = 0.05): the joint trainings come before the unregularized one.
    assert _ids([searcher.suggest("d")]) == ["joint-la0.01-k5-s0"]
    assert [j.trial_id for j in handed] == ["stage1-l0.01-s0", "stage1-l0.05-s0", "constant-0.01-s0",
                                            "joint-la0.01-k5-s0"]


def test_slots_count_the_trials_that_ran_at_once_not_those_queued(tmp_path):
    """With an autoscaler the searcher queues every runnable trial; the efficiency's slots are
    the trials Tune actually ran at once (StateCallback, on their start and end)."""
    import types

    from focus_tune.procedure.job import CONFIG_KEY
    from focus_tune.search.callbacks import StateCallback

    searcher, state, _ = _searcher(tmp_path, slots=None)
    jobs = [searcher.suggest(t)["job"] for t in "abcd"]
    assert len(searcher.live) == 4
    progress = types.SimpleNamespace(started=lambda tid: None, trial_done=lambda *a: None, failed=lambda *a: None)
    callback = StateCallback(state, progress)
    trials = [types.SimpleNamespace(config={CONFIG_KEY: j}, last_result={}) for j in jobs]
    callback.on_trial_start(0, [], trials[0])
    callback.on_trial_start(0, [], trials[1])
    callback.on_trial_complete(0, [], trials[0])
    callback.on_trial_start(0, [], trials[2])
    assert state.slots == 2


def test_runs_to_the_end_and_finishes(tmp_path):
    searcher, state, _ = _searcher(tmp_path, slots=None)  # no limit: everything runnable at once
    n = 0
    while (s := searcher.suggest(f"t{n}")) != Searcher.FINISHED:
        if s is None:  # waiting: finish what is out
            for tid in list(searcher.live):
                searcher.on_trial_complete(tid, _done(0.1))
        n += 1
    assert searcher.plan.done(state.results) and not searcher.live
    assert {tid for tid in state.finals} == {tid for by_seed in searcher.plan.finals(state.results).values()
                                             for tid in by_seed.values()}


def test_failed_crashed_and_interrupted_trials(tmp_path):
    searcher, state, _ = _searcher(tmp_path, slots=3)
    for tid in "abc":
        searcher.suggest(tid)
    job_a, job_b, job_c = (searcher.live[t].trial_id for t in "abc")
    searcher.on_trial_complete("a", {"epoch": 1, "failed": 1, "error": "training loss became nan"})
    searcher.on_trial_complete("b", None, error=True)  # crashed past its retries: handed out once more
    searcher.on_trial_complete("c", {"epoch": 1, "score": 0.3})  # stopped by Ctrl-C mid-way
    assert state.results == {job_a: None}, "an interrupted trial gets no result: it reruns"
    assert state.crashed == {job_b: 1} and job_c not in state.results
    searcher.suggest("x"), searcher.suggest("y")  # the crashed trial and the interrupted one, new Tune trials
    live = {job.trial_id: tune_id for tune_id, job in searcher.live.items()}
    assert set(live) == {job_b, job_c}
    searcher.on_trial_complete(live[job_b], None, error=True)  # and crashed past its retries again: failed
    assert state.results == {job_a: None, job_b: None} and state.crashed == {job_b: 2}


def test_resume_runs_a_trial_that_failed_by_crashing_again_but_not_a_nan_or_a_lost_race(tmp_path):
    """'fix the cause and resume' (a stage whose every trial failed): a trial recorded as failed
    because it crashed loses that result on --resume and runs again; a NaN loss and a trial
    stopped by racing keep theirs."""
    from focus_tune.procedure.state import SearchState

    state = SearchState(path=tmp_path / "search_state.json",
                        results={"crashed": None, "nan": None, "raced": None, "ok": 0.2},
                        crashed={"crashed": 2, "ok": 1, "running": 1}, stopped={"raced": {"epoch": 5}})
    assert state.retry_crashed() == ["crashed"]
    assert state.results == {"nan": None, "raced": None, "ok": 0.2}
    assert state.crashed == {"crashed": 0, "ok": 1, "running": 0}  # without a result: a fresh count
    state.save()
    assert SearchState.load(state.path).crashed == {"crashed": 0, "ok": 1, "running": 0}
    assert SearchState.load(state.path).retry_crashed() == []


def test_a_stage_where_every_trial_failed_ends_the_search(tmp_path):
    searcher, state, _ = _searcher(tmp_path, slots=2)
    searcher.suggest("a"), searcher.suggest("b")
    searcher.on_trial_complete("a", {"epoch": 1, "failed": 1})
    searcher.on_trial_complete("b", {"epoch": 1, "failed": 1})
    assert searcher.suggest("c") == Searcher.FINISHED
    assert "stage1" in str(searcher.error)


def test_the_last_epochs_score_and_influences_are_recorded(tmp_path):
    searcher, state, _ = _searcher(tmp_path, slots=1)
    searcher.suggest("a")
    searcher.on_trial_complete("a", {**_done(0.2), "val/influence": "last"})
    assert state.results == {"stage1-l0.01-s0": 0.2} and state.influence == {"stage1-l0.01-s0": "last"}


def test_an_interrupt_stops_the_hand_out(tmp_path):
    searcher, _, _ = _searcher(tmp_path, slots=2)
    searcher.suggest("a")
    INTERRUPT.event.set()
    try:
        assert searcher.suggest("b") is None  # one trial still out: wait for Tune to stop it
        searcher.live.clear()
        assert searcher.suggest("c") == Searcher.FINISHED
    finally:
        INTERRUPT.event.clear()


@pytest.mark.parametrize("slots", [1, 2, 5])
def test_the_cost_model_simulates_the_same_rule(tmp_path, slots):
    """cost.simulate and the searcher start trials in the same order."""
    from focus_tune.procedure.cost import simulate

    searcher, state, handed = _searcher(tmp_path, slots=slots)
    clock, running, order = 0.0, {}, []
    n = 0
    while True:
        while (s := searcher.suggest(f"t{n}")) not in (None, Searcher.FINISHED):
            running[f"t{n}"] = clock + (0.1 if s["job"].spec.source_trial else 1.0) + 1e-6 * n
            order.append(s["job"].trial_id)
            n += 1
        if not running:
            break
        tid = min(running, key=running.get)
        clock = running.pop(tid)
        searcher.on_trial_complete(tid, _done(0.0))
    plan = SearchPlan(GRID, length=10, seed=0, final_seeds=2)
    assert clock == pytest.approx(simulate(plan, slots, lambda t: 0.1 if t.source_trial else 1.0), abs=1e-3)


def _packing_searcher(tmp_path, slots, pack):
    state = SearchState(path=tmp_path / "state.json")
    plan = SearchPlan(GRID, length=10, seed=0, final_seeds=2)
    return PlanSearcher(plan, state, lambda spec: TrialJob(spec, TRAIN, INFO), slots, TRAIN.epochs, pack=pack), state


def test_packs_take_their_share_of_the_waiting_trainings(tmp_path):
    """--pack 4 with 4 trainings runnable: one trial free takes all four; two free trials take
    two each; four free trials take one each (a pack would leave free trials idle)."""
    from focus_tune.procedure.job import PackJob, jobs_of

    for slots, sizes in ((1, [4]), (2, [2, 2]), (4, [1, 1, 1, 1])):
        (tmp_path / f"s{slots}").mkdir()
        searcher, _ = _packing_searcher(tmp_path / f"s{slots}", slots, pack=4)
        jobs = [searcher.suggest(f"t{i}")["job"] for i in range(len(sizes))]
        assert [len(jobs_of(j)) for j in jobs] == sizes
        assert sorted(m.trial_id for j in jobs for m in jobs_of(j)) == [
            "constant-0.01-s0", "none-s0", "stage1-l0.01-s0", "stage1-l0.05-s0"]
        assert all(isinstance(j, PackJob) == (len(jobs_of(j)) > 1) for j in jobs)


def test_a_pack_records_each_member_as_it_finishes(tmp_path):
    from focus_tune.procedure.job import pack_result

    searcher, state = _packing_searcher(tmp_path, slots=1, pack=4)
    pack = searcher.suggest("p")["job"]
    ids = [m.trial_id for m in pack.jobs]
    # The first member's loss turned NaN at epoch 1: it is recorded failed while the others go on.
    searcher.on_trial_result("p", pack_result({ids[0]: {"epoch": 1, "failed": 1, "error": "nan"}}, epoch=1,
                                              time_total_s=1.0))
    assert state.results == {ids[0]: None}
    last = {tid: {"score": 0.1 * i, "epoch": TRAIN.epochs} for i, tid in enumerate(ids[1:], start=1)}
    searcher.on_trial_result("p", pack_result(last, epoch=TRAIN.epochs, time_total_s=9.0))
    searcher.on_trial_complete("p", pack_result(last, epoch=TRAIN.epochs, time_total_s=9.0))
    assert state.results == {ids[0]: None, **{tid: r["score"] for tid, r in last.items()}}
    assert state.trial_seconds[ids[1]] == pytest.approx(9.0 / len(ids))  # the pack's time, shared
