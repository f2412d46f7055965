"""JointOptuna: the joint stage searched by Optuna with a budget of its own (no Ray)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from optuna.trial import TrialState

from focus_tune.procedure.optuna_joint import JointOptuna, default_budget

LAMBDAS = (0.001, 0.005, 0.01, 0.05)
K2 = (1, 11, 21, 51, 101)
K1, LENGTH = 3, 60  # k2 = 101 >= length: the same schedule as k2 = 60 (never on the grid here)
WINNER = "stage3-l0.01-s0"


def make_space(evaluated=None, lambdas=LAMBDAS, k2s=K2):
    """A JointSpace-like object: what JointOptuna reads (lambdas, k2, budget, evaluated,
    trials, joint_trial). k2 <= k1 is the stage-k1 winner; k2 = 51 and 101 share a schedule."""
    trials = {}
    for la in lambdas:
        for k in k2s:
            if k <= K1:
                trials[(la, k)] = SimpleNamespace(trial_id=WINNER, stage="stage3")
            else:
                trials[(la, k)] = SimpleNamespace(trial_id=f"joint-la{la}-k{min(k, 51)}-s0", stage="joint")
    if evaluated is None:
        evaluated = [(la, k, 0.05) for la in lambdas for k in k2s if k <= K1]
    return SimpleNamespace(
        lambdas=tuple(lambdas), k2=tuple(k2s), trials=trials, evaluated=tuple(evaluated), trained=0,
        budget=len({t.trial_id for t in trials.values() if t.stage == "joint"}), done_id="done",
        joint_trial=lambda la, k: trials[(float(la), int(k))],
    )


def score_of(trial_id: str) -> float:
    """A fixed, deterministic score per training (the oracle)."""
    return (sum(map(ord, trial_id)) % 97) / 1000 + 0.001


def run(opt: JointOptuna, fail: set[str] = frozenset()) -> list[str]:
    out = []
    while (spec := opt.ask()) is not None:
        out.append(spec.trial_id)
        opt.tell(spec.trial_id, None if spec.trial_id in fail else score_of(spec.trial_id))
    return out


def test_default_budget_is_half_the_grid_at_least_two():
    assert [default_budget(n) for n in (0, 1, 2, 3, 4, 5, 16)] == [0, 1, 2, 2, 2, 3, 8]
    assert default_budget(make_space()) == 6  # 12 distinct joint trainings (k2 51 and 101 share one)
    with pytest.raises(ValueError):
        default_budget(-1)


def test_budget_is_respected_and_nothing_is_handed_out_twice():
    opt = JointOptuna(make_space(), budget=4, seed=0)
    out = run(opt)
    assert len(out) == 4 == len(set(out)) == opt.spent
    assert WINNER not in out  # known from stage 3: never trained again
    assert opt.ask() is None and opt.exhausted


def test_default_budget_is_used_when_none_is_given():
    opt = JointOptuna(make_space(), seed=0)
    assert opt.budget == 6 and len(run(opt)) == 6


def test_known_points_are_seeded_before_the_first_ask():
    space = make_space()
    opt = JointOptuna(space, budget=1, seed=0)
    known = [t for t in opt.study.trials if t.user_attrs.get("source") == "known"]
    assert len(known) == len(space.evaluated) == len(LAMBDAS)
    assert {(t.params["lambda_all"], t.params["k2"], t.value) for t in known} == set(space.evaluated)
    assert all(t.state == TrialState.COMPLETE and t.user_attrs["trial_id"] == WINNER for t in known)


def test_same_schedule_grid_points_are_added_when_the_training_reports():
    opt = JointOptuna(make_space(), budget=12, seed=0)
    run(opt)
    for la in LAMBDAS:  # k2 = 51 trained once; (la, 101) holds its score as a known point
        tid = f"joint-la{la}-k51-s0"
        points = {t.params["k2"] for t in opt.study.trials if t.user_attrs.get("trial_id") == tid
                  and t.state == TrialState.COMPLETE and "answered_from" not in t.user_attrs}
        assert points == {51, 101}


def test_outstanding_candidates_are_not_handed_out_again():
    opt = JointOptuna(make_space(), budget=12, seed=0)
    out = [opt.ask().trial_id for _ in range(12)]  # all outstanding at once (parallel slots)
    assert len(set(out)) == 12 and opt.ask() is None and set(opt.pending) == set(out)
    answered = [t for t in opt.study.trials if t.user_attrs.get("outstanding")]
    assert all(t.state == TrialState.FAIL for t in answered)


def test_the_whole_grid_then_none():
    opt = JointOptuna(make_space(), budget=100, seed=3)
    out = run(opt)
    assert len(out) == 12 == len(set(out)) and opt.ask() is None
    best = opt.best()
    assert best[2] == min([score_of(t) for t in out] + [0.05])


def test_a_grid_fully_known_hands_out_nothing():
    space = make_space(k2s=(1, 2))
    opt = JointOptuna(space, budget=5, seed=0)
    assert space.budget == 0 and opt.ask() is None and opt.best() == (0.001, 1, 0.05)


def test_a_failed_training_is_failed_in_the_study_and_not_retried():
    first = JointOptuna(make_space(), budget=1, seed=0).ask().trial_id
    opt = JointOptuna(make_space(), budget=12, seed=0)
    out = run(opt, fail={first})
    assert out[0] == first and out.count(first) == 1 and len(out) == 12
    trained = {t.user_attrs["trial_id"]: t for t in opt.study.trials if t.user_attrs.get("source") == "trained"}
    assert trained[first].state == TrialState.FAIL
    assert opt.best()[2] == min([score_of(t) for t in out if t != first] + [0.05])  # the failed one excluded
    with pytest.raises(ValueError, match="not an outstanding"):
        opt.tell(first, 0.1)


def test_same_seed_same_tells_same_asks():
    assert run(JointOptuna(make_space(), budget=8, seed=7)) == run(JointOptuna(make_space(), budget=8, seed=7))
    others = {tuple(run(JointOptuna(make_space(), budget=8, seed=s))) for s in range(4)}
    assert len(others) > 1  # the seed matters


def test_resume_continues_without_repeats_and_counts_the_budget(tmp_path):
    storage, name = f"sqlite:///{tmp_path / 'optuna.db'}", "joint-s0"
    uninterrupted = run(JointOptuna(make_space(), budget=6, seed=0))

    space = make_space()
    a = JointOptuna(space, budget=6, seed=0, storage=storage, study_name=name)
    done = []
    for _ in range(2):
        spec = a.ask()
        a.tell(spec.trial_id, score_of(spec.trial_id))
        done.append(spec.trial_id)
    running = a.ask().trial_id  # the driver dies while this one trains
    assert done + [running] == uninterrupted[:3]

    # The driver's results now hold the two finished trainings.
    evaluated = list(space.evaluated) + [(la, k, score_of(space.trials[(la, k)].trial_id))
                                         for (la, k), t in space.trials.items() if t.trial_id in done]
    b = JointOptuna(make_space(evaluated), budget=6, seed=0, storage=storage, study_name=name)
    assert b.spent == 3 and b.pending == (running,)
    known = [t for t in b.study.trials if t.user_attrs.get("source") == "known"]
    assert len(known) == len(LAMBDAS) + 2  # the stage-3 points and the k2 = 101 twins, none added twice
    assert b.ask().trial_id == running  # handed out again first (the driver resumes its checkpoint)
    b.tell(running, score_of(running))
    rest = run(b)
    assert len(rest) == 3 and not set(rest) & set(done + [running])
    assert done + [running] + rest == uninterrupted  # the same search as without the restart
    assert JointOptuna(make_space(evaluated), budget=6, seed=0, storage=storage, study_name=name).ask() is None


def test_resume_tells_a_running_trial_whose_result_the_driver_has(tmp_path):
    storage = f"sqlite:///{tmp_path / 'optuna.db'}"
    space = make_space()
    a = JointOptuna(space, budget=3, seed=0, storage=storage, study_name="j")
    spec = a.ask()  # trained; its result is stored by the driver, which dies before telling
    la, k = next(key for key, t in space.trials.items() if t.trial_id == spec.trial_id)
    b = JointOptuna(make_space(list(space.evaluated) + [(la, k, 0.002)]), budget=3, seed=0,
                    storage=storage, study_name="j")
    assert b.pending == () and b.spent == 1 and b.best()[2] == 0.002
    trial = next(t for t in b.study.trials if t.user_attrs.get("source") == "trained")
    assert trial.state == TrialState.COMPLETE and trial.value == 0.002
    assert spec.trial_id not in run(b)


def test_resume_beyond_a_lowered_budget_does_not_hand_out_again(tmp_path):
    storage = f"sqlite:///{tmp_path / 'optuna.db'}"
    a = JointOptuna(make_space(), budget=4, seed=0, storage=storage, study_name="j")
    first, second = a.ask(), a.ask()  # both outstanding when the driver dies
    b = JointOptuna(make_space(), budget=1, seed=0, storage=storage, study_name="j")
    assert b.ask().trial_id == first.trial_id and b.ask() is None
    interrupted = [t for t in b.study.trials if t.user_attrs.get("interrupted")]
    assert [t.user_attrs["trial_id"] for t in interrupted] == [second.trial_id]
    assert interrupted[0].state == TrialState.FAIL


def test_a_sampler_stuck_on_known_points_falls_back_to_grid_order():
    opt = JointOptuna(make_space(), budget=12, seed=0, max_repeats=0)
    out = run(opt)
    assert out[0] == "joint-la0.001-k11-s0" and len(set(out)) == 12
