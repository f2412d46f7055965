"""The command line of ``python -m focus_tune.search``: the one typed :class:`SearchOptions` the
rest of the search reads, each of its fields a flag (the parser is written from them, the
argparse namespace ends here), and the checks of the flags."""

from __future__ import annotations

import argparse
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from ..arguments import (
    OneLineParser,
    add_flags,
    check_value,
    flag,
    flag_fields,
    flag_name,
    int_at_least,
    number_above,
    parsed,
    version_text,
)
from ..config.scenarios import ScenarioFlags, scenario_from
from ..config.space import parse_override
from ..data import BUILTIN_SCENARIOS
from ..errors import SearchError
from ..names import JOINT_SEARCHES

# The fewest test (and validation) items a search of one's own data reads without --allow-small:
# below it the test ECE's standard error (about 0.12 / sqrt(n) on the worked example's chain:
# SD <= 0.0092 from n = 172-177 fitted, 180 on the measured grid) exceeds the smallest gap
# between a family and image-blind seen there (0.0092). Measured by
# benchmarks/bench_small_data.py; docs/DATA.md, "How small".
MIN_SPLIT_ITEMS = 180


def pack_size(text: str) -> int | str:
    """``--pack``: an integer >= 1, or ``auto``."""
    if text == "auto":
        return text
    try:
        return int_at_least(1)(text)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1 or 'auto', got {text[:40]!r}") from None


def run_name(text: str) -> str:
    """``--name``: it names a folder, so 1 to 100 letters, digits, '_', '-' or '.', not starting with '.' or '-'."""
    if not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,99}", text):
        raise argparse.ArgumentTypeError(f"{text[:40]!r}: a run folder's name: 1 to 100 letters, digits, '_', '-' or "
                                         "'.', starting with a letter, digit or '_'")
    return text


def experiment_name(text: str) -> str:
    """``--experiment``: an MLflow experiment's name, not empty."""
    if not text.strip():
        raise argparse.ArgumentTypeError("an MLflow experiment's name, not empty")
    return text


def gpu_type(text: str) -> str:
    """``--gpu-type``: a GPU's name with at least one letter or digit (A10G, H100, "RTX 4090")."""
    if not re.search(r"[A-Za-z0-9]", text):
        raise argparse.ArgumentTypeError(f"{text[:40]!r}: a GPU's name, such as A10G or H100")
    return text


def registered_name(text: str) -> str:
    """A registered model's name: not empty, no '/' or ':' (they would break models:/NAME@alias)."""
    if not text.strip() or any(ch in text for ch in "/:@"):
        raise argparse.ArgumentTypeError(f"{text!r}: a registered model name, without '/', ':' or '@'")
    return text


