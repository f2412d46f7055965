"""The staged search plan, run end to end against fake score functions.

The fake ECE of a schedule is its mean distance to a target vector of lambdas, so the
winner of every stage is known in advance; a small reference implementation of the
paper's procedure (plain loops over plain vectors) computes it independently of the plan.
"""

import random
import re

import pytest

from focus_tune.config.space import GridConfig
from focus_tune.errors import StageFailed
from focus_tune.procedure import cost
from focus_tune.procedure.plan import FAMILY_STAGE, SearchPlan, priority

PAPER_GRID = GridConfig(
    lambdas=(0.001, 0.005, 0.01, 0.05), k1=3, k2=(1, 11, 21, 51, 101), constants=(0.001, 0.005, 0.01, 0.05)
)
SMOKE_GRID = GridConfig(lambdas=(0.01, 0.05), k1=2, k2=(1, 5), constants=(0.01,))


def target_score(target: list[float]):
    """Fake validation ECE: mean |lambda_i - target_i|. Lower is better."""

    def score(values: tuple[float, ...]) -> float:
        return sum(abs(v - t) for v, t in zip(values, target)) / len(values)

    return score


def hero_like(length: int) -> list[float]:
    # The paper's H.E.R.O. choice: lambda_1 = 0.01, lambda_2..6 = 0.005, rest 0.
    return [0.01] + [0.005] * 5 + [0.0] * (length - 6)


def long_tail(length: int) -> list[float]:
    return [0.05, 0.01, 0.01] + [0.005] * 22 + [0.0] * (length - 25)


def simulate(plan: SearchPlan, score, fail=frozenset()):
    """Run the plan to the end like a driver; returns (results, [(results before, batch)])."""
    results: dict[str, float | None] = {}
    history = []
    while batch := plan.next_batch(results):
        assert batch.joint_space is None
        history.append((dict(results), batch))
        for t in batch.trials:
            assert t.trial_id not in results, f"{t.trial_id} was run twice"
            results[t.trial_id] = None if t.trial_id in fail else score(t.schedule.values) + 0.001 * t.seed
    return results, history


def vector(prefix, lambda_all, k2, length):
    """The paper's staged schedule, written out by hand."""
    k1 = len(prefix)
    return tuple(prefix[i] if i < k1 else (lambda_all if i < k2 else 0.0) for i in range(length))


def reference(grid: GridConfig, length: int, score):
    """The procedure of App. C.4 with plain loops; min() keeps the first of equal scores."""
    prefix = ()
    for _ in range(grid.k1):
        best = min(grid.lambdas, key=lambda lam: score(vector((*prefix, lam), 0.0, 0, length)))
        prefix = (*prefix, best)
    joint = [(la, k2) for la in grid.lambdas for k2 in grid.k2]
    lambda_all, k2 = min(joint, key=lambda p: score(vector(prefix, p[0], p[1], length)))
    constant = min(grid.constants, key=lambda c: score((c,) * length))
    return prefix, lambda_all, k2, constant


# -- winners and the procedure -----------------------------------------------------------
@pytest.mark.parametrize("make_target", [hero_like, long_tail])
@pytest.mark.parametrize("length", [300, 100])
def test_winners_are_the_argmin_of_each_stage(make_target, length):
    score = target_score(make_target(length))
    plan = SearchPlan(PAPER_GRID, length=length, seed=0)
    results, _ = simulate(plan, score)
    prefix, lambda_all, k2, constant = reference(PAPER_GRID, length, score)

    w = plan.winners(results)
    assert list(w) == ["stage1", "stage2", "stage3", "joint", "constant", "none"]
    for i in range(3):
        assert w[f"stage{i + 1}"].schedule.values[: i + 1] == prefix[: i + 1]
    assert w["joint"].schedule.values == vector(prefix, lambda_all, k2, length)
    assert (w["joint"].candidate.params["lambda_all"], w["joint"].candidate.params["k2"]) == (lambda_all, k2)
    assert w["constant"].candidate.params["lambda_const"] == constant
    assert w["none"].schedule.values == (0.0,) * length
    for name, winner in w.items():
        assert winner.score == results[winner.trained_as]  # the score the winner was chosen on
    assert plan.done(results)


