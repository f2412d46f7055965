"""``--dry-run``: the trial plan and its cost, without running anything."""

from __future__ import annotations

from ..config import SearchConfig
from ..data import get_spec, load_dataset
from ..plan import SearchPlan
from .storage import run_dir


def dry_run(cfg: SearchConfig, args) -> int:
    """Print the trial plan and what overlap and deduplication save; runs nothing."""
    from ..cost import plan_cost
    from ..rates import trial_minutes_for
    from .driver import check_game, splits_for_trials

    if args.data is None:
        length = get_spec(args.game, args.profile).length
    else:  # the same checks as a real run: the game, and every split decoded
        dataset = load_dataset(args.data)
        check_game(dataset.manifest, args, args.data)
        splits_for_trials(dataset)
        length = dataset.manifest.length
    plan = SearchPlan(cfg.grid, length=length, seed=args.seed, final_seeds=cfg.final_seeds)
    print(f"focus-tune dry run: {args.game} ({args.profile}), L={length}, "
          f"{cfg.train.epochs} epochs per training, grid {cfg.to_dict()['grid']}")
    minutes, eval_minutes, source = trial_minutes_for(args.trial_minutes, run_dir(args), cfg, args.game,
                                                      args.profile, args.gpus_per_trial,
                                                      builtin_data=args.data is None)
    if args.cluster_gpus and minutes:
        print(f"time per training: {source}")
    print(plan_cost(plan, cfg, args.cluster_gpus, args.gpus_per_trial, minutes, eval_minutes=eval_minutes,
                    cpus_per_trial=args.cpus_per_trial, max_concurrent=args.max_concurrent or 0))
    return 0
