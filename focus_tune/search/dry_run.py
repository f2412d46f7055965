"""``--dry-run``: the trial plan and its cost, without running anything."""

from __future__ import annotations

import os

from ..config.space import SearchConfig
from ..data import get_spec, load_dataset
from ..errors import RatesError, SearchError
from ..procedure.plan import SearchPlan
from ..procedure.rates import resolve_pack
from .checks import check_scenario, load_splits
from .cli import SearchOptions
from .storage import read_state, run_dir


def dry_run(cfg: SearchConfig, opts: SearchOptions) -> int:
    """Print the trial plan and what overlap and deduplication save; runs nothing. Where a time
    comes from measured rates, the output names the card they were measured on, and warns when
    ``--gpu-type`` names another."""
    from ..procedure.cost import plan_cost
    from ..procedure.rates import load_gpu_rates, measured_trial_minutes, trial_minutes_for

    try:
        rates = load_gpu_rates(opts.rates)
    except RatesError as err:
        raise SearchError(str(err)) from None
    if opts.data is None:
        shape = get_spec(opts.scenario, opts.profile)
    else:  # the same checks as a real run: the scenario, and every split decoded
        dataset = load_dataset(opts.data)
        check_scenario(dataset.manifest, opts, opts.data)
        load_splits(dataset)
        shape = dataset.manifest
    length = shape.length
    plan = SearchPlan(cfg.grid, length=length, seed=opts.seed, final_seeds=cfg.final_seeds)
    print(f"focus-tune dry run: {opts.scenario} ({opts.profile}), L={length}, "
          f"{cfg.train.epochs} epochs per training, grid {cfg.to_dict()['grid']}")
    folder = run_dir(opts)
    state = read_state(folder)
    measured = measured_trial_minutes(state.trial_seconds, opts.seed) if state else None
    minutes, eval_minutes, source = trial_minutes_for(opts.trial_minutes, measured, f"the median training of {folder}",
                                                      cfg, opts.scenario, opts.profile, opts.gpus_per_trial,
                                                      builtin_data=opts.data is None, rates=rates)
    measured_on = set()  # the cards whose measured rates the printed times come from
    if opts.cluster_gpus and minutes:
        print(f"time per training: {source}")
        if not opts.trial_minutes and not measured:  # the time came from the rates (trial_minutes_for's order)
            measured_on.add(rates["device"])
    print(plan_cost(plan, cfg, opts.cluster_gpus, opts.gpus_per_trial, minutes, eval_minutes=eval_minutes,
                    cpus_per_trial=opts.cpus_per_trial, max_concurrent=opts.max_concurrent or 0, rates=rates))
    pack, why = resolve_pack(opts.pack, opts.gpus_per_trial, shape)
    if opts.pack == "auto":
        print(f"--pack auto: {why}")
    if pack > 1:
        text, pack_device = pack_cost(plan, cfg, opts, pack, shape, builtin_data=opts.data is None)
        print(text)
        measured_on |= {pack_device} - {None}
    if (warning := gpu_mismatch(opts.gpu_type, measured_on)) is not None:
        print(warning)
    return 0


def gpu_mismatch(gpu_type: str | None, measured_on: set[str]) -> str | None:
    """One warning line when the cluster's GPU (``--gpu-type``) is not the card the printed
    times were measured on, or None."""
    from ..procedure.rates import GPU_RATES_ENV, same_gpu

    other = sorted(device for device in measured_on if not same_gpu(gpu_type, device)) if gpu_type else []
    if not other:
        return None
    own = "--rates PATH" + ("" if os.environ.get(GPU_RATES_ENV) else f" (or ${GPU_RATES_ENV})")
    return (f"warning: the times above come from rates measured on one {' and one '.join(other)}, not on the "
            f"cluster's {gpu_type} (--gpu-type): measure yours with python benchmarks/gpu_check.py --rates-out PATH "
            f"and pass {own}, or give --trial-minutes")


def pack_cost(plan: SearchPlan, cfg: SearchConfig, opts: SearchOptions, pack: int, spec,
              builtin_data: bool) -> tuple[str, str | None]:
    """The cost with packs of ``pack`` trainings per trial, and the card of the pack rates it
    used (None: none used). A pack holds its trial's resources for its members' whole
    training, so the cost model runs the search's rounds with ``pack`` trainings per trial's
    share of the cluster, each taking one pack's time: the user's ``--trial-minutes`` (one
    pack's training), else the measured pack rates."""
    from ..procedure.cost import Resources, estimate
    from ..procedure.rates import load_pack_rates, pack_minutes_from_rates

    head = (f"with --pack {pack}: up to {pack} trainings per trial, the test evaluations alone; "
            f"{sum(t.source_trial is None for b in plan.dry_run() for t in b.trials)} trainings")
    if not opts.cluster_gpus:
        return head, None
    rates = load_pack_rates()
    minutes, source, device = opts.trial_minutes, "--trial-minutes (one pack's training)", None
    if minutes is None and rates and builtin_data:
        minutes = pack_minutes_from_rates(rates, spec, cfg, pack)
        source = f"the pack rates measured on one {rates['device']} ({rates['measured']})"
        device = rates["device"] if minutes else None
    if not minutes:
        return (f"{head}; no time for a pack of {pack} on this data: pass --trial-minutes (one pack's training), "
                f"or measure it (benchmarks/gpu_packed.py)"), None
    share = (opts.gpus_per_trial or 1.0) / pack
    cost = estimate(plan, Resources(opts.cpus_per_trial / pack, share, opts.cluster_gpus), minutes,
                    epochs=cfg.train.epochs)
    return (f"{head}; {minutes:.0f} min per pack ({source}); on {opts.cluster_gpus} GPUs: estimated wall time "
            f"{cost.wall_minutes / 60:.1f} h, GPU-hours {cost.gpu_hours_busy:.1f} busy, {cost.gpu_hours_billed:.1f} "
            f"billed (every pack full and its members started together; where trials are free the searcher runs "
            f"smaller packs instead, one training per free trial first)"), device
