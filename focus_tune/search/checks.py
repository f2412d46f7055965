"""What a search and its dry run both check before they start: the flags against the search
space, and the dataset against the game (its splits decoded, so a corrupt file fails here)."""

from __future__ import annotations

import dataclasses

from ..atomic import short
from ..config import ConfigError, SearchConfig, apply_overrides, load_search_config, space_path
from ..data import DataError
from ..job import Splits
from .cli import SearchOptions


def load_config(opts: SearchOptions) -> SearchConfig:
    """The search space of --game (or --space) under --profile, with --set and --final-seeds
    applied; a dataset of one's own without --space gets the generic one (``focus_tune.generic_space``)."""
    if opts.space is not None:
        cfg = load_search_config(opts.space, opts.profile)
    elif opts.builtin:
        cfg = load_search_config(space_path(opts.game), opts.profile)
    else:
        from ..data import read_manifest
        from ..generic_space import generic_config

        cfg = generic_config(opts.game, read_manifest(opts.data).length, opts.profile)
    if cfg.game != opts.game:
        raise ConfigError(f"{cfg.source}: game {short(cfg.game)} does not match --game {opts.game}")
    cfg = apply_overrides(cfg, opts.overrides)
    if opts.final_seeds is not None:
        cfg = dataclasses.replace(cfg, final_seeds=opts.final_seeds)
    return cfg


def check_game(manifest, opts: SearchOptions, data_path) -> None:
    """The dataset is the scenario's: its built-in game, or for one's own data, its name."""
    if manifest.scenario != opts.game:
        raise DataError(f"--data {data_path}: holds a dataset of game {short(manifest.game)}, not --game {opts.game}")


def load_splits(dataset) -> Splits:
    """The three splits (numpy arrays) for the trials: decoding them checks every split file
    (class ids, time to event, marginals), so a corrupt dataset fails before anything runs."""
    return Splits.of(dataset)
