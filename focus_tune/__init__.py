"""focus-tune: the staged search of a foCus simulator's logit regularization.

The Python API (docs/GUIDE.md, "Python API"): ``focus_tune.run_search(game="hero",
profile="smoke", overrides={"train.epochs": 5})`` runs a search as ``python -m
focus_tune.search`` does and returns a :class:`~focus_tune.search.api.SearchResult`;
``focus_tune.load_model(...)`` loads a final model or a trial checkpoint. They are imported on
first use, so ``import focus_tune`` stays light.
"""

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # for type checkers and IDEs; at run time on first use (__getattr__)
    from .search.api import SearchResult, load_model, read_search, run_search

__all__ = ["SearchResult", "load_model", "read_search", "run_search"]


def __getattr__(name: str):
    if name in __all__:
        from .search import api

        return getattr(api, name)
    raise AttributeError(f"module 'focus_tune' has no attribute {name!r}")


def __dir__():
    return sorted([*globals(), *__all__])