def test_hero_like_target_recovers_the_papers_choice_through_a_reused_trial():
    # Target l1 = 0.01, l2..6 = 0.005: stage 3 picks 0.005 and the joint stage prefers
    # k2 = 1 (no joint entries), i.e. the stage-3 winner itself, which is not retrained.
    plan = SearchPlan(PAPER_GRID, length=300, seed=0)
    results, _ = simulate(plan, target_score(hero_like(300)))
    joint = plan.winners(results)["joint"]
    assert str(joint.schedule) == "l1=0.01 l2..3=0.005 rest=0"
    assert joint.candidate.trial_id == "joint-la0.001-k1-s0"  # first of the equal k2 = 1 candidates
    assert joint.trained_as == "stage3-l0.005-s0"
    assert "joint-la0.001-k1-s0" not in results


def test_long_tail_target_picks_a_joint_schedule():
    plan = SearchPlan(PAPER_GRID, length=300, seed=0)
    results, _ = simulate(plan, target_score(long_tail(300)))
    joint = plan.winners(results)["joint"]
    assert joint.trained_as == joint.candidate.trial_id == "joint-la0.005-k21-s0"
    assert str(joint.schedule) == "l1=0.05 l2..3=0.01 l4..21=0.005 rest=0"


def test_ties_go_to_the_first_grid_value():
    plan = SearchPlan(PAPER_GRID, length=300, seed=0)
    results, _ = simulate(plan, lambda values: 0.5)
    w = plan.winners(results)
    assert [w[f"stage{i}"].candidate.params[f"lambda_{i}"] for i in (1, 2, 3)] == [0.001] * 3
    assert w["constant"].candidate.trial_id == "constant-0.001-s0"
    assert w["joint"].candidate.trial_id == "joint-la0.001-k1-s0"


# -- the tie rule: a difference inside its noise goes to the smaller penalty -------------
TIE_GRID = GridConfig(lambdas=(0.05, 0.005), k1=2, k2=(1, 5), constants=(0.05, 0.005))
# The heavier penalty scores a little lower everywhere (by 0.001 per 0.045 of lambda sum).
TIE_SCORE = {"stage1-l0.05-s0": 0.200, "stage1-l0.005-s0": 0.201,
             "stage2-l0.05-s0": 0.190, "stage2-l0.005-s0": 0.1905,
             "constant-0.05-s0": 0.25, "constant-0.005-s0": 0.26, "none-s0": 0.3}


def _tie_results(plan):
    results = {}
    while batch := plan.next_batch(results):
        for t in batch.trials:
            results[t.trial_id] = TIE_SCORE.get(t.trial_id, 0.21)
    return results


@pytest.mark.parametrize(("se", "tie_se", "expect"), [
    (0.002, 1.0, ("0.005", "0.005", "0.05")),    # stage 1's 0.001 is inside 1 SE; the constants' 0.01 is not
    (0.0008, 1.0, ("0.05", "0.005", "0.05")),    # stage 1's 0.001 beats 1 SE
    (0.0008, 2.0, ("0.005", "0.005", "0.05")),   # 2 SE: stage 1 is a tie again
    (0.002, 0.0, ("0.05", "0.05", "0.05")),      # tie_se = 0: the paper's rule, the lowest
    (None, 1.0, ("0.05", "0.05", "0.05")),       # no noise known: the lowest
])
def test_tie_rule_prefers_less_penalty_inside_the_noise(se, tie_se, expect):
    calls = []

    def noise(a, b):
        calls.append((a, b))
        return se

    plan = SearchPlan(TIE_GRID, length=10, seed=0, tie_se=tie_se, difference_se=noise)
    w = plan.winners(_tie_results(plan))
    stage1, stage2 = w["stage1"].candidate.params["lambda_1"], w["stage2"].candidate.params["lambda_2"]
    chosen = tuple(repr(v) for v in (stage1, stage2, w["constant"].candidate.params["lambda_const"]))
    assert chosen[0] == expect[0] and chosen[2] == expect[2], chosen
    # stage 2's candidates follow stage 1's winner; its gap is 0.0005 (inside 0.0008 too)
    assert chosen[1] == ("0.005" if (se and tie_se) else "0.05")
    first = w["stage1"]
    if se is not None and tie_se and expect[0] == "0.005":
        assert first.rule == "tie: less penalty" and first.rival == "stage1-l0.05-s0"
        assert first.difference == pytest.approx(-0.001) and first.difference_se == se
    else:
        assert first.rule == "lowest" and first.rival == "stage1-l0.005-s0"
        assert first.difference == pytest.approx(0.001)
        assert first.difference_se == (se if se is not None else None)
    assert w["none"].rule == "only candidate" and w["none"].rival is None
    assert all(a != b for a, b in calls)


