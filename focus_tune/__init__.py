"""focus-tune: the staged search of a foCus simulator's logit regularization.

The Python API (docs/GUIDE.md, "Python API"): ``focus_tune.run_search(game="hero",
profile="smoke", overrides={"train.epochs": 5})`` runs a search as ``python -m
focus_tune.search`` does and returns a :class:`~focus_tune.search.api.SearchResult`; its flags
may also be one :class:`~focus_tune.search.cli.SearchOptions` (``options=``);
``focus_tune.load_model(...)`` loads a final model or a trial checkpoint. They are imported on
first use, so ``import focus_tune`` stays light. ``focus_tune.run_recipe(data=DIR)`` searches a
training recipe for the data as ``python -m focus_tune.recipe`` does and returns a
:class:`~focus_tune.recipe.tuning.RecipeResult`.
"""

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # for type checkers and IDEs; at run time on first use (__getattr__)
    from .search.api import RecipeResult, SearchOptions, SearchResult, load_model, read_search, run_recipe, run_search

__all__ = ["RecipeResult", "SearchOptions", "SearchResult", "load_model", "read_search", "run_recipe", "run_search"]


def __getattr__(name: str):
    if name in __all__:
        from .search import api

        return getattr(api, name)
    raise AttributeError(f"module 'focus_tune' has no attribute {name!r}")


def __dir__():
    return sorted([*globals(), *__all__])
