"""The command line of ``python -m focus_tune.search``: its flags, their checks and the one
typed :class:`SearchOptions` the rest of the search reads (the argparse namespace ends here)."""

from __future__ import annotations

import argparse
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from ..arguments import OneLineParser, int_at_least, number_above, version_text
from ..config.space import parse_override
from ..data import BUILTIN_SCENARIOS
from ..names import JOINT_SEARCHES, PROFILES
from ..errors import SearchError


# The fewest test (and validation) items a search of one's own data reads without --allow-small:
# below it the test ECE's standard error (about 0.12 / sqrt(n) on the worked example's chain:
# SD <= 0.0092 from n = 172-177 fitted, 180 on the measured grid) exceeds the smallest gap
# between a family and image-blind seen there (0.0092). Measured by
# benchmarks/bench_small_data.py; docs/DATA.md, "How small".
MIN_SPLIT_ITEMS = 180


@dataclass(frozen=True)
class SearchOptions:
    """What the user asked for, checked; the defaults are the parser's (:func:`build_parser`)."""

    scenario: str  # --game: a built-in scenario; or (--data without --game) the dataset's name
    profile: str
    space: Path | None
    data: Path | None
    data_root: Path
    storage: str
    address: str | None
    tracking_uri: str | None
    cpus_per_trial: float  # also the trial's torch threads
    gpus_per_trial: float
    max_concurrent: int | None
    pack: int | str  # trainings per trial (focus_tune.sim.packed); 1: one per trial; "auto": rates.auto_pack
    wait_for_resources: bool
    seed: int
    final_seeds: int | None  # None: the search space's
    resume: bool
    joint_search: str
    joint_budget: int | None
    register: str | None
    max_retries: int
    dry_run: bool
    cluster_gpus: int | None
    trial_minutes: float | None
    gpu_type: str | None = None  # with --dry-run: the cluster's GPU, checked against the rates' card
    rates: Path | None = None  # with --dry-run: a rates file of benchmarks/gpu_check.py (rates.load_gpu_rates)
    print_config: bool = False
    overrides: tuple[tuple[str, Any], ...] = ()  # --set KEY=VALUE, in order (config.apply_overrides)
    name: str | None = None  # the run folder's and the MLflow parent run's name
    experiment: str | None = None  # the MLflow experiment
    tensorboard: bool = False  # Ray Tune's TensorBoard event files in each trial's folder
    allow_small: bool = False  # search a dataset of one's own whose test or val split is below MIN_SPLIT_ITEMS

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


# The flags whose SearchOptions field has another name (the flag's, and run_search's keyword, kept).
FLAG_FIELDS = {"game": "scenario"}