def test_tie_rule_orders_joint_candidates_by_their_total_penalty():
    """Joint candidates: the least lambda mass within the noise, whatever the grid order."""
    grid = GridConfig(lambdas=(0.05, 0.005), k1=1, k2=(1, 3, 8), constants=(0.01,))
    scores = {"joint-la0.05-k8-s0": 0.100, "joint-la0.005-k8-s0": 0.1004, "joint-la0.05-k3-s0": 0.1003,
              "joint-la0.005-k3-s0": 0.1009}
    plan = SearchPlan(grid, length=10, seed=0, tie_se=1.0, difference_se=lambda a, b: 0.0005)
    results = {}
    while batch := plan.next_batch(results):
        for t in batch.trials:
            results[t.trial_id] = scores.get(t.trial_id, 0.2 if t.stage != "final" else 0.1)
    # within 0.0005 of 0.100: la0.005-k8 (mass 0.05+7*0.005), la0.05-k3 (0.05+2*0.05); k1 scored 0.2
    joint = plan.winners(results)["joint"]
    assert joint.candidate.trial_id == "joint-la0.005-k8-s0" and joint.rule == "tie: less penalty"
    assert joint.rival == "joint-la0.05-k8-s0"


# -- batches: overlap and dependencies ---------------------------------------------------
def test_paper_grid_batches_and_training_count():
    """Hand count for L = 300: stages 3 x 4 = 12, constant 4, none 1, joint 4 x 5 = 20 of
    which the 4 with k2 = 1 are the stage-3 winner, finals 3 families x 3 seeds = 9 of
    which 3 reuse a search checkpoint. Trainings: 12 + 4 + 1 + 16 + 6 = 39."""
    plan = SearchPlan(PAPER_GRID, length=300, seed=0)
    results, history = simulate(plan, target_score(long_tail(300)))
    shapes = [sorted(set(b.stages)) for _, b in history]
    assert shapes == [
        ["constant", "none", "stage1"],
        ["final", "stage2"],
        ["stage3"],
        ["joint"],
        ["final"],
    ]
    assert [len(b.trials) for _, b in history] == [9, 10, 4, 16, 3]
    assert [b.trainings for _, b in history] == [9, 8, 4, 16, 2]
    assert {t.family for t in history[1][1].trials if t.stage == "final"} == {"none", "constant"}
    assert {t.family for t in history[4][1].trials} == {"time-dependent"}
    assert sum(b.trainings for _, b in history) == 39
    assert len(results) == 42  # 39 trainings + 3 test evaluations of search checkpoints

    stats = cost.stats(plan, [b for _, b in history])
    assert (stats.trainings, stats.evaluations, stats.naive_trainings) == (39, 3, 46)
    assert (stats.dedup_saved, stats.reuse_saved) == (4, 3)
    assert (stats.batches, stats.rounds_without_overlap, stats.overlap_saved) == (5, 7, 2)


def test_priority_puts_the_critical_path_first():
    """Batch 2 of the paper grid, in the order a searcher with few slots starts it: the
    stage-2 trainings (the critical path), then the training finals (none, with its
    temperature-scaled test evaluation, first), then the finals that only evaluate a
    search checkpoint (none first); the plan's order within each kind."""
    plan = SearchPlan(PAPER_GRID, length=300, seed=0)
    _, history = simulate(plan, target_score(long_tail(300)))
    batch = history[1][1]
    order = [t.trial_id for t in sorted(batch.trials, key=priority)]
    assert order == [*[t.trial_id for t in batch.trials if t.stage == "stage2"],
                     "final-none-s1", "final-none-s2", "final-constant-s1", "final-constant-s2",
                     "final-none-s0", "final-constant-s0"]
    first = history[0][1]  # stage 1 before the constant and none candidates
    assert [t.stage for t in sorted(first.trials, key=priority)] == ["stage1"] * 4 + ["constant"] * 4 + ["none"]