@dataclass(frozen=True)
class SearchOptions(ScenarioFlags):
    """What the user asked for: every field a flag of ``python -m focus_tune.search`` (the
    parser is written from them, :func:`build_parser`) and a keyword of ``run_search``, each
    default the flag's. ``--game``, ``--profile`` and ``--data`` are every command's
    (:class:`~focus_tune.config.scenarios.ScenarioFlags`); the scenario, None when --data names
    it, and the --set overrides are resolved by :func:`resolved`, which the search reads."""

    space: Path | None = flag("a search-space YAML of your own instead of the packaged one", type=Path)
    data_root: Path = flag("where built-in datasets are built and cached (default: ./data_cache)",
                           default=Path("data_cache"), type=Path)
    storage: str = flag("Ray Tune storage: a folder (default runs/), on a multi-node cluster one every node reaches, "
                        "or a URI such as s3://bucket/prefix (the search state and report then stay in runs/ on the "
                        "driver's machine)", default="runs")
    address: str | None = flag("an existing Ray cluster: 'auto' on one of its nodes (a job's driver, the head), or "
                               "its GCS HOST:PORT; default: start a local Ray")
    tracking_uri: str | None = flag("MLflow tracking URI (default: sqlite:///mlflow.db in the working directory)")
    # One CPU (one torch thread) per trial: measured fastest on a laptop (search/driver.py, fit).
    cpus_per_trial: float = flag("CPUs per trial, also its torch threads (default 1)", default=1.0,
                                 type=number_above(0.0))
    gpus_per_trial: float = flag("GPUs per trial; fractions below 1 share a GPU", default=0.0,
                                 type=number_above(0.0, inclusive=True))
    max_concurrent: int | None = flag("at most this many trials at once (default: no limit)", type=int_at_least(1))
    # trainings per trial (focus_tune.sim.packed); 1: one per trial; "auto": rates.auto_pack
    pack: int | str = flag("train up to this many runnable candidates together as one trial, one program on its "
                           "device (for GPUs: docs/BENCHMARKS.md, 'Packed trials'); each keeps its own MLflow run, "
                           "checkpoint and result. 'auto': 1 without GPUs, else from the measured pack rates "
                           "(focus_tune/procedure/gpu_pack_rates.json). Default 1: one per trial, the right choice "
                           "on a CPU", default=1, type=pack_size)
    wait_for_resources: bool = flag("start even when no node has the CPUs/GPUs a trial needs, and wait for an "
                                    "autoscaler to add one (default: fail at once, naming what the cluster has)",
                                    default=False)
    seed: int = flag("search seed; the finals use seed, seed+1, ... (--final-seeds of them)", default=0,
                     type=int_at_least(0))
    final_seeds: int | None = flag("retrainings of each family's winner, one per seed (default: the search space's "
                                   "final_seeds, 3 as in the paper); the families share their seeds, so they are "
                                   "compared paired", type=int_at_least(1))
    resume: bool = flag("continue the search in its run folder", default=False)
    joint_search: str = flag("the joint lambda_all x k2 stage: the paper's grid, or Optuna with --joint-budget "
                             "trainings", default="grid", choices=JOINT_SEARCHES)
    joint_budget: int | None = flag("with --joint-search optuna: joint trainings Optuna may spend (default: half "
                                    "the grid's)", type=int_at_least(1))
    register: str | None = flag("register each family's final model as a version of the MLflow registered model "
                                "NAME, with the family as its alias (models:/NAME@time-dependent)", metavar="NAME",
                                type=registered_name)
    max_retries: int = flag("retries of a crashed trial from its checkpoint", default=2, type=int_at_least(0))
    dry_run: bool = flag("print the trial plan and its cost, run nothing", default=False)
    # --set KEY=VALUE, in order: the texts (or run_search's forms), (key, value) pairs once resolved
    overrides: tuple[str | tuple[str, Any], ...] = flag(
        "override one key of the resolved search space, e.g. train.epochs=12, grid.lambdas=[0.01,0.1], "
        "final_seeds=2 (the value read as YAML; repeatable; checked as the file is; docs/CONFIG.md lists the keys); "
        "recorded in the search state, the MLflow parent run (set.KEY) and the report",
        default=(), name="--set", metavar="KEY=VALUE", repeat=True)
    print_config: bool = flag("print the resolved search space as YAML (a file --space reads), --set applied, and "
                              "exit", default=False)
    name: str | None = flag("the run folder's name under --storage and the MLflow parent run's (default: "
                            "<scenario>-<profile>-seed<seed>)", type=run_name)
    experiment: str | None = flag("the MLflow experiment (default: focus-tune/<scenario>)", type=experiment_name)
    tensorboard: bool = flag("also write Ray Tune's TensorBoard event files into each trial's folder (tensorboard "
                             "--logdir <run folder>/search); Tune's JSON logs are always written", default=False)
    allow_small: bool = flag(f"search a dataset of your own whose test or validation split holds fewer than "
                             f"{MIN_SPLIT_ITEMS} items (refused otherwise: its ECE could not tell a family from "
                             "image-blind; docs/DATA.md, 'How small')", default=False)
    cluster_gpus: int | None = flag("with --dry-run: estimate wall time and GPU-hours on this many GPUs",
                                    type=int_at_least(1))
    trial_minutes: float | None = flag("with --cluster-gpus: minutes per training at --gpus-per-trial (default: "
                                       "measured from this search's run folder, if any)", type=number_above(0.0))
    gpu_type: str | None = flag("with --dry-run: the cluster's GPU (e.g. A10G, as Ray's accelerator_type); the dry "
                                "run warns when the rates it costs from were measured on another card",
                                metavar="NAME", type=gpu_type)
    rates: Path | None = flag("with --dry-run: GPU rates of your own card, written by python benchmarks/gpu_check.py "
                              "--rates-out PATH (default: $FOCUS_TUNE_GPU_RATES, else the packaged ones of one "
                              "NVIDIA H200)", metavar="PATH", type=Path)

    @property
    def builtin(self) -> bool:
        """Whether the scenario is a built-in one (its packaged search space and GPU rates apply)."""
        return self.scenario in BUILTIN_SCENARIOS

    @property
    def folder_name(self) -> str:
        """The run folder's name under --storage: --name, or ``<scenario>-<profile>-seed<s>``."""
        return self.name if self.name is not None else f"{self.scenario}-{self.profile}-seed{self.seed}"

    @property
    def parent_run_name(self) -> str:
        """The MLflow parent run's name: --name, or ``search-<profile>-seed<s>``."""
        return self.name if self.name is not None else f"search-{self.profile}-seed{self.seed}"

    @property
    def experiment_name(self) -> str:
        """The MLflow experiment: --experiment, or ``focus-tune/<scenario>``."""
        return self.experiment if self.experiment is not None else f"focus-tune/{self.scenario}"


