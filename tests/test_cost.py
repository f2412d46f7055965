"""The cost model: slots, the searcher's schedule, wall time, GPU-hours and a search's
efficiency, against hand-computed values."""


import pytest

from focus_tune.config.space import GridConfig, load_search_config, space_path
from focus_tune.data.builtin.profiles import BUILTIN_SCENARIOS, get_spec
from focus_tune.procedure.cost import Resources, efficiency, estimate, naive_rounds, plan_cost, simulate, stats
from focus_tune.procedure.plan import SearchPlan
from focus_tune.procedure.rates import (
    evaluation_minutes_from_rates,
    load_gpu_rates,
    measured_trial_minutes,
    same_gpu,
    training_minutes_from_rates,
    trial_minutes_for,
)


@pytest.fixture(scope="module")
def hero():
    cfg = load_search_config(space_path("hero"), "paper")
    return cfg, SearchPlan(cfg.grid, length=300, seed=0, final_seeds=cfg.final_seeds)


@pytest.mark.parametrize("gpus, per_trial, slots", [
    (8, 0.5, 16), (1, 0.25, 4), (1, 0.3, 3), (1, 1 / 3, 3), (0.7, 0.1, 7), (3, 0.1, 30), (1, 2, 0),
])
def test_slots_from_gpu_fractions(gpus, per_trial, slots):
    assert Resources(1, per_trial, gpus).slots == slots


def test_slots_capped_by_cpus_and_max_concurrent():
    assert Resources(2, 0.25, 4, cluster_cpus=8).slots == 4  # 16 by GPU, 4 by CPU
    assert Resources(1, 0.25, 4, max_concurrent=5).slots == 5
    with pytest.raises(ValueError):
        Resources(1, 0, 4).slots  # nothing limits concurrency


SMALL = GridConfig(lambdas=(0.01, 0.05), k1=1, k2=(1, 5), constants=(0.01,))


def _small_time(t):  # a training takes 1, a test evaluation of a search checkpoint 0.1
    return 0.1 if t.source_trial else 1.0


def test_simulate_hands_out_the_critical_path_first():
    """k1 = 1, two seeds of finals. On 2 slots: stage 1 (2 trainings) [0, 1]; the joint
    trainings (k2 = 5; k2 = 1 is stage 1's winner) before the constant and none candidates
    [1, 2]; constant and none [2, 3]; the training finals, none then constant [3, 4]; the
    time-dependent one [4, 5] beside the three evaluations [4, 4.3]. Unlimited slots: the
    critical path stage 1 -> joint -> final time-dependent = 3. One slot: all the work."""
    plan = SearchPlan(SMALL, length=10, seed=0, final_seeds=2)
    assert simulate(plan, 2, _small_time) == pytest.approx(5.0)
    assert simulate(plan, None, _small_time) == pytest.approx(3.0)
    assert simulate(plan, 1, _small_time) == pytest.approx(9 * 1.0 + 3 * 0.1)


def test_efficiency_against_the_work_bound():
    plan = SearchPlan(SMALL, length=10, seed=0, final_seeds=2)
    results = {t.trial_id: 0.0 for b in plan.dry_run() for t in b.trials}
    seconds = {tid: _small_time(t) for tid, t in {t.trial_id: t for b in plan.dry_run() for t in b.trials}.items()}
    e = efficiency(plan, results, seconds, wall_s=6.0, slots=2)
    assert e["total_trial_s"] == pytest.approx(9.3) and e["critical_path_s"] == pytest.approx(3.0)
    assert e["work_bound_s"] == pytest.approx(9.3 / 2) and e["ratio"] == pytest.approx(6.0 / 4.65)
    one = efficiency(plan, results, seconds, wall_s=9.3, slots=1)
    assert one["ratio"] == pytest.approx(1.0)
    wide = efficiency(plan, results, seconds, wall_s=3.3, slots=8)  # the critical path bounds it
    assert wide["work_bound_s"] == pytest.approx(3.0) and wide["ratio"] == pytest.approx(1.1)