def test_batches_respect_dependencies():
    plan = SearchPlan(PAPER_GRID, length=300, seed=0)
    _, history = simulate(plan, target_score(long_tail(300)))
    for before, batch in history:
        decided = plan.winners(before)
        prefix = tuple(decided[f"stage{i}"].schedule.values[i - 1] for i in (1, 2, 3) if f"stage{i}" in decided)
        for t in batch.trials:
            assert t.trial_id not in before
            if t.stage.startswith("stage"):
                i = int(t.stage[5:])
                assert len(prefix) == i - 1, f"{t.trial_id} ran before stage {i - 1} was decided"
                assert t.schedule.values[: i - 1] == prefix and set(t.schedule.values[i:]) == {0.0}
            elif t.stage == "joint":
                assert len(prefix) == 3 and t.schedule.values[:3] == prefix
            elif t.stage == "final":
                assert FAMILY_STAGE[t.family] in decided
                assert t.schedule == decided[FAMILY_STAGE[t.family]].schedule
        keys = [(t.stage == "final", t.schedule, t.seed) for t in batch.trials]
        assert len(keys) == len(set(keys)), "a batch trains the same schedule twice"


def test_smoke_grid_is_a_handful_of_trainings():
    plan = SearchPlan(SMOKE_GRID, length=100, seed=0)
    batches = plan.dry_run()
    assert sum(b.trainings for b in batches) == 14  # 2 + 2 + 1 + 1 search, 2 joint, 6 retrains
    assert len(batches) == 4


# -- deduplication -----------------------------------------------------------------------
def test_joint_candidates_with_k2_at_most_k1_are_not_retrained():
    plan = SearchPlan(PAPER_GRID, length=300, seed=0)
    results, history = simulate(plan, target_score(long_tail(300)))
    joint = [t for _, b in history for t in b.trials if t.stage == "joint"]
    assert joint and all(t.params["k2"] > 3 for t in joint)
    assert not any(re.fullmatch(r"joint-la.*-k1-s0", tid) for tid in results)


def test_every_k2_at_or_beyond_the_length_is_one_schedule():
    grid = GridConfig(lambdas=(0.01, 0.05), k1=1, k2=(1, 11, 51, 101), constants=(0.01,))
    plan = SearchPlan(grid, length=40, seed=0)
    results, history = simulate(plan, target_score([0.05] * 40))
    joint = [t for _, b in history for t in b.trials if t.stage == "joint"]
    # k2 = 51 and 101 both fill entries 2..40; k2 = 1 is the stage-1 winner.
    assert sorted(t.trial_id for t in joint) == sorted(
        ["joint-la0.01-k11-s0", "joint-la0.01-k51-s0", "joint-la0.05-k11-s0", "joint-la0.05-k51-s0"]
    )
    # l = (0.05, 0.05, ...) everywhere is also the constant 0.05 schedule: the winner may be
    # any of the equal candidates, but it is the first in grid order.
    assert plan.winners(results)["joint"].candidate.trial_id == "joint-la0.05-k51-s0"


def test_time_dependent_winner_equal_to_the_constant_winner_is_not_retrained():
    # All stage winners 0.01 and k2 >= L: the time-dependent schedule *is* constant(0.01).
    grid = GridConfig(lambdas=(0.01, 0.05), k1=2, k2=(1, 101), constants=(0.01, 0.05))
    plan = SearchPlan(grid, length=100, seed=0)
    results, history = simulate(plan, target_score([0.01] * 100))
    w = plan.winners(results)
    assert w["joint"].schedule == w["constant"].schedule
    assert w["joint"].trained_as == "constant-0.01-s0"
    assert "joint-la0.01-k101-s0" not in results
    # ... and its finals reuse the constant family's finals instead of training again.
    td_finals = [t for _, b in history for t in b.trials if t.family == "time-dependent" and t.stage == "final"]
    assert td_finals == []
    assert plan.done(results)
    finals = plan.finals(results)
    assert finals["time-dependent"] == finals["constant"] == {s: f"final-constant-s{s}" for s in (0, 1, 2)}


def test_a_zero_in_the_grid_reuses_the_unregularized_trial():
    grid = GridConfig(lambdas=(0.0, 0.05), k1=1, k2=(1, 5), constants=(0.0, 0.05))
    plan = SearchPlan(grid, length=20, seed=0)
    first = plan.next_batch({})
    # stage1-l0.0, constant-0.0 and none are one schedule: trained once, under the first id.
    assert [t.trial_id for t in first.trials] == ["stage1-l0.0-s0", "stage1-l0.05-s0", "constant-0.05-s0"]
    results, _ = simulate(plan, target_score([0.0] * 20))
    assert plan.winners(results)["none"].trained_as == "stage1-l0.0-s0"


