"""The main job: ``python -m focus_tune.search --game hero``.

Runs the paper's staged lambda search (stages 1..k1, the joint lambda_all x k2 grid, the
constant family, the unregularized model), retrains the three winners over three seeds,
evaluates them on the test set and writes the paper's tables and figures. The whole search
is one Ray Tune experiment whose searcher (``searcher.PlanSearcher``) hands out each trial
as soon as the plan allows; every trial is tracked in MLflow from this driver
(``callbacks``), and the search state (``storage``) is saved after every trial so that
``--resume`` finishes an interrupted search without retraining what was done.

Modules: ``api`` (``run_search``, ``load_model``, the CLI's ``main``), ``cli`` (the one
``SearchOptions``, each field a flag, and the parser written from them), ``driver`` (the run),
``searcher`` (the plan as a Ray Tune Searcher), ``trainable`` (the Ray adapter of a trial or pack:
the trial layer, ``focus_tune.trial``, trains and scores; it reports and checkpoints),
``callbacks`` (driver-side: MLflow, the state, progress, retries),
``scheduler`` (racing's stop as a Tune TrialScheduler), ``progress`` (the live bar, plain lines
in logs), ``storage`` (run folder, resume checks), ``lock`` (one driver per run folder),
``ray_runtime`` (starting Ray, slots, Ctrl-C), ``checks`` (what a run and a dry run both check),
``dry_run``, ``outputs`` (report, models, efficiency).

Imports: everything below it (procedure, the math, config, data, tracking, report, predict)
and Ray; ``api`` also ``focus_tune.recipe`` (``run_recipe``). Nothing but the entry points (the
Python API, ``python -m focus_tune``, the recipe stage) imports it. Modules without Ray
(``cli``, ``storage``, ``checks``, ``progress``, ...) live here too: this ``__init__`` imports
none of them until a name is asked for.
"""

from ..lazy import exports

# Each public name -> the module of this package that defines it (``..errors``: the project's
# errors, focus_tune.errors), imported on first use (PEP 562), so that importing the package
# imports none of them.
_HOME = {
    "SearchResult": "api", "load_model": "api", "main": "api", "read_search": "api", "run_search": "api",
    "SearchOptions": "cli", "build_parser": "cli", "parse_options": "cli",
    "STATE_FILE": "storage", "SearchState": "storage",
    "SearchError": "..errors",
}
__all__ = sorted(_HOME)

__getattr__, __dir__ = exports(__name__, _HOME, globals())