# The flags of --dry-run and --print-config, which print and run no search: no keyword of run_search.
PRINT_ONLY = ("dry_run", "print_config", "cluster_gpus", "trial_minutes", "gpu_type", "rates")
# The search's words for the flags every command shares (ScenarioFlags' texts are the other commands').
HELPS = {"data": "a dataset folder instead of the built-in data: your own (python -m focus_tune.data import-table / "
                 "import-arrays; the search is then named after the dataset and, without --space, uses the generic "
                 "search space) or an imported built-in scenario"}


def build_parser() -> argparse.ArgumentParser:
    """The search's parser: a flag per field of :class:`SearchOptions`, and --version."""
    p = OneLineParser(
        prog="python -m focus_tune.search",
        description="Staged search of the time-dependent logit regularization of a foCus simulator.",
    )
    add_flags(p, SearchOptions, helps=HELPS)
    p.add_argument("--version", action="version", version=version_text())
    return p


def parse_options(argv: Sequence[str] | None = None) -> SearchOptions:
    """The flags as :class:`SearchOptions`, :func:`resolved`; argparse exits on a bad flag (and
    on neither --game nor --data), a SearchError names a bad combination (:func:`check_flags`),
    a DataError an unreadable --data manifest, a ConfigError a bad --set."""
    parser = build_parser()
    options = SearchOptions(**parsed(SearchOptions, parser.parse_args(argv)))
    try:
        scenario = scenario_from(options.scenario, options.data)
    except SearchError as err:  # neither --game nor --data: argparse's failure, as a missing flag's
        parser.error(str(err))
    return resolved(replace(options, scenario=scenario))


def check_values(options: SearchOptions) -> SearchOptions:
    """Options given in Python (``run_search``), each value checked and converted as its flag's
    text is (its type, its choices; ``arguments.check_value``); a SearchError names the keyword.
    A ``game`` beside ``data`` may be the dataset's own name (checked with the dataset)."""
    values = {}
    for name, f in flag_fields(SearchOptions).items():
        value = getattr(options, name)
        if name == "overrides" or (name == "scenario" and options.data is not None and isinstance(value, str)):
            values[name] = value  # the overrides: override_pairs; a dataset's own name: check_scenario
            continue
        try:
            values[name] = check_value(f, value)
        except (argparse.ArgumentTypeError, ValueError) as err:
            keyword = flag_name(f).lstrip("-").replace("-", "_")  # run_search's keyword: game for scenario
            raise SearchError(f"{keyword}={value!r}: {err}") from None
    return SearchOptions(**values)


def resolved(options: SearchOptions) -> SearchOptions:
    """``options`` as the search reads them: the scenario by the rule every command follows
    (``config.scenarios.scenario_from``), the --set overrides as (key, value) pairs
    (:func:`override_pairs`), checked across flags (:func:`check_flags`)."""
    options = replace(options, scenario=scenario_from(options.scenario, options.data),
                      overrides=override_pairs(options.overrides))
    check_flags(options)
    return options


def override_pairs(overrides: Mapping[str, Any] | Iterable[str] | Iterable[tuple[str, Any]]
                   ) -> tuple[tuple[str, Any], ...]:
    """--set's overrides as (key, value) pairs, in order: of ``{"train.epochs": 5}``,
    ``["train.epochs=5"]`` (each text read as --set reads it; a ConfigError names a bad one) or
    ``[("train.epochs", 5)]``."""
    if isinstance(overrides, Mapping):
        return tuple((str(k), v) for k, v in overrides.items())
    return tuple(parse_override(item) if isinstance(item, str) else tuple(item) for item in overrides)