# -- finals ------------------------------------------------------------------------------
def test_finals_use_three_seeds_and_reuse_the_search_trial():
    plan = SearchPlan(PAPER_GRID, length=300, seed=7)
    results, history = simulate(plan, target_score(long_tail(300)))
    w = plan.winners(results)
    finals = [t for _, b in history for t in b.trials if t.stage == "final"]
    assert len(finals) == 9
    for family, stage in FAMILY_STAGE.items():
        mine = sorted((t for t in finals if t.family == family), key=lambda t: t.seed)
        assert [t.seed for t in mine] == [7, 8, 9]
        assert [t.trial_id for t in mine] == [f"final-{family}-s{s}" for s in (7, 8, 9)]
        assert all(t.schedule == w[stage].schedule for t in mine)
        assert mine[0].source_trial == w[stage].trained_as  # evaluated, not retrained
        assert mine[1].source_trial is None and mine[2].source_trial is None
        assert [t.params["seed"] for t in mine] == [7, 8, 9]
        assert plan.finals(results)[family] == {t.seed: t.trial_id for t in mine}
    assert {t.seed for _, b in history for t in b.trials if t.stage != "final"} == {7}


# -- failures ----------------------------------------------------------------------------
def test_failed_trials_are_excluded_from_the_choice():
    score = target_score(long_tail(300))
    plan = SearchPlan(PAPER_GRID, length=300, seed=0)
    clean, _ = simulate(plan, score)
    best = plan.winners(clean)["stage1"].trained_as
    assert best == "stage1-l0.05-s0"
    results, _ = simulate(plan, score, fail={best, "constant-0.005-s0"})
    w = plan.winners(results)
    assert w["stage1"].trained_as != best and results[w["stage1"].trained_as] is not None
    assert w["stage1"].trained_as == min(
        (t for t in results if t.startswith("stage1-") and results[t] is not None), key=results.__getitem__
    )
    assert plan.done(results)


def test_nan_counts_as_a_failure():
    plan = SearchPlan(SMOKE_GRID, length=20, seed=0)
    results = {"stage1-l0.01-s0": float("nan"), "stage1-l0.05-s0": 0.3, "constant-0.01-s0": 0.1, "none-s0": 0.2}
    assert plan.winners(results)["stage1"].trained_as == "stage1-l0.05-s0"


NO_K2_BELOW_K1 = GridConfig(lambdas=PAPER_GRID.lambdas, k1=3, k2=(11, 21), constants=PAPER_GRID.constants)


@pytest.mark.parametrize(
    "grid, stage, prefix",
    [(PAPER_GRID, "stage2", "stage2-"), (PAPER_GRID, "none", "none-"), (NO_K2_BELOW_K1, "joint", "joint-")],
)
def test_a_stage_where_every_trial_failed_stops_the_search(grid, stage, prefix):
    plan = SearchPlan(grid, length=300, seed=0)
    score = target_score(long_tail(300))
    results: dict[str, float | None] = {}
    with pytest.raises(StageFailed) as e:
        while batch := plan.next_batch(results):
            for t in batch.trials:
                results[t.trial_id] = None if t.trial_id.startswith(prefix) else score(t.schedule.values)
    assert e.value.stage == stage
    assert e.value.trial_ids and all(tid.startswith(prefix) for tid in e.value.trial_ids)
    assert stage in str(e.value)


def test_joint_trainings_all_failing_falls_back_to_the_stage_k1_winner():
    # k2 = 1 <= k1 is a joint candidate too: the stage-3 winner, which did not fail.
    plan = SearchPlan(PAPER_GRID, length=300, seed=0)
    results: dict[str, float | None] = {}
    score = target_score(long_tail(300))
    while batch := plan.next_batch(results):
        for t in batch.trials:
            results[t.trial_id] = None if t.stage == "joint" else score(t.schedule.values)
    w = plan.winners(results)
    assert w["joint"].trained_as == w["stage3"].trained_as


def test_a_failed_final_does_not_block_the_end():
    plan = SearchPlan(SMOKE_GRID, length=20, seed=0)
    results, _ = simulate(plan, target_score([0.01] * 20), fail={"final-none-s1"})
    assert results["final-none-s1"] is None and plan.done(results)


