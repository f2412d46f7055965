"""The Python API of the search, and the command line on top of it.

``run_search(game="hero", profile="smoke", overrides={"train.epochs": 5})`` runs the search that
``python -m focus_tune.search --game hero --profile smoke --set train.epochs=5`` runs (the CLI,
:func:`main`, calls it), and returns a :class:`SearchResult`: the chosen schedules, each stage's
decision, the test tables as pandas DataFrames, the final models' URIs and folders, and the
paths. :func:`load_model` loads a final model or a Ray Tune trial checkpoint. Both are also
``focus_tune.run_search`` and ``focus_tune.load_model``. Errors are exceptions
(:class:`~focus_tune.config.ConfigError`, :class:`~focus_tune.data.DataError`,
:class:`~focus_tune.search.storage.SearchError`, ...), each with the one line the CLI prints.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, Sequence

from ..recipe.tuning import RecipeResult, run_recipe  # the recipe stage (python -m focus_tune.recipe); Ray on use
from ..errors import SearchError
from .storage import CONFIG_FILE, STATE_FILE

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

    from ..predict.loading import Loaded

__all__ = ["RecipeResult", "SearchResult", "load_model", "main", "read_search", "run_recipe", "run_search"]

FAMILIES_ORDER = ("none", "constant", "time-dependent")


@dataclass(frozen=True)
class SearchResult:
    """A finished search, read from its run folder (:func:`read_search`)."""

    run_folder: Path  # runs/<scenario>-<profile>-seed<seed> (or --name)
    report_folder: Path  # its report/: results.md, results.csv, search.json, the figures
    config_path: Path  # its config.yaml: the resolved search space, which --space takes back
    chosen: dict[str, str]  # family -> its chosen schedule ("l1..3=0.005 rest=0")
    decisions: list[dict]  # each stage's decision, as report/search.json's "stages"
    results: "pd.DataFrame"  # report/results.csv: a row per family (and baseline), stat and seed
    parent_run_id: str | None  # the search's MLflow parent run
    model_uris: dict[str, str]  # family -> runs:/<parent run id>/model-<family>
    model_folders: dict[str, Path]  # family -> <run folder>/models/<family>
    registered: dict[str, str] = field(default_factory=dict)  # family -> models:/NAME@<family> (--register)

    @property
    def schedule(self) -> str:
        """The chosen time-dependent schedule (the search's answer)."""
        return self.chosen["time-dependent"]

    @property
    def means(self) -> "pd.DataFrame":
        """The test metrics' means over the final seeds: a row per family and baseline."""
        return self._stat("mean")

    @property
    def ses(self) -> "pd.DataFrame":
        """The standard errors of :attr:`means`."""
        return self._stat("se")

    @property
    def per_seed(self) -> "pd.DataFrame":
        """The test metrics of every seed: indexed by (family, seed)."""
        rows = self.results[self.results["stat"] == "value"].drop(columns="stat")
        return rows.astype({"seed": "Int64"}).set_index(["family", "seed"])  # a row without a seed: <NA>

    def _stat(self, stat: str) -> "pd.DataFrame":
        rows = self.results[self.results["stat"] == stat].drop(columns=["stat", "seed"])
        return rows.set_index("family")


def read_search(run_folder: str | Path, register: str | None = None) -> SearchResult:
    """The :class:`SearchResult` of a finished search's run folder (its report, search state
    and models); ``register``: the registered model's name it was run with (--register)."""
    import pandas as pd

    from ..procedure.state import read_state

    folder = Path(run_folder)
    report = folder / "report"
    if not (report / "results.csv").is_file():
        raise SearchError(f"{folder}: no report/results.csv; not a finished search's run folder")
    search = json.loads((report / "search.json").read_text())
    state = read_state(folder)
    parent = state.parent_run_id if state is not None else None
    families = [f for f in FAMILIES_ORDER if f in search["chosen"]]
    models = {f: folder / "models" / f for f in families if (folder / "models" / f).is_dir()}
    registered = {f: f"models:/{register}@{f}" for f in families} if register else {}
    return SearchResult(
        run_folder=folder, report_folder=report, config_path=folder / CONFIG_FILE, chosen=dict(search["chosen"]),
        decisions=list(search["stages"]), results=pd.read_csv(report / "results.csv"), parent_run_id=parent,
        model_uris={f: f"runs:/{parent}/model-{f}" for f in families} if parent else {}, model_folders=models,
        registered=registered)


def run_search(
    *,
    game: str | None = None,
    data: str | Path | None = None,
    profile: str = "quick",
    space: str | Path | None = None,
    overrides: Mapping[str, Any] | Iterable[str] | Iterable[tuple[str, Any]] = (),
    seed: int = 0,
    final_seeds: int | None = None,
    data_root: str | Path = "data_cache",
    storage: str = "runs",
    name: str | None = None,
    experiment: str | None = None,
    tracking_uri: str | None = None,
    address: str | None = None,
    cpus_per_trial: float = 1.0,
    gpus_per_trial: float = 0.0,
    max_concurrent: int | None = None,
    pack: int | str = 1,
    wait_for_resources: bool = False,
    resume: bool = False,
    joint_search: str = "grid",
    joint_budget: int | None = None,
    register: str | None = None,
    max_retries: int = 2,
    tensorboard: bool = False,
    allow_small: bool = False,
    trainable: Callable | None = None,
) -> SearchResult:
    """Run the staged search, as ``python -m focus_tune.search`` does with the same flags (each
    keyword is the flag of the same name, ``--set`` is ``overrides``: ``{"train.epochs": 5}``,
    ``["train.epochs=5"]`` or ``[("train.epochs", 5)]``), and return what it found. The search
    prints its progress as the CLI does. ``trainable`` replaces the Ray Tune trainable (tests)."""
    from ..config.space import parse_override

    pairs = _override_pairs(overrides, parse_override)
    opts = _options(dict(game=game, data=data, profile=profile, space=space, seed=seed, final_seeds=final_seeds,
                         data_root=data_root, storage=storage, name=name, experiment=experiment,
                         tracking_uri=tracking_uri, address=address, cpus_per_trial=cpus_per_trial,
                         gpus_per_trial=gpus_per_trial, max_concurrent=max_concurrent, pack=pack,
                         wait_for_resources=wait_for_resources, resume=resume, joint_search=joint_search,
                         joint_budget=joint_budget, register=register, max_retries=max_retries,
                         tensorboard=tensorboard, allow_small=allow_small), pairs)
    return _search(opts, trainable)


def _search(opts, trainable=None) -> SearchResult:
    from .driver import run
    from .storage import run_dir

    run(opts, trainable)  # 0, or an exception
    return read_search(run_dir(opts), opts.register)


def _override_pairs(overrides, parse_override) -> tuple[tuple[str, Any], ...]:
    if isinstance(overrides, Mapping):
        return tuple((str(k), v) for k, v in overrides.items())
    pairs = []
    for item in overrides:
        pairs.append(parse_override(item) if isinstance(item, str) else tuple(item))
    return tuple(pairs)


def _options(values: dict[str, Any], overrides: tuple[tuple[str, Any], ...]):
    """The :class:`~focus_tune.search.cli.SearchOptions` of the API's keywords, each checked by
    its flag's own check (argparse's type and choices), then across flags as the CLI does."""
    from .cli import FLAG_FIELDS, SearchOptions, build_parser, check_flags

    actions = {a.dest: a for a in build_parser()._actions}
    checked: dict[str, Any] = {}
    for key, value in values.items():
        action = actions[key]
        if value is not None and action.type is not None:
            try:
                value = action.type(str(value)) if not isinstance(value, bool) else value
            except (argparse.ArgumentTypeError, ValueError) as err:
                raise SearchError(f"{key}={value!r}: {err}") from None
        own_data = key == "game" and values.get("data") is not None  # a dataset's own name (checked with it)
        if value is not None and action.choices is not None and value not in action.choices and not own_data:
            raise SearchError(f"{key}={value!r}: choose one of {', '.join(map(str, action.choices))}")
        if action.nargs == 0 and not isinstance(value, bool):  # store_true flags
            raise SearchError(f"{key}={value!r}: expected True or False")
        checked[FLAG_FIELDS.get(key, key)] = value
    if checked["scenario"] is None:
        if checked["data"] is None:
            raise SearchError("give game= (a built-in scenario) or data= (a dataset folder of your own)")
        from ..config.scenarios import scenario_of

        checked["scenario"] = scenario_of(checked["data"])
    known = {f.name for f in fields(SearchOptions)}
    opts = SearchOptions(**{k: v for k, v in checked.items() if k in known}, overrides=overrides,
                         **{k: actions[k].default for k in known - set(checked) - {"overrides"}})
    check_flags(opts)
    return opts


def main(argv: list[str] | None = None, trainable=None) -> int:
    """The CLI, ``python -m focus_tune.search``: the flags parsed, then :func:`run_search`
    (``--print-config`` and ``--dry-run`` print and exit). ``trainable`` replaces the Ray Tune
    trainable (tests inject faults with it)."""
    from ..arguments import error_exit
    from ..errors import ConfigError, DataError, StageFailed
    from ..interrupt import EXIT_INTERRUPTED, Interrupted
    from . import ray_runtime
    from .cli import parse_options
    from .driver import run

    ray_runtime.quiet()
    try:
        opts = parse_options(argv)
        if opts.print_config or opts.dry_run:
            return run(opts, trainable)
        run_search(**_keywords(opts), trainable=trainable)
        return 0
    except Interrupted:
        return EXIT_INTERRUPTED
    except (ConfigError, DataError, StageFailed, SearchError) as err:
        return error_exit(err)


def _keywords(opts) -> dict[str, Any]:
    """:func:`run_search`'s keywords of parsed flags."""
    import inspect

    names = [p for p in inspect.signature(run_search).parameters if p != "trainable"]
    from .cli import FLAG_FIELDS

    return {name: getattr(opts, FLAG_FIELDS.get(name, name)) for name in names}


def load_model(source: str | Path, family: str = "time-dependent", tracking_uri: str | None = None,
               data: Sequence[str | Path] = ()) -> "Loaded":
    """A model and what using it needs (``.model``, the Simulator in eval mode; ``.class_names``,
    ``.length``, ``.image_shape``, ...), as ``python -m focus_tune.predict --model`` loads it:
    a model folder, a search's run folder (its ``family`` model), ``runs:/<parent run id>``
    (``/model-<family>``), ``models:/NAME@<family>`` or ``models:/<model id>``, or a Ray Tune
    trial checkpoint (``<run folder>/search/<trial id>/checkpoint_000001``)."""
    from ..errors import PredictError
    from ..predict.loading import load

    try:
        return load(str(source), family, tracking_uri, [Path(d) for d in data])
    except PredictError as err:
        raise ValueError(str(err).replace("--model ", "", 1)) from None
