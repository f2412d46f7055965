"""What a search and its dry run both check before they start: the flags against the search
space, and the dataset against the scenario (its splits decoded, so a corrupt file fails here)."""

from __future__ import annotations

import dataclasses
import sys

from ..config.space import SearchConfig, apply_overrides, load_search_config, space_path
from ..errors import ConfigError, DataError
from ..procedure.job import Splits
from ..quote import short
from .cli import SearchOptions


def load_config(opts: SearchOptions) -> SearchConfig:
    """The search space of --game (or --space) under --profile, with --set and --final-seeds
    applied; a dataset of one's own without --space gets the generic one (``focus_tune.config.generic``)."""
    if opts.space is not None:
        cfg = load_search_config(opts.space, opts.profile)
    elif opts.builtin:
        cfg = load_search_config(space_path(opts.scenario), opts.profile)
    else:
        from ..config.generic import generic_config
        from ..data import read_manifest

        cfg = generic_config(opts.scenario, read_manifest(opts.data).length, opts.profile)
    if cfg.scenario != opts.scenario:
        raise ConfigError(f"{cfg.source}: scenario {short(cfg.scenario)} does not match --game {opts.scenario}")
    cfg = apply_overrides(cfg, opts.overrides)
    if opts.final_seeds is not None:
        cfg = dataclasses.replace(cfg, final_seeds=opts.final_seeds)
    note = None if opts.print_config or opts.dry_run else recipe_note(opts)
    if note:
        print(f"note: {note}", file=sys.stderr, flush=True)
    return cfg


def recipe_note(opts: SearchOptions) -> str | None:
    """One sentence when a lambda search of one's own data runs on a training recipe that a recipe
    run (``python -m focus_tune.recipe``) did not check, or found not in the regime (the
    unregularized model does not read the images: the lambda schedule is then not worth
    searching, docs/RESULTS.md); None otherwise, and for built-in scenarios and the smoke profile.
    A recipe run's report.json beside --space is what tells."""
    if opts.builtin or opts.data is None or opts.profile == "smoke":
        return None
    import json
    from pathlib import Path

    from ..recipe.tuning import REPORT_KIND

    make = f"python -m focus_tune.recipe --data {opts.data} --profile {opts.profile}"
    if opts.space is None:
        return (f"the training recipe is the generic space's (H.E.R.O.'s {opts.profile} budgets), not checked on this "
                f"data; `{make}` searches one and reports whether the model reads the images, the regime the lambda "
                "search needs")
    try:
        report = json.loads((Path(opts.space).parent / "report.json").read_text())
    except (OSError, ValueError):
        report = None
    if not isinstance(report, dict) or report.get("kind") != REPORT_KIND or report.get("profile") != opts.profile:
        return f"the training recipe of --space {opts.space} was not checked by a recipe run for this profile ({make})"
    best = report["best"]
    if report["regime"]["in_regime"]:
        return None
    return (f"the recipe of --space {opts.space} is not in the regime: on the validation split its CE is below "
            f"image-blind's by {best['val/ce_below_blind']:.4f} +- {best['val/ce_below_blind_se']:.4f} (SE), macro AUC "
            f"{best['val/auc']:.3f} (report.md beside it); the lambda schedule may not matter on this data")


def check_scenario(manifest, opts: SearchOptions, data_path) -> None:
    """The dataset is the scenario's: a built-in one's, or for one's own data, the one of its name."""
    if manifest.scenario != opts.scenario:
        raise DataError(f"--data {data_path}: holds a dataset of scenario {short(manifest.scenario)}, not --game "
                        f"{opts.scenario}")


def load_splits(dataset) -> Splits:
    """The three splits (numpy arrays) for the trials: decoding them checks every split file
    (class ids, time to event, marginals), so a corrupt dataset fails before anything runs."""
    return Splits.of(dataset)