# -- determinism and resume --------------------------------------------------------------
def ids(batch):
    return [t.trial_id for t in batch.trials]


def test_results_in_any_order_give_the_same_plan():
    plan = SearchPlan(PAPER_GRID, length=300, seed=0)
    results, history = simulate(plan, target_score(long_tail(300)))
    rng = random.Random(0)
    for before, batch in history:
        for _ in range(5):
            items = list(before.items())
            rng.shuffle(items)
            again = plan.next_batch(dict(items))
            assert again == batch
    items = list(results.items())
    rng.shuffle(items)
    assert plan.winners(dict(items)) == plan.winners(results)
    assert plan.all_trials(dict(items)) == plan.all_trials(results)


def test_resume_after_a_crash_runs_only_what_is_missing_and_picks_the_same_winners():
    score = target_score(hero_like(300))
    plan = SearchPlan(PAPER_GRID, length=300, seed=0)
    clean, history = simulate(plan, score)
    for n, (before, batch) in enumerate(history):
        # The driver died after half of batch n reported.
        done_half = dict(before)
        for t in batch.trials[::2]:
            done_half[t.trial_id] = clean[t.trial_id]
        resumed = plan.next_batch(done_half)
        assert not set(ids(resumed)) & set(done_half)
        assert set(ids(batch)) - set(done_half) <= set(ids(resumed))
        # Finish from there: nothing is trained twice and the outcome is the same.
        results = dict(done_half)
        while b := plan.next_batch(results):
            for t in b.trials:
                assert t.trial_id not in results
                results[t.trial_id] = score(t.schedule.values) + 0.001 * t.seed
        assert results == clean
        assert plan.winners(results) == plan.winners(clean)


def test_trial_ids_are_unique_readable_and_filesystem_safe():
    plan = SearchPlan(PAPER_GRID, length=300, seed=0)
    results, history = simulate(plan, target_score(long_tail(300)))
    all_ids = [t.trial_id for _, b in history for t in b.trials]
    assert len(all_ids) == len(set(all_ids)) == 42
    assert all(re.fullmatch(r"[a-z0-9.-]+", tid) for tid in all_ids)
    assert {"stage2-l0.005-s0", "joint-la0.01-k21-s0", "constant-0.01-s0", "none-s0",
            "final-time-dependent-s1"} <= set(all_ids)
    assert sorted(t.trial_id for t in plan.all_trials(results)) == sorted(all_ids)


def test_params_record_the_schedule_for_tracking():
    plan = SearchPlan(PAPER_GRID, length=300, seed=0)
    results, history = simulate(plan, target_score(long_tail(300)))
    by_id = {t.trial_id: t for _, b in history for t in b.trials}
    assert by_id["stage2-l0.005-s0"].params == {
        "schedule": "l1=0.05 l2=0.005 rest=0", "lambda_1": 0.05, "lambda_2": 0.005, "seed": 0,
    }
    assert by_id["joint-la0.01-k21-s0"].params == {
        "schedule": "l1=0.05 l2..21=0.01 rest=0", "lambda_1": 0.05, "lambda_2": 0.01, "lambda_3": 0.01,
        "lambda_all": 0.01, "k2": 21, "seed": 0,
    }
    assert by_id["constant-0.01-s0"].params == {"schedule": "all=0.01", "lambda_const": 0.01, "seed": 0}
    assert by_id["none-s0"].params == {"schedule": "all=0", "seed": 0}
    final = by_id["final-time-dependent-s2"]
    assert final.params == {**plan.winners(results)["joint"].candidate.params, "seed": 2}
    assert (final.stage, final.family) == ("final", "time-dependent")
    for t in by_id.values():
        assert t.params["schedule"] == str(t.schedule)