def test_hero_paper_on_one_gpu_runs_everything_in_sequence(hero):
    cfg, plan = hero
    s = stats(plan, plan.dry_run())
    cost = estimate(plan, Resources(1, 1.0, 1), trial_minutes=60, eval_minutes=2, epochs=cfg.train.epochs)
    assert cost.wall_minutes == pytest.approx(s.trainings * 60 + s.evaluations * 2)
    assert cost.gpu_hours_busy == pytest.approx(cost.gpu_hours_billed)  # one GPU, never idle
    assert [b.waves for b in cost.batches] == [len(b.trials) for b in plan.dry_run()]


def test_hero_paper_on_eight_gpus_shared_four_ways(hero):
    cfg, plan = hero
    # 8 GPUs x 4 trials each = 32 slots: every batch (at most 16 trials) is one wave.
    cost = estimate(plan, Resources(2, 0.25, 8), trial_minutes=90, eval_minutes=3)
    assert [b.waves for b in cost.batches] == [1] * len(cost.batches)
    assert cost.wall_minutes == pytest.approx(90 * len(cost.batches))
    s = stats(plan, plan.dry_run())
    assert cost.gpu_hours_busy == pytest.approx((s.trainings * 90 + s.evaluations * 3) * 0.25 / 60)
    assert cost.gpu_hours_billed == pytest.approx(8 * cost.wall_minutes / 60)
    assert 0 < cost.utilization < 1
    # Without overlap and dedup the same cluster needs more rounds: 7 of them, joint (20) in 1 wave.
    assert cost.naive_wall_minutes == pytest.approx(90 * 7)


def test_eval_minutes_default_to_one_epoch(hero):
    cfg, plan = hero
    cost = estimate(plan, Resources(1, 1.0, 2), trial_minutes=200, epochs=cfg.train.epochs)
    assert cost.eval_minutes == pytest.approx(200 / cfg.train.epochs)


def test_naive_rounds_match_the_plans_naive_count(hero):
    _, plan = hero
    assert sum(naive_rounds(plan)) == stats(plan, plan.dry_run()).naive_trainings


def test_estimate_rejects_impossible_requests(hero):
    _, plan = hero
    with pytest.raises(ValueError, match="no trial fits"):
        estimate(plan, Resources(1, 2.0, 1), trial_minutes=10)
    with pytest.raises(ValueError):
        estimate(plan, Resources(1, 1.0, 1), trial_minutes=0)


def test_plan_cost_text(hero):
    cfg, plan = hero
    text = plan_cost(plan, cfg, cluster_gpus=8, gpus_per_trial=0.5, trial_minutes=90, cpus_per_trial=2)
    batches = plan.dry_run()
    for b in batches:  # every trial listed once, with its batch
        for t in b.trials:
            assert text.count(f" {t.trial_id} ") == 1, t.trial_id
    assert text.count("each 2 CPU + 0.5 GPU") == len(batches)
    assert "deduplication saves 4 trainings" in text
    assert "16 trials at once" in text
    assert "estimated wall time 7h30m" in text  # 5 batches x one 90-minute wave
    assert "(evaluates none-s0's checkpoint)" in text


def test_plan_cost_without_a_cluster_or_a_time(hero):
    cfg, plan = hero
    plain = plan_cost(plan, cfg)
    assert "GPU" not in plain and "round 5:" in plain and "each 1 CPU" in plain
    no_time = plan_cost(plan, cfg, cluster_gpus=4, gpus_per_trial=0.0)
    assert "costing with 1 GPU per trial" in no_time and "4 trials at once" in no_time
    assert "pass --trial-minutes" in no_time and "waves per round: 3, 3, 1, 4, 1" in no_time
    assert "GPU rates" not in no_time  # none given
    named = plan_cost(plan, cfg, cluster_gpus=4, gpus_per_trial=0.0, rates=RATES)
    assert "(the GPU rates measured on Test GPU cover --gpus-per-trial 1, 0.5 on the built-in datasets)" in named
    by_epoch = plan_cost(plan, cfg, cluster_gpus=4, gpus_per_trial=1, epoch_minutes=0.5)
    assert "1h40m per training" in by_epoch  # 200 epochs x 0.5 min


def test_measured_trial_minutes():
    assert measured_trial_minutes({}, 0) is None
    seconds = {"stage1-l0.01-s0": 600.0, "stage1-l0.05-s0": 660.0, "none-s0": 540.0,
               "final-none-s0": 4.0,  # evaluates none-s0's checkpoint: not a training
               "final-none-s1": 620.0}
    assert measured_trial_minutes(seconds, 0) == pytest.approx(610 / 60)


