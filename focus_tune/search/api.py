"""The Python API of the search, and the command line on top of it.

``run_search(game="hero", profile="smoke", options=SearchOptions(overrides={"train.epochs": 5}))``,
or with the flags as keywords ``run_search(game="hero", profile="smoke", overrides={"train.epochs": 5})``,
runs the search that ``python -m focus_tune.search --game hero --profile smoke --set train.epochs=5``
runs (the CLI, :func:`main`, calls it), and returns a :class:`SearchResult`: the chosen schedules, each stage's
decision, the test tables as pandas DataFrames, the final models' URIs and folders, and the
paths. :func:`load_model` loads a final model or a Ray Tune trial checkpoint. Both are also
``focus_tune.run_search`` and ``focus_tune.load_model``. Errors are exceptions
(:class:`~focus_tune.config.ConfigError`, :class:`~focus_tune.data.DataError`,
:class:`~focus_tune.search.storage.SearchError`, ...), each with the one line the CLI prints.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

from ..errors import SearchError
from ..recipe.tuning import RecipeResult, run_recipe  # the recipe stage (python -m focus_tune.recipe); Ray on use
from .cli import PRINT_ONLY, SearchOptions, check_values, resolved
from .storage import CONFIG_FILE

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

    from ..predict.loading import Loaded

__all__ = ["RecipeResult", "SearchOptions", "SearchResult", "load_model", "main", "read_search", "run_recipe",
           "run_search", "search_options"]

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


def run_search(*, game: str | None = None, profile: str | None = None, options: SearchOptions | None = None,
               trainable: Callable | None = None, **flags: Any) -> SearchResult:
    """Run the staged search, as ``python -m focus_tune.search`` does with the same flags, and
    return what it found. What is searched: ``game`` (a built-in scenario; without it, the
    dataset's) and ``profile``; how: ``options``, a :class:`SearchOptions` of the other flags
    (``SearchOptions(data=..., seed=1, overrides={"train.epochs": 5})``; each field a flag), as
    Ray Tune's ``Tuner`` takes a ``TuneConfig``. The flags may also be keywords of the same name
    (``seed=1``; ``--set`` is ``overrides``: ``{"train.epochs": 5}``, ``["train.epochs=5"]`` or
    ``[("train.epochs", 5)]``;
    :func:`search_options`). The search prints its progress as the CLI does. ``trainable``
    replaces the Ray Tune trainable (tests)."""
    return _search(search_options(game=game, profile=profile, options=options, **flags), trainable)


def search_options(*, game: str | None = None, profile: str | None = None, options: SearchOptions | None = None,
                   **flags: Any) -> SearchOptions:
    """The :class:`SearchOptions` that :func:`run_search` runs: ``options`` (default: every
    flag's default) or the flags as keywords, with ``game`` and ``profile`` (refused beside an
    ``options`` that names another scenario or profile); each value checked as its flag's text
    is (``cli.check_values``), then resolved as the command line's options are
    (``cli.resolved``). A TypeError names a keyword that is no flag of a search, a SearchError
    (ConfigError, DataError) a value the command line would refuse."""
    unknown = sorted(set(flags) - set(KEYWORDS))
    if unknown:
        raise TypeError(f"run_search() got an unexpected keyword argument {unknown[0]!r}")
    if options is not None and flags:
        raise TypeError(f"run_search() takes the flags in options= or as keywords, not both: got options and "
                        f"{', '.join(f'{k}=' for k in sorted(flags))}")
    options = options if options is not None else SearchOptions(**flags)
    for keyword, value, name in (("game", game, "scenario"), ("profile", profile, "profile")):
        if value is not None:
            given = getattr(options, name)
            if given != value and given != _DEFAULTS[name]:
                raise SearchError(f"{keyword}={value!r} and options.{name}={given!r}: give one of them")
            options = replace(options, **{name: value})
    for name in ("dry_run", "print_config"):
        if getattr(options, name):
            raise SearchError(f"options.{name}: run_search runs a search; python -m focus_tune.search "
                              f"--{name.replace('_', '-')} prints it without running")
    return resolved(check_values(options))


# run_search's keywords besides game and profile: the flags of a search that runs.
KEYWORDS = tuple(f.name for f in fields(SearchOptions) if f.name not in ("scenario", "profile", *PRINT_ONLY))
_DEFAULTS = {f.name: f.default for f in fields(SearchOptions)}


def _search(opts: SearchOptions, trainable=None) -> SearchResult:
    from .driver import run
    from .storage import run_dir

    run(opts, trainable)  # 0, or an exception
    return read_search(run_dir(opts), opts.register)


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
        run_search(options=opts, trainable=trainable)
        return 0
    except Interrupted:
        return EXIT_INTERRUPTED
    except (ConfigError, DataError, StageFailed, SearchError) as err:
        return error_exit(err)


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