def parse_options(argv: Sequence[str] | None = None) -> SearchOptions:
    """The flags as :class:`SearchOptions`; argparse exits on a bad flag, a SearchError names
    a bad combination (:func:`check_flags`), a DataError an unreadable --data manifest."""
    parser = build_parser()
    args = {FLAG_FIELDS.get(k, k): v for k, v in vars(parser.parse_args(argv)).items()}
    if args["scenario"] is None:
        if args["data"] is None:
            parser.error("the following arguments are required: --game (or --data DIR, a dataset of your own)")
        from ..config.scenarios import scenario_of

        args["scenario"] = scenario_of(args["data"])
    args["overrides"] = tuple(parse_override(text) for text in args["overrides"])  # a ConfigError names a bad one
    options = SearchOptions(**args)
    check_flags(options)
    return options


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(
        prog="python -m focus_tune.search",
        description="Staged search of the time-dependent logit regularization of a foCus simulator.",
    )
    p.add_argument("--game", choices=BUILTIN_SCENARIOS,
                   help="a built-in scenario (search_spaces/<scenario>.yaml); without it, --data names the scenario")
    p.add_argument("--profile", default="quick", choices=PROFILES,
                   help="smoke: seconds (tests); quick: a laptop (default); paper: the paper's sizes (GPUs)")
    p.add_argument("--space", type=Path, help="a search-space YAML of your own instead of the packaged one")
    p.add_argument("--data", type=Path,
                   help="a dataset folder instead of the built-in data: your own (python -m focus_tune.data "
                        "import-table / import-arrays; the search is then named after the dataset and, "
                        "without --space, uses the generic search space) or an imported built-in scenario")
    p.add_argument("--data-root", type=Path, default=Path("data_cache"),
                   help="where built-in datasets are built and cached (default: ./data_cache)")
    p.add_argument("--storage", default="runs",
                   help="Ray Tune storage: a folder (default runs/), on a multi-node cluster one every node "
                        "reaches, or a URI such as s3://bucket/prefix (the search state and report then "
                        "stay in runs/ on the driver's machine)")
    p.add_argument("--address", help="an existing Ray cluster: 'auto' on one of its nodes (a job's driver, the head), "
                                     "or its GCS HOST:PORT; default: start a local Ray")
    p.add_argument("--tracking-uri", help="MLflow tracking URI (default: sqlite:///mlflow.db in the working directory)")
    # One CPU (one torch thread) per trial: measured fastest on a laptop (search/driver.py, fit).
    p.add_argument("--cpus-per-trial", type=number_above(0.0), default=1.0,
                   help="CPUs per trial, also its torch threads (default 1)")
    p.add_argument("--gpus-per-trial", type=number_above(0.0, inclusive=True), default=0.0,
                   help="GPUs per trial; fractions below 1 share a GPU")
    p.add_argument("--max-concurrent", type=int_at_least(1),
                   help="at most this many trials at once (default: no limit)")
    p.add_argument("--pack", type=pack_size, default=1,
                   help="train up to this many runnable candidates together as one trial, one program on its "
                        "device (for GPUs: docs/BENCHMARKS.md, 'Packed trials'); each keeps its own MLflow run, "
                        "checkpoint and result. 'auto': 1 without GPUs, else from the measured pack rates "
                        "(focus_tune/procedure/gpu_pack_rates.json). Default 1: one per trial, the right choice on "
                        "a CPU")
    p.add_argument("--wait-for-resources", action="store_true",
                   help="start even when no node has the CPUs/GPUs a trial needs, and wait for an autoscaler "
                        "to add one (default: fail at once, naming what the cluster has)")
    p.add_argument("--seed", type=int_at_least(0), default=0,
                   help="search seed; the finals use seed, seed+1, ... (--final-seeds of them)")
    p.add_argument("--final-seeds", type=int_at_least(1),
                   help="retrainings of each family's winner, one per seed (default: the search space's "
                        "final_seeds, 3 as in the paper); the families share their seeds, so they are compared paired")
    p.add_argument("--resume", action="store_true", help="continue the search in its run folder")
    p.add_argument("--joint-search", choices=JOINT_SEARCHES, default="grid",
                   help="the joint lambda_all x k2 stage: the paper's grid, or Optuna with --joint-budget trainings")
    p.add_argument("--joint-budget", type=int_at_least(1),
                   help="with --joint-search optuna: joint trainings Optuna may spend (default: half the grid's)")
    p.add_argument("--register", metavar="NAME", type=registered_name,
                   help="register each family's final model as a version of the MLflow registered model NAME, "
                        "with the family as its alias (models:/NAME@time-dependent)")
    p.add_argument("--max-retries", type=int_at_least(0), default=2,
                   help="retries of a crashed trial from its checkpoint")
    p.add_argument("--dry-run", action="store_true", help="print the trial plan and its cost, run nothing")
    p.add_argument("--set", dest="overrides", metavar="KEY=VALUE", action="append", default=[],
                   help="override one key of the resolved search space, e.g. train.epochs=12, grid.lambdas=[0.01,0.1], "
                        "final_seeds=2 (the value read as YAML; repeatable; checked as the file is; docs/CONFIG.md "
                        "lists the keys); recorded in the search state, the MLflow parent run (set.KEY) and the report")
    p.add_argument("--print-config", action="store_true",
                   help="print the resolved search space as YAML (a file --space reads), --set applied, and exit")
    p.add_argument("--name", type=run_name,
                   help="the run folder's name under --storage and the MLflow parent run's "
                        "(default: <scenario>-<profile>-seed<seed>)")
    p.add_argument("--experiment", type=experiment_name,
                   help="the MLflow experiment (default: focus-tune/<scenario>)")
    p.add_argument("--tensorboard", action="store_true",
                   help="also write Ray Tune's TensorBoard event files into each trial's folder "
                        "(tensorboard --logdir <run folder>/search); Tune's JSON logs are always written")
    p.add_argument("--allow-small", action="store_true",
                   help=f"search a dataset of your own whose test or validation split holds fewer than "
                        f"{MIN_SPLIT_ITEMS} items (refused otherwise: its ECE could not tell a family from "
                        "image-blind; docs/DATA.md, 'How small')")
    p.add_argument("--version", action="version", version=version_text())
    p.add_argument("--cluster-gpus", type=int_at_least(1),
                   help="with --dry-run: estimate wall time and GPU-hours on this many GPUs")
    p.add_argument("--trial-minutes", type=number_above(0.0),
                   help="with --cluster-gpus: minutes per training at --gpus-per-trial "
                        "(default: measured from this search's run folder, if any)")
    p.add_argument("--gpu-type", metavar="NAME", type=gpu_type,
                   help="with --dry-run: the cluster's GPU (e.g. A10G, as Ray's accelerator_type); the dry run "
                        "warns when the rates it costs from were measured on another card")
    p.add_argument("--rates", metavar="PATH", type=Path,
                   help="with --dry-run: GPU rates of your own card, written by python benchmarks/gpu_check.py "
                        "--rates-out PATH (default: $FOCUS_TUNE_GPU_RATES, else the packaged ones of one NVIDIA H200)")
    return p


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