# -- per-training minutes from the GPU rates of benchmarks/gpu_check.py --------------------

RATES = {
    "device": "Test GPU", "measured": "2026-01-01", "command": "python benchmarks/gpu_check.py",
    "precision": "bf16", "batch_size": 256, "num_samples": 100,
    "train_samples_per_s_alone": {"3x84x84 L=300": 1000.0},
    "sharing_slowdown": {"1": 1.0, "0.5": 1.5},
    "val_s_per_item_entry": 1e-5,
}


def test_training_minutes_from_rates_by_hand(hero):
    cfg, _ = hero
    spec = get_spec("hero", "paper")  # 98553 training, 16769 validation items, 3x84x84, L = 300
    assert (cfg.train.epochs, cfg.train.eval_every) == (200, 10)
    # 200 epochs x 98553 items / (1000 / 1.5) samples/s + 20 validations x 16769 x 300 x 1e-5 s x 1.5
    expected = (200 * 98553 * 1.5 / 1000 + 20 * 16769 * 300 * 1e-5 * 1.5) / 60
    assert training_minutes_from_rates(RATES, spec, cfg, 0.5) == pytest.approx(expected)
    assert training_minutes_from_rates(RATES, spec, cfg, 1.0) == pytest.approx(expected / 1.5)
    # a test evaluation: 16885 test items x 300 entries x 1e-5 s x 1.5
    assert evaluation_minutes_from_rates(RATES, spec, cfg, 0.5) == pytest.approx(16885 * 300 * 1e-5 * 1.5 / 60)
    assert training_minutes_from_rates(RATES, spec, cfg, 0.25) is None  # fraction not measured
    assert training_minutes_from_rates(RATES, get_spec("facemed", "paper"), cfg, 1.0) is None  # shape not measured


def test_trial_minutes_for_prefers_the_user_then_a_run_then_the_rates(hero):
    cfg, _ = hero
    assert trial_minutes_for(42.0, 10.0, "a run", cfg, "hero", "paper", 0.5, rates=RATES) == (42.0, None,
                                                                                              "--trial-minutes")
    minutes, test_minutes, source = trial_minutes_for(None, None, "", cfg, "hero", "paper", 0.5, rates=RATES)
    assert minutes == pytest.approx(training_minutes_from_rates(RATES, get_spec("hero", "paper"), cfg, 0.5))
    assert test_minutes > 0 and "Test GPU" in source and "validation every 10" in source
    assert trial_minutes_for(None, None, "", cfg, "hero", "paper", 0.5, builtin_data=False,
                             rates=RATES) == (None, None, "")
    assert trial_minutes_for(None, 10.0, "a run", cfg, "hero", "paper", 0.5, rates=RATES) == (10.0, None, "a run")
    assert trial_minutes_for(None, None, "", cfg, "hero", "paper", 0.5) == (None, None, "")  # no rates


@pytest.mark.parametrize("gpu_type, device, same", [
    ("A10G", "NVIDIA A10G", True), ("a10g", "NVIDIA A10G", True), ("H200", "NVIDIA H200", True),
    ("A10G", "NVIDIA H200", False), ("A10", "NVIDIA A10G", False), ("L4", "NVIDIA L40S", False),
    ("H20", "NVIDIA H200", False), ("A100-80G", "NVIDIA A100-SXM4-80GB", True),
    ("A100-40G", "NVIDIA A100-SXM4-80GB", False), ("RTX 4090", "NVIDIA GeForce RTX 4090", True),
])
def test_same_gpu_matches_whole_words_of_the_card(gpu_type, device, same):
    assert same_gpu(gpu_type, device) is same


def test_the_committed_gpu_rates_cover_every_paper_dataset_shape():
    rates = load_gpu_rates()
    assert rates is not None and rates["precision"] in ("bf16", "fp32") and rates["sharing_slowdown"]["1"] == 1.0
    for game in BUILTIN_SCENARIOS:
        spec = get_spec(game, "paper")
        cfg = load_search_config(space_path(game), "paper")
        for fraction in rates["sharing_slowdown"]:
            assert training_minutes_from_rates(rates, spec, cfg, float(fraction)) > 0, (game, fraction)
