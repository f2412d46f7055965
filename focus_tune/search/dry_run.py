"""``--dry-run``: the trial plan and its cost, without running anything."""

from __future__ import annotations

from ..config import SearchConfig
from ..data import get_spec, load_dataset
from ..plan import SearchPlan
from .checks import check_game, load_splits
from .cli import SearchOptions
from .storage import read_state, run_dir


def dry_run(cfg: SearchConfig, opts: SearchOptions) -> int:
    """Print the trial plan and what overlap and deduplication save; runs nothing."""
    from ..cost import plan_cost
    from ..rates import measured_trial_minutes, trial_minutes_for

    if opts.data is None:
        length = get_spec(opts.game, opts.profile).length
    else:  # the same checks as a real run: the game, and every split decoded
        dataset = load_dataset(opts.data)
        check_game(dataset.manifest, opts, opts.data)
        load_splits(dataset)
        length = dataset.manifest.length
    plan = SearchPlan(cfg.grid, length=length, seed=opts.seed, final_seeds=cfg.final_seeds)
    print(f"focus-tune dry run: {opts.game} ({opts.profile}), L={length}, "
          f"{cfg.train.epochs} epochs per training, grid {cfg.to_dict()['grid']}")
    folder = run_dir(opts)
    state = read_state(folder)
    measured = measured_trial_minutes(state.trial_seconds, opts.seed) if state else None
    minutes, eval_minutes, source = trial_minutes_for(opts.trial_minutes, measured, f"the median training of {folder}",
                                                      cfg, opts.game, opts.profile, opts.gpus_per_trial,
                                                      builtin_data=opts.data is None)
    if opts.cluster_gpus and minutes:
        print(f"time per training: {source}")
    print(plan_cost(plan, cfg, opts.cluster_gpus, opts.gpus_per_trial, minutes, eval_minutes=eval_minutes,
                    cpus_per_trial=opts.cpus_per_trial, max_concurrent=opts.max_concurrent or 0))
    if opts.pack > 1:
        print(f"--pack {opts.pack}: the rounds and costs above are one training per trial; a round's trainings "
              f"would go up to {opts.pack} to a trial, whose cost this estimate does not model (docs/BENCHMARKS.md, "
              "'Packed trials', costs the paper search with packs from measured GPU rates)")
    return 0