def check_flags(args: SearchOptions) -> None:
    """Checks across flags that argparse cannot make; a SearchError names the flags (a
    DataError a --data that is not a folder)."""
    if args.gpus_per_trial > 1 and args.gpus_per_trial != int(args.gpus_per_trial):
        raise SearchError(f"--gpus-per-trial {args.gpus_per_trial:g}: above 1, a trial takes whole GPUs "
                          "(Ray shares only fractions below 1)")
    if not args.dry_run and (args.cluster_gpus is not None or args.trial_minutes is not None):
        raise SearchError("--cluster-gpus and --trial-minutes estimate costs: use them with --dry-run")
    if not args.dry_run and (args.gpu_type is not None or args.rates is not None):
        raise SearchError("--gpu-type and --rates are what the dry run costs with: use them with --dry-run")
    if args.trial_minutes is not None and args.cluster_gpus is None:
        # The estimate is of a cluster of --cluster-gpus GPUs (cost.plan_cost); without it the time
        # would be read and not used.
        raise SearchError(f"--trial-minutes {args.trial_minutes:g} times the plan on --cluster-gpus N: give "
                          "--cluster-gpus (the GPUs the search will have, this machine's too) with it")
    if args.cluster_gpus is not None and args.gpus_per_trial > args.cluster_gpus:
        raise SearchError(f"--gpus-per-trial {args.gpus_per_trial:g} is more than --cluster-gpus {args.cluster_gpus}: "
                          "no trial could ever start")
    if args.address is not None and args.address.startswith("ray://"):
        # Ray Client would run Tune's loop (the searcher, the MLflow and search-state callbacks)
        # in an actor on the cluster, apart from this process's search state and report.
        raise SearchError(f"--address {args.address}: Ray Client (ray://) is not supported: Tune's loop would run in "
                          "an actor on the cluster, away from this driver's search state and MLflow logging; run the "
                          "search on a node of the cluster with --address auto (ray job submit --address "
                          "http://HEAD:8265 -- python -m focus_tune.search ... --address auto; docs/CLUSTER.md)")
    if args.final_seeds is not None and any(key == "final_seeds" for key, _ in args.overrides):
        raise SearchError("--final-seeds and --set final_seeds say the same: give one of them")
    if args.joint_budget is not None and args.joint_search != "optuna":
        raise SearchError("--joint-budget is the budget of --joint-search optuna; the grid trains every candidate")
    if args.data is not None:
        from ..config.scenarios import check_data_folder

        check_data_folder(args.data)
    if not args.builtin and args.data is None:
        raise SearchError(f"scenario {args.scenario!r} is not built in: pass its dataset with --data")


def check_split_sizes(args: SearchOptions) -> None:
    """A dataset of one's own whose test or validation split is below MIN_SPLIT_ITEMS is refused
    (a SearchError, one line: how many items it needs) unless --allow-small; built-in scenarios,
    the smoke profile (seconds, for tests: its numbers are not read), --dry-run and
    --print-config are not checked. A check of the data, not of the flags: the search calls it
    before it starts (``check_flags`` checks only what the flags say)."""
    if args.allow_small or args.builtin or args.data is None or args.profile == "smoke" or args.dry_run \
            or args.print_config:
        return
    from ..data import read_manifest

    splits = read_manifest(args.data).splits
    small = {s: splits[s] for s in ("test", "val") if splits.get(s, 0) < MIN_SPLIT_ITEMS}
    if small:
        held = ", ".join(f"{'validation' if s == 'val' else s} {n}" for s, n in small.items())
        total = MIN_SPLIT_ITEMS * 10  # the test split is 10 % of the items by default
        raise SearchError(f"--data {args.data}: too small to search ({held} items): below {MIN_SPLIT_ITEMS} items "
                          "in the test and validation splits one standard error of the test ECE exceeds the gap "
                          f"between a family and image-blind, so the search could not tell them apart; it needs "
                          f"at least {MIN_SPLIT_ITEMS} items in each (about {total} items at the default 70/20/10 "
                          "split), or --allow-small to search it anyway (docs/DATA.md, 'How small')")