# -- the joint stage through Optuna ------------------------------------------------------
def test_optuna_joint_stage_is_a_space_the_runner_searches():
    score = target_score(long_tail(300))
    plan = SearchPlan(PAPER_GRID, length=300, seed=0, joint_search="optuna")
    grid_plan = SearchPlan(PAPER_GRID, length=300, seed=0)
    results: dict[str, float | None] = {}
    while (batch := plan.next_batch(results)).joint_space is None:
        assert "joint" not in batch.stages
        for t in batch.trials:
            results[t.trial_id] = score(t.schedule.values)
    space = batch.joint_space
    assert batch.trials == [] and batch.stages == ("joint",)
    assert space.prefix == tuple(plan.winners(results)["stage3"].schedule.values[:3])
    assert (space.lambdas, space.k2) == (PAPER_GRID.lambdas, PAPER_GRID.k2)
    assert (space.budget, space.trained, space.remaining) == (16, 0, 16)  # no budget given: the grid's
    assert plan.joint_trainings == 16
    # Already known: the four k2 = 1 candidates (the stage-3 winner).
    assert sorted(k2 for _, k2, _ in space.evaluated) == [1, 1, 1, 1]
    assert space.joint_trial(0.01, 1).trial_id == plan.winners(results)["stage3"].trained_as
    # The runner's specs are the ones the grid would have trained.
    grid_joint = grid_plan.next_batch(results)
    assert space.joint_trial(0.01, 21) == next(t for t in grid_joint.trials if t.trial_id == "joint-la0.01-k21-s0")
    with pytest.raises(ValueError, match="not on the joint grid"):
        space.joint_trial(0.02, 21)

    # With a budget of 6 joint trainings, Optuna tries 5 points (one of them twice: same
    # spec, same id): the stage is still open; the sixth decides it.
    budgeted = SearchPlan(PAPER_GRID, length=300, seed=0, joint_search="optuna", joint_budget=6)
    assert budgeted.next_batch(results).joint_space.budget == 6
    for lambda_all, k2 in [(0.01, 21), (0.005, 51), (0.01, 21), (0.05, 11), (0.005, 21), (0.001, 11)]:
        spec = space.joint_trial(lambda_all, k2)
        results.setdefault(spec.trial_id, score(spec.schedule.values))
    again = budgeted.next_batch(results)
    assert again.joint_space is not None and again.joint_space.trained == 5 and again.trials == []
    assert not budgeted.winners(results).get("joint")

    spec = space.joint_trial(0.001, 101)
    results[spec.trial_id] = None  # a failed training counts against the budget too
    plan = budgeted
    w = plan.winners(results)
    tried = {tid for tid in results if tid.startswith("joint-")} | {w["stage3"].trained_as}
    assert w["joint"].trained_as in tried
    assert w["joint"].trained_as == "joint-la0.005-k21-s0"  # the best of what Optuna tried
    final = plan.next_batch(results)
    assert final.joint_space is None and {t.family for t in final.trials} == {"time-dependent"}


def test_optuna_joint_stage_ends_by_itself_when_the_whole_grid_is_known():
    plan = SearchPlan(SMOKE_GRID, length=20, seed=0, joint_search="optuna")
    score = target_score([0.05] * 20)
    results: dict[str, float | None] = {}
    while batch := plan.next_batch(results):
        for t in batch.trials:
            results[t.trial_id] = score(t.schedule.values)
        if batch.joint_space:
            for lambda_all in SMOKE_GRID.lambdas:
                for k2 in SMOKE_GRID.k2:
                    spec = batch.joint_space.joint_trial(lambda_all, k2)
                    results.setdefault(spec.trial_id, score(spec.schedule.values))
    assert plan.done(results) and batch.joint_space is None


def test_dry_run_lists_every_batch_assuming_a_grid():
    plan = SearchPlan(PAPER_GRID, length=300, seed=0, joint_search="optuna")
    batches = plan.dry_run()
    assert [len(b.trials) for b in batches] == [9, 10, 4, 16, 3]
    s = cost.stats(plan, batches)
    assert (s.batches, s.trainings, s.evaluations) == (5, 39, 3)
    # With real results, the past batches come out as they ran.
    results, history = simulate(SearchPlan(PAPER_GRID, 300, 0), target_score(long_tail(300)))
    assert plan.dry_run(results) == [b for _, b in history]


# -- construction ------------------------------------------------------------------------
@pytest.mark.parametrize(
    "kwargs, words",
    [
        ({"length": 2}, "shorter than k1"),
        ({"joint_search": "optuna", "joint_budget": 0}, "joint_budget 0"),
        ({"joint_search": "random"}, "not one of grid, optuna"),
        ({"final_seeds": 0}, "final_seeds"),
        ({"tie_se": -1.0}, "tie_se -1.0"),
    ],
)
def test_invalid_plans_are_rejected(kwargs, words):
    args = {"grid": PAPER_GRID, "length": 300, "seed": 0} | kwargs
    with pytest.raises(ValueError, match=re.escape(words)):
        SearchPlan(**args)
