"""The main job: ``python -m focus_tune.search --game hero``.

Runs the paper's staged lambda search (stages 1..k1, the joint lambda_all x k2 grid, the
constant family, the unregularized model), retrains the three winners over three seeds,
evaluates them on the test set and writes the paper's tables and figures. The whole search
is one Ray Tune experiment whose searcher (``searcher.PlanSearcher``) hands out each trial
as soon as the plan allows; every trial is tracked in MLflow from this driver
(``callbacks``), and the search state (``storage``) is saved after every trial so that
``--resume`` finishes an interrupted search without retraining what was done.

Modules: ``api`` (``run_search``, ``load_model``, the CLI's ``main``), ``cli`` (flags), ``driver``
(the run), ``searcher``, ``callbacks``, ``storage``, ``ray_runtime`` (starting Ray, slots,
Ctrl-C), ``outputs`` (report, models, efficiency), ``dry_run``.
"""

from .api import SearchResult, load_model, main, read_search, run_search
from .cli import build_parser
from .storage import STATE_FILE, SearchError, SearchState

__all__ = ["STATE_FILE", "SearchError", "SearchResult", "SearchState", "build_parser", "load_model", "main",
           "read_search", "run_search"]
